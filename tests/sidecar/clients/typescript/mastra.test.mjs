// Mastra (`@mastra/core` 1.x, from npm) driven by its own scripted model (`MastraLanguageModelV2Mock` from
// `@mastra/core/test-utils/llm-mock`), guarded by `@loopwarden/client/mastra` against a live `loopwarden
// sidecar`. Node 22.13+ (Mastra's own requirement).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Agent } from "@mastra/core/agent";
import { RequestContext } from "@mastra/core/request-context";
import { MastraLanguageModelV2Mock } from "@mastra/core/test-utils/llm-mock";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

import { LoopClient } from "@loopwarden/client";
import { loopwardenAgent } from "@loopwarden/client/mastra";
import {
  BLOCK_TEXT, GUARD_WINDOW, WARN_TEXT, WARNED_CALL, PARALLEL_CALLS, PING_PONG_CALLS, REPEATS, assertNeverBlocked, assertParallelOutcome, assertPingPongOutcome, assertRepeatOutcome, client, largeOutput, parallelScript, pingPongScript, rid, serviceStats,
} from "./support.mjs";

const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

function toolResults(prompt) {
  return prompt.filter((m) => m.role === "tool").flatMap((m) => m.content.filter((p) => p.type === "tool-result"));
}

/** What the model read as a tool result. */
function text(output) {
  if (output.type === "text" || output.type === "error-text") return output.value;
  return JSON.stringify(output.value);
}

/** A model's answer after `prompt`: `calls(n)` is the tool calls it makes after n results (none: "giving up"). */
function answer(calls, prompt) {
  const next = calls(toolResults(prompt).length);
  if (!next.length) return { content: [{ type: "text", text: "giving up" }], finishReason: "stop", usage, warnings: [] };
  return {
    content: next.map(([name, args, id]) => ({ type: "tool-call", toolCallId: id, toolName: name, input: JSON.stringify(args) })),
    finishReason: "tool-calls",
    usage,
    warnings: [],
  };
}

/** The same answer as stream parts (for `agent.stream`). */
function parts(r) {
  const out = [{ type: "stream-start", warnings: [] }];
  for (const p of r.content) {
    if (p.type === "text") out.push({ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: p.text }, { type: "text-end", id: "t" });
    else out.push(p);
  }
  out.push({ type: "finish", finishReason: r.finishReason, usage });
  return new ReadableStream({ start(ctl) { out.forEach((p) => ctl.enqueue(p)); ctl.close(); } });
}

/** Mastra's scripted model: `calls(n)` is the tool calls it makes after n results (none: it answers "giving up"). */
function scripted(calls) {
  return new MastraLanguageModelV2Mock({
    doGenerate: async ({ prompt }) => answer(calls, prompt),
    doStream: async ({ prompt }) => ({ stream: parts(answer(calls, prompt)) }),
  });
}

function repeat(n, args) {
  return scripted((done) => (done < n ? [["lookup", args, `call_${done}`]] : []));
}

/** The texts the model read for call_0..call_{n-1} (from the last prompt it got). */
function textsOf(model, n) {
  const last = [...model.doGenerateCalls, ...model.doStreamCalls].at(-1).prompt;
  const byId = new Map(toolResults(last).map((p) => [p.toolCallId, text(p.output)]));
  return Array.from({ length: n }, (_, i) => byId.get(`call_${i}`));
}

function lookupTool(outputs = () => "status: pending") {
  const runs = [];
  const lookup = createTool({
    id: "lookup",
    description: "Look something up.",
    inputSchema: z.object({ q: z.string() }),
    execute: async ({ q }) => {
      runs.push(q);
      return outputs(runs.length);
    },
  });
  return { lookup, runs };
}

function agent(model, tools, lw) {
  return new Agent({ id: "mastra-agent", name: "mastra-agent", instructions: "Help.", model, tools, ...lw });
}

test("a loop is warned at call 11 and blocked from call 21; the run goes on", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  const model = repeat(REPEATS, { q: "job 42" });
  const { lookup, runs } = lookupTool();
  const yours = { before: 0, after: 0 }; // your own hooks, handed to the guard, still run
  const lw = loopwardenAgent(c, {
    sessionId: rid("mastra-loop"),
    hooks: { beforeToolCall: () => void (yours.before += 1), afterToolCall: () => void (yours.after += 1) },
  });
  const out = await agent(model, { lookup }, lw).generate("poll the job", { maxSteps: 40 });
  assertRepeatOutcome(textsOf(model, REPEATS), runs.length);
  assert.deepEqual(yours, { before: 20, after: 20 });
  assert.equal(out.text, "giving up"); // a block does not end the run
  const s = c.stats;
  assert.deepEqual([s.checks, s.blocked, s.warned, s.failOpen, s.resultsSent, s.acksSent], [REPEATS, 5, 1, 0, REPEATS, 1]);
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent - before.acks_sent >= 1 + 5); // the warning shown, each block obeyed
  c.close();
});

test("stream: the same guard, the same outcome", async () => {
  const c = client({ tcp: true });
  const model = repeat(REPEATS, { q: "job 7" });
  const { lookup, runs } = lookupTool();
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-stream") });
  const rc = new RequestContext();
  const out = await agent(model, { lookup }, lw).stream("poll", { maxSteps: 40, requestContext: rc });
  assert.equal(await out.text, "giving up");
  assertRepeatOutcome(textsOf(model, REPEATS), runs.length);
  assert.ok(lw.ref(rc).sessionId.startsWith("mastra-stream"));
  assert.equal(lw.ref(rc).agentId, "mastra-agent"); // the Mastra agent's id
  c.close();
});

test("a poll whose output changes is never blocked", async () => {
  const c = client();
  const model = repeat(REPEATS, { q: "build 9" });
  const { lookup, runs } = lookupTool((n) => `progress ${n * 4}%`);
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-poll") });
  await agent(model, { lookup }, lw).generate("wait for the build", { maxSteps: 40 });
  assertNeverBlocked(textsOf(model, REPEATS), runs.length);
  assert.equal(c.stats.blocked, 0);
  c.close();
});

test("an 84 KB output changing only in its last line is never blocked; the same 84 KB every time is a loop", async () => {
  for (const changing of [true, false]) {
    const c = client();
    const model = repeat(REPEATS, { q: "build 9" });
    const { lookup, runs } = lookupTool(changing ? largeOutput : () => largeOutput());
    const lw = loopwardenAgent(c, { sessionId: rid("mastra-large") });
    await agent(model, { lookup }, lw).generate("wait for the build", { maxSteps: 40 });
    if (changing) assertNeverBlocked(textsOf(model, REPEATS), runs.length);
    else assertRepeatOutcome(textsOf(model, REPEATS), runs.length);
    assert.equal(c.stats.digested > 0, true);
    c.close();
  }
});

test("errors are reported: the same error 20 times is a loop too", async () => {
  const c = client();
  const model = repeat(REPEATS, { q: "job 42" });
  const runs = [];
  const lookup = createTool({ id: "lookup", description: "Look something up.", inputSchema: z.object({ q: z.string() }), execute: async ({ q }) => {
    runs.push(q);
    throw new Error("connection refused");
  } });
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-err") });
  await agent(model, { lookup }, lw).generate("poll", { maxSteps: 40 });
  const texts = textsOf(model, REPEATS);
  assert.equal(runs.length, 20);
  assert.ok(texts[0].includes("connection refused"), texts[0]);
  texts.forEach((t, i) => assert.equal(t.includes(WARN_TEXT), i === WARNED_CALL - 1, `call ${i + 1}: ${t}`)); // on the error too
  assert.ok(texts[20].startsWith(BLOCK_TEXT), texts[20]);
  assert.equal(c.stats.resultsSent, REPEATS);
  assert.equal(c.stats.acksSent, 1);
  c.close();
});

test("an abort (the post-compaction guard) ends the run: a tripwire, no further model call", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  const model = repeat(8, { q: "huge.log" });
  const { lookup, runs } = lookupTool();
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-abort") });
  const rc = new RequestContext();
  await lw.compaction(rc, "overflow");
  const out = await agent(model, { lookup }, lw).generate("read the log", { maxSteps: 40, requestContext: rc });
  assert.equal(runs.length, GUARD_WINDOW); // the same call and outcome 3 times after compaction
  assert.equal(model.doGenerateCalls.length, GUARD_WINDOW); // not asked again once aborted
  assert.ok(out.tripwire, JSON.stringify(out.finishReason));
  assert.ok(lw.aborted(rc));
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent > before.acks_sent); // run_end acknowledged the abort
  c.close();
});

test("parallel calls in one step: each gated and reported", async () => {
  const c = client();
  const model = scripted(parallelScript);
  const { lookup, runs } = lookupTool();
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-par") });
  await agent(model, { lookup }, lw).generate("poll", { maxSteps: 40 });
  assertParallelOutcome(textsOf(model, PARALLEL_CALLS), runs.length, c.stats);
  c.close();
});

test("ping-pong between two calls with no progress: warned, then blocked; with progress: never blocked", async () => {
  const c = client();
  const model = scripted(pingPongScript);
  const { lookup, runs } = lookupTool();
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-pp") });
  await agent(model, { lookup }, lw).generate("poll", { maxSteps: 40 });
  const texts = textsOf(model, PING_PONG_CALLS);
  assertPingPongOutcome(texts, runs.length);
  assert.equal(texts.filter((t) => t.startsWith("CRITICAL")).length, 1);

  const moving = scripted(pingPongScript);
  const other = lookupTool((n) => `step ${n}`);
  const lw2 = loopwardenAgent(c, { sessionId: rid("mastra-pp2") });
  await agent(moving, { lookup: other.lookup }, lw2).generate("poll", { maxSteps: 40 });
  assert.equal(other.runs.length, 30);
  assert.ok(textsOf(moving, 30).every((t) => !t.includes("CRITICAL")));
  c.close();
});

test("the service down: every call goes ahead, counted", async () => {
  const c = client({ down: true });
  const model = repeat(REPEATS, { q: "x" });
  const { lookup, runs } = lookupTool();
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-down") });
  const out = await agent(model, { lookup }, lw).generate("go", { maxSteps: 40 });
  assert.equal(runs.length, REPEATS);
  assert.equal(out.text, "giving up");
  assert.equal(c.stats.failOpen, REPEATS);
  assert.ok(c.stats.sendErrors >= REPEATS);
});

// ---- the openclaw-latest profile: the OpenClaw release's bounded recovery with parallel tool calls, as in
// tests/runner/adapter_cases.py (each model message calls lookup(q="job 42") twice and a fresh lookup)
const RELEASE_NOTE = "[System note: Tool-loop warning after 10 repeated calls. Change your approach or stop if you are not making progress.]";
const TRIGGER_TEXT = "CRITICAL: Called lookup with identical outcomes 20 times. Session execution blocked to prevent runaway loops."
  + "\n\nDo not repeat this exact tool action. Reassess the task. You may answer the user, ask for clarification, "
  + "or continue with a different tool or different arguments.";
const SIBLING_TEXT = "This tool was not executed because another call in the batch triggered critical tool-loop recovery. "
  + "Reassess the task before choosing the next action.";
const TERMINAL_TEXT = "Critical tool-loop recovery failed because another critical loop was detected. This run is stopping now.";
const TERMINAL_SIBLING_TEXT = "This tool was not executed because another call in the batch repeated a critical tool loop. "
  + "This run is stopping now.";
const parallel = (turn) => [["lookup", { q: "job 42" }, `t${turn}a`], ["lookup", { q: "job 42" }, `t${turn}b`], ["lookup", { q: `note ${turn}` }, `t${turn}c`]];

/** Every tool result of a finished call, by call id (what the model read, or would have read next). */
function resultsOf(out) {
  const all = (out.steps ?? []).flatMap((s) => s.toolResults ?? []).map((r) => r.payload ?? r);
  return new Map(all.map((r) => [r.toolCallId, typeof (r.result ?? r.output) === "string" ? (r.result ?? r.output) : JSON.stringify(r.result ?? r.output)]));
}

test("openclaw-latest: a step's calls admitted together; the first critical refuses the batch, the second ends the run", async () => {
  const c = new LoopClient({ socketPath: process.env.LW_PROFILE_SOCKET, timeoutMs: 10_000 });
  const lw = loopwardenAgent(c, { sessionId: rid("mastra-profile") });
  for (const prompt of ["first", "second"]) { // a new prompt is a new run: the allowance starts again
    const model = scripted((done) => (done / 3 < 14 ? parallel(done / 3 + 1) : []));
    const { lookup, runs } = lookupTool();
    const out = await agent(model, { lookup }, lw).generate(prompt, { maxSteps: 40 });
    const t = resultsOf(out);
    assert.equal(runs.length, 30, prompt);
    for (let turn = 1; turn < 11; turn++) {
      for (const [, , id] of parallel(turn)) assert.equal(t.get(id).includes(RELEASE_NOTE), turn === 6 && id.endsWith("a"), `${prompt} ${id}: ${t.get(id)}`);
    }
    assert.deepEqual([t.get("t11a"), t.get("t11b"), t.get("t11c")], [TRIGGER_TEXT, SIBLING_TEXT, SIBLING_TEXT]);
    assert.ok(t.get("t12a").startsWith("CRITICAL: Called lookup with identical outcomes 20 times.") && t.get("t12a").endsWith(TERMINAL_TEXT), t.get("t12a"));
    assert.deepEqual([t.get("t12b"), t.get("t12c")], [TERMINAL_SIBLING_TEXT, TERMINAL_SIBLING_TEXT]);
    assert.equal(model.doGenerateCalls.length, 12); // the run ended (processInputStep's abort): no 13th step
    assert.ok(out.tripwire);
  }
  c.close();
});
