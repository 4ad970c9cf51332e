// The Vercel AI SDK (`ai` 7, from npm) driven by its own MockLanguageModelV3 (`ai/test`), guarded by
// `@loopwarden/client/ai` against a live `loopwarden sidecar`. Node 22+ (the SDK's own requirement).

import assert from "node:assert/strict";
import { test } from "node:test";

import { generateText, isStepCount, streamText, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { loopwardenRun } from "@loopwarden/client/ai";
import {
  BLOCK_TEXT, GUARD_WINDOW, PARALLEL_CALLS, PING_PONG_CALLS, REPEATS, assertNeverBlocked, assertParallelOutcome, assertPingPongOutcome, assertRepeatOutcome, client, largeOutput, parallelScript, pingPongScript, rid, serviceStats,
} from "./support.mjs";

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

function toolResults(prompt) {
  return prompt.filter((m) => m.role === "tool").flatMap((m) => m.content.filter((p) => p.type === "tool-result"));
}

/** What the model read as a tool result (the providers' rendering of each output type). */
function text(output) {
  if (output.type === "execution-denied") return output.reason ?? "Tool execution denied.";
  if (output.type === "text" || output.type === "error-text") return output.value;
  return JSON.stringify(output.value);
}

/** A scripted model: `calls(n)` is the tool calls it makes after n results (none: it answers "giving up"). */
function scripted(calls) {
  const model = new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const n = toolResults(prompt).length;
      const next = calls(n);
      if (!next.length) return { content: [{ type: "text", text: "giving up" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      return {
        content: next.map(([name, args, id]) => ({ type: "tool-call", toolCallId: id, toolName: name, input: JSON.stringify(args) })),
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      };
    },
  });
  return model;
}

function repeat(n, args) {
  return scripted((done) => (done < n ? [["lookup", args, `call_${done}`]] : []));
}

/** The texts the model read for call_0..call_{n-1} (from the last prompt it got). */
function textsOf(model, n) {
  const last = model.doGenerateCalls.at(-1).prompt;
  const byId = new Map(toolResults(last).map((p) => [p.toolCallId, text(p.output)]));
  return Array.from({ length: n }, (_, i) => byId.get(`call_${i}`));
}

function lookupTool(outputs = () => "status: pending") {
  const runs = [];
  const t = tool({ description: "Look something up.", inputSchema: z.object({ q: z.string() }), execute: async ({ q }) => {
    runs.push(q);
    return outputs(runs.length);
  } });
  return { lookup: t, runs };
}

test("a loop is warned at call 11 and blocked from call 21; the run goes on", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  const model = repeat(REPEATS, { q: "job 42" });
  const { lookup, runs } = lookupTool();
  const yours = { steps: 0, ends: 0 }; // your own settings, handed to the guard, still run
  const lw = loopwardenRun(c, {
    sessionId: rid("ai-loop"),
    stopWhen: isStepCount(40),
    prepareStep: async () => void (yours.steps += 1),
    onToolExecutionEnd: async () => void (yours.ends += 1),
  });
  const out = await generateText({ model, tools: { lookup }, ...lw, prompt: "poll the job" });
  await lw.end();
  assertRepeatOutcome(textsOf(model, REPEATS), runs.length);
  assert.deepEqual(yours, { steps: REPEATS + 1, ends: 20 });
  assert.equal(out.text, "giving up"); // a block does not end the run
  const s = c.stats;
  assert.deepEqual([s.checks, s.blocked, s.warned, s.failOpen, s.resultsSent, s.acksSent], [REPEATS, 5, 1, 0, REPEATS, 1]);
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent - before.acks_sent >= 1 + 5); // the warning shown, each block obeyed (blocked results ack)
  c.close();
});

test("streamText: the same guard, the same outcome", async () => {
  const c = client({ tcp: true });
  const calls = (done) => (done < REPEATS ? [["lookup", { q: "job 7" }, `call_${done}`]] : []);
  const gen = scripted(calls);
  const model = new MockLanguageModelV3({
    doStream: async (options) => {
      const r = await gen.doGenerate(options);
      gen.doGenerateCalls.push(options);
      const parts = [{ type: "stream-start", warnings: [] }];
      for (const p of r.content) parts.push(p.type === "text" ? { type: "text-start", id: "t" } : p);
      if (r.content[0].type === "text") parts.push({ type: "text-delta", id: "t", delta: r.content[0].text }, { type: "text-end", id: "t" });
      parts.push({ type: "finish", finishReason: r.finishReason, usage });
      return { stream: new ReadableStream({ start(ctl) { parts.forEach((p) => ctl.enqueue(p)); ctl.close(); } }) };
    },
  });
  const { lookup, runs } = lookupTool();
  const lw = loopwardenRun(c, { sessionId: rid("ai-stream"), stopWhen: isStepCount(40) });
  const result = streamText({ model, tools: { lookup }, ...lw, prompt: "poll" });
  assert.equal(await result.text, "giving up");
  await lw.end();
  assertRepeatOutcome(textsOf(gen, REPEATS), runs.length);
  c.close();
});

test("a poll whose output changes is never blocked", async () => {
  const c = client();
  const model = repeat(REPEATS, { q: "build 9" });
  const { lookup, runs } = lookupTool((n) => `progress ${n * 4}%`);
  const lw = loopwardenRun(c, { sessionId: rid("ai-poll"), stopWhen: isStepCount(40) });
  await generateText({ model, tools: { lookup }, ...lw, prompt: "wait for the build" });
  await lw.end();
  assertNeverBlocked(textsOf(model, REPEATS), runs.length);
  assert.equal(c.stats.blocked, 0);
  c.close();
});

test("an 84 KB output changing only in its last line is never blocked; the same 84 KB every time is a loop", async () => {
  for (const changing of [true, false]) {
    const c = client();
    const model = repeat(REPEATS, { q: "build 9" });
    const { lookup, runs } = lookupTool(changing ? largeOutput : () => largeOutput());
    const lw = loopwardenRun(c, { sessionId: rid("ai-large"), stopWhen: isStepCount(40) });
    await generateText({ model, tools: { lookup }, ...lw, prompt: "wait for the build" });
    await lw.end();
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
  const lookup = tool({ inputSchema: z.object({ q: z.string() }), execute: async ({ q }) => {
    runs.push(q);
    throw new Error("connection refused");
  } });
  const lw = loopwardenRun(c, { sessionId: rid("ai-err"), stopWhen: isStepCount(40) });
  await generateText({ model, tools: { lookup }, ...lw, prompt: "poll" });
  await lw.end();
  const texts = textsOf(model, REPEATS);
  assert.equal(runs.length, 20);
  assert.ok(texts[0].includes("connection refused"));
  assert.ok(texts[20].startsWith(BLOCK_TEXT), texts[20]);
  assert.equal(c.stats.resultsSent, REPEATS);
});

test("an abort (the post-compaction guard) ends the run: stopWhen, no further model call", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  const model = repeat(8, { q: "huge.log" });
  const { lookup, runs } = lookupTool();
  const lw = loopwardenRun(c, { sessionId: rid("ai-abort"), stopWhen: isStepCount(40) });
  await lw.compaction("overflow");
  const out = await generateText({ model, tools: { lookup }, ...lw, prompt: "read the log" });
  assert.equal(runs.length, GUARD_WINDOW); // the same call and outcome 3 times after compaction
  assert.equal(model.doGenerateCalls.length, GUARD_WINDOW); // not asked again once aborted
  assert.equal(out.finishReason, "tool-calls");
  assert.ok(lw.aborted());
  await lw.end(); // run_end acknowledges the abort
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent > before.acks_sent);
  c.close();
});

test("parallel calls in one step: each gated and reported", async () => {
  const c = client();
  const model = scripted(parallelScript);
  const { lookup, runs } = lookupTool();
  const lw = loopwardenRun(c, { sessionId: rid("ai-par"), stopWhen: isStepCount(40) });
  await generateText({ model, tools: { lookup }, ...lw, prompt: "poll" });
  await lw.end();
  assertParallelOutcome(textsOf(model, PARALLEL_CALLS), runs.length, c.stats);
});

test("ping-pong between two calls with no progress: warned, then blocked; with progress: never blocked", async () => {
  const c = client();
  const pingPong = () => scripted(pingPongScript);
  const model = pingPong();
  const { lookup, runs } = lookupTool();
  const lw = loopwardenRun(c, { sessionId: rid("ai-pp"), stopWhen: isStepCount(40) });
  await generateText({ model, tools: { lookup }, ...lw, prompt: "poll" });
  await lw.end();
  const texts = textsOf(model, PING_PONG_CALLS);
  assertPingPongOutcome(texts, runs.length);
  assert.equal(texts.filter((t) => t.startsWith("CRITICAL")).length, 1);

  const moving = pingPong();
  const other = lookupTool((n) => `step ${n}`);
  const lw2 = loopwardenRun(c, { sessionId: rid("ai-pp2"), stopWhen: isStepCount(40) });
  await generateText({ model: moving, tools: { lookup: other.lookup }, ...lw2, prompt: "poll" });
  await lw2.end();
  assert.equal(other.runs.length, 30);
  assert.ok(textsOf(moving, 30).every((t) => !t.includes("CRITICAL")));
  c.close();
});

test("the service down: every call goes ahead, counted", async () => {
  const c = client({ down: true });
  const model = repeat(REPEATS, { q: "x" });
  const { lookup, runs } = lookupTool();
  const lw = loopwardenRun(c, { sessionId: rid("ai-down"), stopWhen: isStepCount(40) });
  const out = await generateText({ model, tools: { lookup }, ...lw, prompt: "go" });
  await lw.end();
  assert.equal(runs.length, REPEATS);
  assert.equal(out.text, "giving up");
  assert.equal(c.stats.failOpen, REPEATS);
  assert.ok(c.stats.sendErrors >= REPEATS);
});
