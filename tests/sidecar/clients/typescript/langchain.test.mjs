// LangChain.js v1 (`createAgent`, LangGraph.js underneath; from npm) driven by a scripted tool-calling chat
// model (a `BaseChatModel` that answers from the conversation alone), guarded by `@loopwarden/client/langchain`
// (agent middleware) against a live `loopwarden sidecar`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { createAgent, createMiddleware, tool } from "langchain";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { MemorySaver } from "@langchain/langgraph";
import { z } from "zod";

import { LoopClient } from "@loopwarden/client";
import { loopwardenMiddleware } from "@loopwarden/client/langchain";
import {
  BLOCK_TEXT, GUARD_WINDOW, PARALLEL_CALLS, PING_PONG_CALLS, REPEATS, assertNeverBlocked, assertParallelOutcome, assertPingPongOutcome, assertRepeatOutcome, client, largeOutput, parallelScript, pingPongScript, rid, serviceStats,
} from "./support.mjs";

/** `calls(n)`: the tool calls after n tool results of this prompt (none: "giving up"). */
class Scripted extends BaseChatModel {
  constructor(calls) {
    super({});
    this.calls = calls;
    this.requests = 0;
  }
  _llmType() {
    return "scripted";
  }
  bindTools() {
    return this;
  }
  async _generate(messages) {
    this.requests += 1;
    const lastHuman = messages.map((m) => m.getType()).lastIndexOf("human");
    const n = messages.slice(lastHuman).filter((m) => m.getType() === "tool").length;
    const next = this.calls(n);
    const message = next.length
      ? new AIMessage({ content: "", tool_calls: next.map(([name, args, id]) => ({ name, args, id, type: "tool_call" })) })
      : new AIMessage("giving up");
    return { generations: [{ text: "", message }] };
  }
}

function repeat(n, args) {
  return new Scripted((done) => (done < n ? [["lookup", args, `call_${done}`]] : []));
}

function texts(messages, n) {
  const byId = new Map(messages.filter((m) => ToolMessage.isInstance(m)).map((m) => [m.tool_call_id, typeof m.content === "string" ? m.content : JSON.stringify(m.content)]));
  return Array.from({ length: n }, (_, i) => byId.get(`call_${i}`));
}

function lookupTool(outputs = () => "status: pending") {
  const runs = [];
  const lookup = tool(async ({ q }) => {
    runs.push(q);
    return outputs(runs.length);
  }, { name: "lookup", description: "Look something up.", schema: z.object({ q: z.string() }) });
  return { lookup, runs };
}

const config = (thread) => ({ configurable: { thread_id: thread }, recursionLimit: 200 });

test("a loop is warned at call 11 and blocked from call 21; the run goes on", async () => {
  const c = client();
  const { lookup, runs } = lookupTool();
  const mw = loopwardenMiddleware(c);
  const agent = createAgent({ model: repeat(REPEATS, { q: "job 42" }), tools: [lookup], middleware: [mw] });
  const out = await agent.invoke({ messages: [new HumanMessage("poll the job")] }, config(rid("lc-loop")));
  assertRepeatOutcome(texts(out.messages, REPEATS), runs.length);
  const blocked = out.messages.find((m) => ToolMessage.isInstance(m) && m.tool_call_id === "call_20");
  assert.equal(blocked.status, "error");
  assert.equal(out.messages.at(-1).content, "giving up");
  const s = c.stats;
  assert.deepEqual([s.checks, s.blocked, s.warned, s.failOpen, s.resultsSent, s.acksSent], [REPEATS, 5, 1, 0, REPEATS, 1]);
  c.close();
});

test("two prompts of one thread are two runs (a checkpointer keeps the history)", async () => {
  const c = client({ tcp: true });
  const mw = loopwardenMiddleware(c);
  const thread = rid("lc-thread");
  const agent = createAgent({ model: repeat(15, { q: "job 42" }), tools: [lookupTool().lookup], middleware: [mw], checkpointer: new MemorySaver() });
  for (const prompt of ["first", "second"]) {
    const out = await agent.invoke({ messages: [new HumanMessage(prompt)] }, config(thread));
    const mine = out.messages.slice(out.messages.findLastIndex((m) => m.getType() === "human"));
    const t = mine.filter((m) => ToolMessage.isInstance(m)).map((m) => m.content);
    assert.equal(t.length, 15);
    assert.ok(t.every((x) => !x.includes("CRITICAL")), prompt); // 30 calls in one thread, never 20 in one run
  }
  c.close();
});

test("a poll whose output changes is never blocked", async () => {
  const c = client();
  const { lookup, runs } = lookupTool((n) => `progress ${n * 4}%`);
  const agent = createAgent({ model: repeat(REPEATS, { q: "build 9" }), tools: [lookup], middleware: [loopwardenMiddleware(c)] });
  const out = await agent.invoke({ messages: [new HumanMessage("wait")] }, config(rid("lc-poll")));
  assertNeverBlocked(texts(out.messages, REPEATS), runs.length);
  c.close();
});

/** The usual error handling: a tool's exception becomes its ToolMessage (status "error"). */
const errorsAsMessages = createMiddleware({
  name: "errors",
  wrapToolCall: async (request, handler) => {
    try {
      return await handler(request);
    } catch (err) {
      return new ToolMessage({ content: `error: ${err.message}`, tool_call_id: request.toolCall.id, name: request.toolCall.name, status: "error" });
    }
  },
});

test("an 84 KB output changing only in its last line is never blocked; the same 84 KB every time is a loop", async () => {
  for (const changing of [true, false]) {
    const c = client();
    const { lookup, runs } = lookupTool(changing ? largeOutput : () => largeOutput());
    const agent = createAgent({ model: repeat(REPEATS, { q: "build 9" }), tools: [lookup], middleware: [loopwardenMiddleware(c)] });
    const out = await agent.invoke({ messages: [new HumanMessage("wait")] }, config(rid("lc-large")));
    if (changing) assertNeverBlocked(texts(out.messages, REPEATS), runs.length);
    else assertRepeatOutcome(texts(out.messages, REPEATS), runs.length);
    assert.equal(c.stats.digested > 0, true);
    c.close();
  }
});

test("errors are reported: a tool's exception goes on to the agent, and the same error 20 times is a loop", async () => {
  const c = client();
  const failing = tool(async () => {
    throw new Error("disk full");
  }, { name: "lookup", description: "Look.", schema: z.object({ q: z.string() }) });
  const bare = createAgent({ model: repeat(REPEATS, { q: "job 42" }), tools: [failing], middleware: [loopwardenMiddleware(c)] });
  await assert.rejects(bare.invoke({ messages: [new HumanMessage("poll")] }, config(rid("lc-throw"))), /disk full/);
  assert.equal(c.stats.resultsSent, 1); // reported before it went on
  const runs = [];
  const lookup = tool(async ({ q }) => {
    runs.push(q);
    throw new Error("connection refused");
  }, { name: "lookup", description: "Look.", schema: z.object({ q: z.string() }) });
  const agent = createAgent({ model: repeat(REPEATS, { q: "job 42" }), tools: [lookup], middleware: [errorsAsMessages, loopwardenMiddleware(c)] });
  const out = await agent.invoke({ messages: [new HumanMessage("poll")] }, config(rid("lc-err")));
  const t = texts(out.messages, REPEATS);
  assert.equal(runs.length, 20);
  assert.ok(t[0].includes("connection refused"), t[0]);
  assert.ok(t[20].startsWith(BLOCK_TEXT), t[20]);
  c.close();
});

test("an abort (the post-compaction guard) ends the run: beforeModel jumps to the end", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  const { lookup, runs } = lookupTool();
  const mw = loopwardenMiddleware(c);
  const model = repeat(8, { q: "huge.log" });
  const agent = createAgent({ model, tools: [lookup], middleware: [mw] });
  const thread = rid("lc-abort");
  const prompt = new HumanMessage({ content: "read the log", id: rid("prompt") });
  await mw.compaction({ threadId: thread, runId: prompt.id }, "overflow");
  const out = await agent.invoke({ messages: [prompt] }, config(thread));
  assert.equal(runs.length, GUARD_WINDOW);
  assert.equal(model.requests, GUARD_WINDOW); // no model call after the abort
  const last = out.messages.at(-1);
  assert.ok(ToolMessage.isInstance(last) && last.tool_call_id === `call_${GUARD_WINDOW - 1}`);
  assert.ok(mw.aborted({ threadId: thread, runId: prompt.id }));
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent > before.acks_sent); // run_end acknowledged the abort
  c.close();
});

test("parallel calls in one model message: each gated and reported", async () => {
  const c = client();
  const model = new Scripted(parallelScript);
  const { lookup, runs } = lookupTool();
  const agent = createAgent({ model, tools: [lookup], middleware: [loopwardenMiddleware(c)] });
  const out = await agent.invoke({ messages: [new HumanMessage("poll")] }, config(rid("lc-par")));
  // the message's calls are admitted together (afterModel): step 11's identical pair is refused (20 identical
  // calls before it) and its fresh call runs
  assertParallelOutcome(texts(out.messages, PARALLEL_CALLS), runs.length, c.stats);
  c.close();
});

test("ping-pong between two calls with no progress: warned on the 10th, refused on the 20th", async () => {
  const c = client();
  const model = new Scripted(pingPongScript);
  const { lookup, runs } = lookupTool();
  const agent = createAgent({ model, tools: [lookup], middleware: [loopwardenMiddleware(c)] });
  const out = await agent.invoke({ messages: [new HumanMessage("poll")] }, config(rid("lc-pp")));
  assertPingPongOutcome(texts(out.messages, PING_PONG_CALLS), runs.length);
  c.close();
});

test("the service down: every call goes ahead, counted", async () => {
  const c = client({ down: true });
  const { lookup, runs } = lookupTool();
  const agent = createAgent({ model: repeat(REPEATS, { q: "x" }), tools: [lookup], middleware: [loopwardenMiddleware(c)] });
  const out = await agent.invoke({ messages: [new HumanMessage("go")] }, config(rid("lc-down")));
  assert.equal(runs.length, REPEATS);
  assert.equal(out.messages.at(-1).content, "giving up");
  assert.equal(c.stats.failOpen, REPEATS);
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

test("openclaw-latest: a message's calls admitted together; the first critical refuses the batch, the second ends the run", async () => {
  const c = new LoopClient({ socketPath: process.env.LW_PROFILE_SOCKET, timeoutMs: 10_000 });
  const mw = loopwardenMiddleware(c);
  const thread = rid("lc-profile");
  for (const prompt of ["first", "second"]) { // a new prompt is a new run: the allowance starts again
    const model = new Scripted((done) => (done / 3 < 14 ? parallel(done / 3 + 1) : []));
    const { lookup, runs } = lookupTool();
    const agent = createAgent({ model, tools: [lookup], middleware: [mw], checkpointer: new MemorySaver() });
    const out = await agent.invoke({ messages: [new HumanMessage(prompt)] }, config(thread));
    const mine = out.messages.slice(out.messages.findLastIndex((m) => m.getType() === "human"));
    const t = new Map(mine.filter((m) => ToolMessage.isInstance(m)).map((m) => [m.tool_call_id, m.content]));
    assert.equal(runs.length, 30, prompt);
    for (let turn = 1; turn < 11; turn++) {
      for (const [, , id] of parallel(turn)) assert.equal(t.get(id).includes(RELEASE_NOTE), turn === 6 && id.endsWith("a"), `${prompt} ${id}: ${t.get(id)}`);
    }
    assert.deepEqual([t.get("t11a"), t.get("t11b"), t.get("t11c")], [TRIGGER_TEXT, SIBLING_TEXT, SIBLING_TEXT]);
    assert.ok(t.get("t12a").startsWith("CRITICAL: Called lookup with identical outcomes 20 times.") && t.get("t12a").endsWith(TERMINAL_TEXT));
    assert.deepEqual([t.get("t12b"), t.get("t12c")], [TERMINAL_SIBLING_TEXT, TERMINAL_SIBLING_TEXT]);
    assert.ok(!t.has("t13a") && !mine.some((m) => m.content === "giving up")); // the run ended (beforeModel)
  }
  c.close();
});
