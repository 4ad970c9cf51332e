// The OpenClaw plugin against a fake decision service (node:http on a loopback port), no OpenClaw:
// ids mapped from OpenClaw's hook arguments, verdicts mapped to hook results, failures fail open.
// Run: node --test tests/sidecar/clients/openclaw-plugin/ (tests/sidecar/test_openclaw_plugin.py runs it from pytest).

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, test } from "node:test";

import plugin, {
  createGuard,
  DEFAULT_TIMEOUT_MS,
  DEFAULT_URL,
  digest,
  errorBody,
  resultBody,
  settingsFrom,
} from "../../../../streams/sidecar/clients/openclaw-plugin/index.mjs";

const SLACK_MS = 10_000; // cases that expect an answer wait this long: a loaded machine must not turn them into timeouts
let server;
let url;
let requests;
let answer; // (path, body) -> { status, body, delayMs }

before(async () => {
  server = createServer((req, res) => {
    let raw = "";
    req.on("data", (chunk) => (raw += chunk));
    req.on("end", () => {
      const body = JSON.parse(raw || "null");
      requests.push({ path: req.url, body, auth: req.headers.authorization ?? null });
      const { status = 200, body: out = { ok: true }, delayMs = 0 } = answer(req.url, body) ?? {};
      setTimeout(() => {
        if (res.destroyed) return;
        const text = typeof out === "string" ? out : JSON.stringify(out);
        res.writeHead(status, { "content-type": "application/json" });
        res.end(text);
      }, delayMs);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}`;
});

after(() => {
  server.closeAllConnections();
  server.close();
});

beforeEach(() => {
  requests = [];
  answer = () => ({ body: verdict("allow") });
});

function verdict(action, message = null) {
  return {
    action,
    proceed: action === "allow" || action === "warn",
    detector: action === "allow" ? null : "generic_repeat",
    count: action === "allow" ? null : 20,
    message,
    verdict_id: action === "allow" ? null : "v-1",
    source: "local",
    failed_open: false,
    run_id: "run-1",
    tool_call_id: "call-1",
  };
}

function quietLogger() {
  const lines = [];
  return { lines, info: (m) => lines.push(m), warn: (m) => lines.push(m), error: (m) => lines.push(m) };
}

const CTX = {
  agentId: "coder",
  sessionKey: "agent:coder:main",
  sessionId: "5f1c",
  runId: "run-1",
  toolName: "read",
  toolCallId: "call-1",
};
const EVENT = { toolName: "read", params: { path: "missing.txt" }, runId: "run-1", toolCallId: "call-1" };

test("ids: agent, session key, run and call id come from OpenClaw's hook context", async () => {
  const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger: quietLogger() });
  assert.equal(await guard.beforeToolCall(EVENT, CTX), undefined);
  assert.deepEqual(requests, [
    {
      path: "/v1/check",
      auth: null,
      body: {
        agent_id: "coder",
        session_id: "agent:coder:main",
        run_id: "run-1",
        tool_name: "read",
        params: { path: "missing.txt" },
        tool_call_id: "call-1",
      },
    },
  ]);
  assert.equal(guard.stats.allowed, 1);
});

test("ids: the session id when there is no session key, the configured agent id over OpenClaw's", async () => {
  const guard = createGuard(settingsFrom({ url, agentId: "fleet-a", timeoutMs: SLACK_MS }), { logger: quietLogger() });
  const { sessionKey, runId, toolCallId, ...ctx } = CTX;
  await guard.beforeToolCall({ toolName: "exec", params: { command: "ls" }, runId: "run-9", toolCallId: "c-9" }, ctx);
  const body = requests[0].body;
  assert.equal(body.agent_id, "fleet-a");
  assert.equal(body.session_id, "5f1c");
  assert.equal(body.run_id, "run-9"); // the event's run id when the context has none
  assert.equal(body.tool_call_id, "c-9");
  assert.equal(body.tool_name, "exec");
});

test("block: the service's text becomes blockReason; a bearer token is read from the token file", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "lw-plugin-"));
  t.after(() => rmSync(dir, { recursive: true, force: true })); // the token file is not left behind
  writeFileSync(join(dir, "token"), "s3cret\n");
  answer = () => ({ body: verdict("block", "CRITICAL: read has repeated identical no-progress outcomes 20 times.") });
  const guard = createGuard(settingsFrom({ url, tokenFile: join(dir, "token"), timeoutMs: SLACK_MS }), { logger: quietLogger() });
  const out = await guard.beforeToolCall(EVENT, CTX);
  assert.deepEqual(out, {
    block: true,
    blockReason: "CRITICAL: read has repeated identical no-progress outcomes 20 times.",
  });
  assert.equal(requests[0].auth, "Bearer s3cret");
  assert.equal(guard.stats.blocked, 1);
});

test("abort blocks too (OpenClaw cannot end a run from a plugin); no message: a fixed text", async () => {
  answer = () => ({ body: verdict("abort") });
  const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger: quietLogger() });
  assert.deepEqual(await guard.beforeToolCall(EVENT, CTX), {
    block: true,
    blockReason: "Tool call blocked by loop detection.",
  });
});

test("the model-facing text loses control characters and is bounded", async () => {
  answer = () => ({ body: verdict("block", "a\u0000b\u001b[31mc" + "x".repeat(5000)) });
  const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger: quietLogger() });
  const { blockReason } = await guard.beforeToolCall(EVENT, CTX);
  assert.ok(blockReason.startsWith("a b [31mc"));
  assert.equal(blockReason.length, 2000);
});

test("warn: the call goes ahead, the warning is logged and counted", async () => {
  answer = () => ({ body: verdict("warn", "WARNING: read called 10 times with identical arguments.") });
  const logger = quietLogger();
  const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger });
  assert.equal(await guard.beforeToolCall(EVENT, CTX), undefined);
  assert.equal(guard.stats.warned, 1);
  assert.equal(logger.lines.length, 1);
  assert.match(logger.lines[0], /coder read: WARNING: read called 10 times/);
});

test("timeout fails open: allowed, one log line, counted", async () => {
  answer = () => ({ body: verdict("block", "too late"), delayMs: 600 });
  const logger = quietLogger();
  const guard = createGuard(settingsFrom({ url, timeoutMs: 50 }), { logger });
  assert.equal(await guard.beforeToolCall(EVENT, CTX), undefined);
  assert.equal(await guard.beforeToolCall(EVENT, CTX), undefined);
  assert.equal(guard.stats.failOpen, 2);
  assert.equal(guard.stats.failOpenTimeout, 2);
  assert.equal(guard.stats.blocked, 0);
  assert.equal(logger.lines.length, 1); // the second failure within the log interval is counted, not logged
  assert.match(logger.lines[0], /check timed out: no answer within 50 ms; allowing \(fail open/);
});

test("service down, an error status or a bad answer: allowed and counted", async () => {
  const down = createGuard(settingsFrom({ url: "http://127.0.0.1:9" }), { logger: quietLogger() });
  assert.equal(await down.beforeToolCall(EVENT, CTX), undefined);
  assert.equal(down.stats.failOpen, 1);
  assert.equal(down.stats.failOpenTimeout, 0);
  for (const reply of [{ status: 401, body: { error: "unauthorized" } }, { body: "not json" }, { body: { no: "action" } }]) {
    answer = () => reply;
    const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger: quietLogger() });
    assert.equal(await guard.beforeToolCall(EVENT, CTX), undefined);
    assert.equal(guard.stats.failOpen, 1);
  }
});

test("an unreadable token file is counted and logged; calls still go out (the service answers 401: fail open)", async () => {
  const logger = quietLogger();
  const guard = createGuard(settingsFrom({ url, tokenFile: "/nonexistent/token", timeoutMs: SLACK_MS }), { logger });
  assert.equal(guard.stats.tokenErrors, 1);
  assert.match(logger.lines[0], /cannot read token file/);
  await guard.beforeToolCall(EVENT, CTX);
  assert.equal(requests[0].auth, null);
});

test("after_tool_call reports the result or the error with the same ids; agent_end ends the run", async () => {
  const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger: quietLogger() });
  const result = { content: [{ type: "text", text: "hello" }] };
  await guard.afterToolCall({ ...EVENT, result, durationMs: 3 }, CTX);
  await guard.afterToolCall({ ...EVENT, toolCallId: "call-2", error: "File not found: missing.txt" }, CTX);
  await guard.agentEnd({ runId: "run-1", messages: [], success: true }, CTX);
  const ids = { agent_id: "coder", session_id: "agent:coder:main", run_id: "run-1" };
  assert.deepEqual(
    requests.map((r) => [r.path, r.body]),
    [
      ["/v1/result", { ...ids, tool_call_id: "call-1", tool_name: "read", params: { path: "missing.txt" }, result }],
      [
        "/v1/result",
        { ...ids, tool_call_id: "call-2", tool_name: "read", params: { path: "missing.txt" }, error: "File not found: missing.txt" },
      ],
      ["/v1/run_end", ids],
    ],
  );
  assert.equal(guard.stats.reported, 2);
});

test("a large result is digested, never cut: outputs that differ only at the end stay unequal", async () => {
  const guard = createGuard(settingsFrom({ url, timeoutMs: SLACK_MS }), { logger: quietLogger() });
  const big = "y".repeat(200_000);
  const exec = (text, durationMs) => ({
    content: [{ type: "text", text }],
    details: { status: "completed", exitCode: 0, durationMs, aggregated: text },
  });
  await guard.afterToolCall({ ...EVENT, result: exec(big + "1", 10) }, CTX);
  await guard.afterToolCall({ ...EVENT, result: exec(big + "2", 11) }, CTX);
  await guard.afterToolCall({ ...EVENT, result: exec(big + "1", 12) }, CTX);
  const [first, second, third] = requests.map((r) => r.body.result);
  const expected = `[loopwarden digest sha256=${createHash("sha256").update(big + "1").digest("hex")} chars=200001]`;
  // the shape OpenClaw's outcome rules read stays; each long string is its digest
  assert.deepEqual(first, {
    content: [{ type: "text", text: expected }],
    details: { status: "completed", exitCode: 0, durationMs: 10, aggregated: expected },
  });
  assert.notEqual(second.content[0].text, first.content[0].text);
  assert.equal(third.content[0].text, first.content[0].text);
  assert.ok(JSON.stringify(first).length < 1000);
  const down = createGuard(settingsFrom({ url: "http://127.0.0.1:9" }), { logger: quietLogger() });
  await down.afterToolCall({ ...EVENT, result: "x" }, CTX);
  assert.equal(down.stats.reportErrors, 1);
});

test("digests: the hook's form, code points counted; long errors, many strings and deep results", () => {
  assert.equal(digest("\u{1F600}ab"), `[loopwarden digest sha256=${createHash("sha256").update("\u{1F600}ab").digest("hex")} chars=3]`);
  const small = { content: [{ type: "text", text: "ok" }] };
  assert.equal(resultBody(small), small); // small: as OpenClaw gave it
  const long = "e".repeat(70_000);
  assert.equal(errorBody(long), digest(long));
  assert.equal(errorBody(new Error("boom")), "boom"); // OpenClaw hashes an Error's message
  assert.equal(errorBody("x".repeat(5000) + "\n1"), "x".repeat(5000) + "\n1"); // never cut nor rewritten
  const many = { content: Array.from({ length: 12 }, (_, i) => ({ type: "text", text: `${i}`.repeat(60_000) })) };
  const reordered = { content: many.content.map(({ type, text }) => ({ text, type })) };
  assert.match(resultBody(many), /^\[loopwarden digest sha256=[0-9a-f]{64} chars=\d+\]$/); // still too large: one digest
  assert.equal(resultBody(reordered), resultBody(many)); // of its keys-sorted JSON: key order does not matter
  many.content[11].text += "!";
  assert.notEqual(resultBody(reordered), resultBody(many));
  let deep = { text: "z".repeat(70_000) };
  for (let i = 0; i < 100; i += 1) deep = { deep };
  assert.match(resultBody(deep), /^\[loopwarden digest sha256=[0-9a-f]{64} chars=\d+\]$/);
  const a = { details: { x: 1, y: "q".repeat(600_000) } };
  const b = { details: { y: "q".repeat(600_000), x: 1 } };
  assert.equal(typeof resultBody(a), "object"); // one long string: only it is digested
  assert.deepEqual(resultBody(a), resultBody(b));
});

test("settings: URL from the environment, timeout default and bounds", () => {
  assert.equal(settingsFrom({}, {}).url, DEFAULT_URL);
  assert.equal(settingsFrom({}, {}).timeoutMs, DEFAULT_TIMEOUT_MS);
  assert.equal(settingsFrom({}, { LOOPWARDEN_SIDECAR_URL: "http://10.0.0.1:7766/" }).url, "http://10.0.0.1:7766");
  assert.equal(settingsFrom({ timeoutMs: 1 }, {}).timeoutMs, 10);
  assert.equal(settingsFrom({ timeoutMs: 60_000 }, {}).timeoutMs, 10_000);
  assert.equal(settingsFrom({ timeoutMs: "nope" }, {}).timeoutMs, DEFAULT_TIMEOUT_MS);
});

test("register: the three hooks on OpenClaw's plugin api, with the entry's config", async () => {
  const hooks = {};
  plugin.register({
    pluginConfig: { url, agentId: "from-config", timeoutMs: SLACK_MS },
    logger: quietLogger(),
    on: (name, handler) => (hooks[name] = handler),
  });
  assert.equal(plugin.id, "loopwarden");
  assert.deepEqual(Object.keys(hooks).sort(), ["after_tool_call", "agent_end", "before_tool_call"]);
  answer = () => ({ body: verdict("block", "stop") });
  assert.deepEqual(await hooks.before_tool_call(EVENT, CTX), { block: true, blockReason: "stop" });
  assert.equal(requests[0].body.agent_id, "from-config");
});
