// OpenAI Agents JS (`@openai/agents`, from npm) driven by a scripted Model of our own (the SDK's `Model`
// interface), guarded by `@loopwarden/client/openai-agents` (tool guardrails) against a live `loopwarden sidecar`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Agent, Runner, ToolInputGuardrailTripwireTriggered, Usage, setTracingDisabled, tool } from "@openai/agents";
import { z } from "zod";

import { guardAgent } from "@loopwarden/client/openai-agents";
import {
  BLOCK_TEXT, GUARD_WINDOW, PARALLEL_CALLS, PING_PONG_CALLS, REPEATS, assertNeverBlocked, assertParallelOutcome, assertPingPongOutcome, assertRepeatOutcome, client, largeOutput, parallelScript, pingPongScript, rid, serviceStats,
} from "./support.mjs";

setTracingDisabled(true);

function results(input) {
  return Array.isArray(input) ? input.filter((i) => i.type === "function_call_result") : [];
}

function outputText(item) {
  const o = item.output;
  if (typeof o === "string") return o;
  if (o?.type === "text") return o.text;
  return JSON.stringify(o);
}

/** A scripted model: `calls(n)` is the calls it makes after n results (none: it answers "giving up"). */
class Scripted {
  constructor(calls) {
    this.calls = calls;
    this.requests = [];
  }
  async getResponse(request) {
    this.requests.push(request);
    const next = this.calls(results(request.input).length);
    const usage = new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 });
    if (!next.length) {
      return { usage, output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "giving up" }] }] };
    }
    return { usage, output: next.map(([name, args, id]) => ({ type: "function_call", callId: id, name, arguments: JSON.stringify(args), status: "completed" })) };
  }
  async *getStreamedResponse() {
    throw new Error("not used");
  }
}

function repeat(n, args) {
  return new Scripted((done) => (done < n ? [["lookup", args, `call_${done}`]] : []));
}

function textsOf(model, n) {
  const byId = new Map(results(model.requests.at(-1).input).map((i) => [i.callId, outputText(i)]));
  return Array.from({ length: n }, (_, i) => byId.get(`call_${i}`));
}

function lookupTool(outputs = () => "status: pending") {
  const runs = [];
  const lookup = tool({ name: "lookup", description: "Look something up.", parameters: z.object({ q: z.string() }), execute: async ({ q }) => {
    runs.push(q);
    return outputs(runs.length);
  } });
  return { lookup, runs };
}

function agentWith(model, tools) {
  return new Agent({ name: "oa-agent", instructions: "poll", model, tools });
}

test("a loop is warned at call 11 and blocked from call 21; the run goes on", async () => {
  const c = client();
  const model = repeat(REPEATS, { q: "job 42" });
  const { lookup, runs } = lookupTool();
  const agent = agentWith(model, [lookup]);
  const lw = guardAgent(agent, c);
  const out = await lw.run(new Runner(), "poll the job", { sessionId: rid("oa-loop"), maxTurns: 40 });
  assertRepeatOutcome(textsOf(model, REPEATS), runs.length);
  assert.equal(out.finalOutput, "giving up");
  const s = c.stats;
  assert.deepEqual([s.checks, s.blocked, s.warned, s.failOpen, s.resultsSent, s.acksSent], [REPEATS, 5, 1, 0, REPEATS, 1]);
  c.close();
});

test("a poll whose output changes is never blocked", async () => {
  const c = client({ tcp: true });
  const model = repeat(REPEATS, { q: "build 9" });
  const { lookup, runs } = lookupTool((n) => `progress ${n * 4}%`);
  const lw = guardAgent(agentWith(model, [lookup]), c);
  await lw.run(new Runner(), "wait", { sessionId: rid("oa-poll"), maxTurns: 40 });
  assertNeverBlocked(textsOf(model, REPEATS), runs.length);
  c.close();
});

test("an 84 KB output changing only in its last line is never blocked; the same 84 KB every time is a loop", async () => {
  for (const changing of [true, false]) {
    const c = client();
    const model = repeat(REPEATS, { q: "build 9" });
    const { lookup, runs } = lookupTool(changing ? largeOutput : () => largeOutput());
    const lw = guardAgent(agentWith(model, [lookup]), c);
    await lw.run(new Runner(), "wait", { sessionId: rid("oa-large"), maxTurns: 40 });
    if (changing) assertNeverBlocked(textsOf(model, REPEATS), runs.length);
    else assertRepeatOutcome(textsOf(model, REPEATS), runs.length);
    assert.equal(c.stats.digested > 0, true);
    c.close();
  }
});

test("errors are reported (as the text the SDK gives the model): the same error 20 times is a loop", async () => {
  const c = client();
  const model = repeat(REPEATS, { q: "job 42" });
  const runs = [];
  const lookup = tool({ name: "lookup", description: "Look.", parameters: z.object({ q: z.string() }), execute: async ({ q }) => {
    runs.push(q);
    throw new Error("connection refused");
  } });
  const lw = guardAgent(agentWith(model, [lookup]), c);
  await lw.run(new Runner(), "poll", { sessionId: rid("oa-err"), maxTurns: 40 });
  const texts = textsOf(model, REPEATS);
  assert.equal(runs.length, 20);
  assert.ok(texts[0].startsWith("An error occurred while running the tool"), texts[0]); // the SDK's own text
  assert.ok(texts[20].startsWith(BLOCK_TEXT), texts[20]);
  c.close();
});

test("an abort (the post-compaction guard) ends the run: the tripwire raises, run_end acks it", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  const model = repeat(8, { q: "huge.log" });
  const { lookup, runs } = lookupTool();
  const lw = guardAgent(agentWith(model, [lookup]), c);
  const context = {};
  const runner = new Runner();
  const run = runner.run.bind(runner);
  runner.run = async (agent, input, options) => {
    await lw.compaction(options.context, "overflow"); // the agent compacted its context and retries
    return run(agent, input, options);
  };
  // the third identical outcome aborts the run; its next call trips the guardrail, which ends the run
  const tripped = (err) => err instanceof ToolInputGuardrailTripwireTriggered || err?.error instanceof ToolInputGuardrailTripwireTriggered;
  await assert.rejects(lw.run(runner, "read the log", { sessionId: rid("oa-abort"), maxTurns: 40, context }), tripped);
  assert.equal(runs.length, GUARD_WINDOW);
  assert.equal(model.requests.length, GUARD_WINDOW + 1); // the fourth call is refused, no further model call
  assert.ok(lw.aborted(context));
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent > before.acks_sent); // run_end acknowledged the abort
  c.close();
});

test("parallel calls in one turn: each gated and reported", async () => {
  const c = client();
  const model = new Scripted(parallelScript);
  const { lookup, runs } = lookupTool();
  const lw = guardAgent(agentWith(model, [lookup]), c);
  await lw.run(new Runner(), "poll", { sessionId: rid("oa-par"), maxTurns: 40 });
  assertParallelOutcome(textsOf(model, PARALLEL_CALLS), runs.length, c.stats);
  c.close();
});

test("ping-pong between two calls with no progress: warned on the 10th, refused on the 20th", async () => {
  const c = client();
  const model = new Scripted(pingPongScript);
  const { lookup, runs } = lookupTool();
  await guardAgent(agentWith(model, [lookup]), c).run(new Runner(), "poll", { sessionId: rid("oa-pp"), maxTurns: 40 });
  assertPingPongOutcome(textsOf(model, PING_PONG_CALLS), runs.length);
  c.close();
});

test("the service down: every call goes ahead, counted", async () => {
  const c = client({ down: true });
  const model = repeat(REPEATS, { q: "x" });
  const { lookup, runs } = lookupTool();
  const lw = guardAgent(agentWith(model, [lookup]), c);
  const out = await lw.run(new Runner(), "go", { sessionId: rid("oa-down"), maxTurns: 40 });
  assert.equal(runs.length, REPEATS);
  assert.equal(out.finalOutput, "giving up");
  assert.equal(c.stats.failOpen, REPEATS);
});
