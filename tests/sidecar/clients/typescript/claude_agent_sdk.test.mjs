// The Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`, from npm; it runs its bundled Claude Code) with
// `@loopwarden/client/claude-agent-sdk`'s hook callbacks against a live `loopwarden sidecar`. The model is the
// scripted local Anthropic Messages server of anthropic.mjs, asked for `behaviour.script(n)`.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { query } from "@anthropic-ai/claude-agent-sdk";

import { loopwardenHooks } from "@loopwarden/client/claude-agent-sdk";
import { claudeEnv, scriptedAnthropic, toolResults } from "./anthropic.mjs";
import { GUARD_WINDOW, client, rid, serviceStats } from "./support.mjs";

const REPEATS = 25;
let server;
let baseUrl;
let behaviour = { script: () => null, calls: 0 };
let requests = [];
let home;

before(async () => {
  home = mkdtempSync(join(tmpdir(), "lw-claude-sdk-"));
  ({ server, url: baseUrl } = await scriptedAnthropic(() => behaviour, (body) => requests.push(body)));
});

after(() => {
  server.close();
  rmSync(home, { recursive: true, force: true });
});

/** One headless run: the hooks, a throwaway config dir, the local model; every message the SDK yields. */
async function run(hooks, prompt = "poll the job") {
  requests = [];
  const env = { PATH: process.env.PATH, ...claudeEnv(home, baseUrl) };
  const messages = [];
  const q = query({ prompt, options: { hooks, cwd: home, env, model: "claude-sonnet-4-5", maxTurns: 60, allowedTools: ["Bash"], settingSources: [] } });
  for await (const m of q) messages.push(m);
  return messages;
}

/** What the model read as the result of each Bash call, in order (from the last request it got). */
function bashTexts() {
  const last = requests.filter((r) => r.tools?.length).at(-1);
  return toolResults(last).map((b) => (typeof b.content === "string" ? b.content : (b.content ?? []).map((c) => c.text ?? "").join("")));
}

const repeat = (command) => ({ script: () => ["Bash", { command, description: "poll" }], calls: REPEATS });

test("a loop is warned at call 11 and blocked from call 21, the warning as the call's context", async () => {
  const c = client();
  behaviour = repeat("echo 'status: pending'");
  const out = await run(loopwardenHooks(c, { agentId: "claude-sdk" }));
  const texts = bashTexts();
  assert.equal(texts.length, REPEATS);
  // Claude Code shows a denied call as "PreToolUse:Bash hook error: <reason>"; the service names Bash "exec"
  // (OpenClaw's name for a shell tool)
  const blocked = texts.flatMap((t, i) => (/CRITICAL: Called exec with identical arguments and identical outcomes 20 times/.test(t) ? [i] : []));
  assert.deepEqual(blocked, [20, 21, 22, 23, 24], texts.join("\n"));
  assert.ok(texts.slice(0, 20).every((t) => t.includes("status: pending")));
  // the warning reached the model once, beside call 11 (hook context), in every request after it
  const warned = requests.filter((r) => r.tools?.length).map((r) => JSON.stringify(r).includes("10 times with identical arguments"));
  assert.equal(warned.indexOf(true), 11);
  assert.equal(out.at(-1).type, "result");
  const s = c.stats;
  assert.deepEqual([s.checks, s.warned, s.blocked, s.failOpen, s.resultsSent, s.acksSent], [REPEATS, 1, 5, 0, REPEATS, 1]);
  c.close();
});

test("a poll whose output changes is never blocked", async () => {
  const c = client({ tcp: true });
  behaviour = repeat("date +%s%N");
  await run(loopwardenHooks(c));
  const texts = bashTexts();
  assert.equal(texts.length, REPEATS);
  assert.ok(texts.every((t) => !t.includes("CRITICAL")), texts.join("\n"));
  assert.equal(c.stats.blocked, 0);
  c.close();
});

test("a 79 KB output changing only in its last line is never blocked; the same 79 KB every time is a loop", async () => {
  for (const [command, changing] of [["seq 1 14000; date +%s%N", true], ["seq 1 14000", false]]) {
    const c = client({ tcp: true });
    behaviour = repeat(command);
    await run(loopwardenHooks(c));
    const texts = bashTexts();
    assert.equal(texts.length, REPEATS);
    const blocked = texts.flatMap((t, i) => (/CRITICAL: Called exec with identical arguments and identical outcomes 20 times/.test(t) ? [i] : []));
    assert.deepEqual(blocked, changing ? [] : [20, 21, 22, 23, 24], texts.map((t) => t.slice(-200)).join("\n"));
    c.close(); // (Claude Code shortens a long Bash output itself, keeping its end: under 64 KiB, not digested)
  }
});

test("errors are reported (PostToolUseFailure): the same error 20 times is a loop", async () => {
  const c = client();
  behaviour = repeat("echo 'disk full' >&2; exit 3");
  await run(loopwardenHooks(c));
  const texts = bashTexts();
  assert.ok(texts[0].includes("disk full"), texts[0]);
  assert.ok(texts[20].includes("CRITICAL: Called exec"), texts[20]);
  assert.equal(c.stats.resultsSent, REPEATS);
  c.close();
});

test("an abort (the post-compaction guard) ends the session: continue false, run_end acks it", async () => {
  const c = client();
  const before = (await serviceStats()).client;
  behaviour = { script: () => ["Bash", { command: "cat huge.log 2>/dev/null; echo tail", description: "read" }], calls: 8 };
  const hooks = loopwardenHooks(c);
  // the agent compacted its context: PreCompact fires for the run before its first call
  const arm = hooks.UserPromptSubmit[0].hooks[0];
  hooks.UserPromptSubmit[0].hooks[0] = async (input, id, opts) => {
    const out = await arm(input, id, opts);
    await hooks.PreCompact[0].hooks[0]({ ...input, hook_event_name: "PreCompact", trigger: "auto" }, id, opts);
    return out;
  };
  await run(hooks, "read the log");
  // the third identical outcome ended the session after its call: the model was not asked again
  assert.equal(requests.filter((r) => r.tools?.length).length, GUARD_WINDOW);
  assert.equal(bashTexts().length, GUARD_WINDOW - 1);
  const after = (await serviceStats()).client;
  assert.ok(after.acks_sent > before.acks_sent);
  c.close();
});

test("ping-pong between two commands with no progress: warned on the 10th, refused on the 20th", async () => {
  const c = client();
  behaviour = { script: (n) => ["Bash", { command: n % 2 ? "echo b" : "echo a", description: "poll" }], calls: 30 };
  await run(loopwardenHooks(c));
  const texts = bashTexts();
  const blocked = texts.findIndex((t) => t.includes("CRITICAL: You are alternating between repeated tool-call patterns"));
  assert.equal(blocked, 19);
  // the warning is context beside call 10, in every request after it
  const warned = requests.filter((r) => r.tools?.length).map((r) => JSON.stringify(r).includes("You are alternating between repeated tool-call patterns (10"));
  assert.equal(warned.indexOf(true), 10);
  c.close();
});

test("the service down: every call goes ahead, counted", async () => {
  const c = client({ down: true });
  behaviour = repeat("echo 'status: pending'");
  await run(loopwardenHooks(c));
  const texts = bashTexts();
  assert.equal(texts.length, REPEATS);
  assert.ok(texts.every((t) => t.includes("status: pending")));
  assert.equal(c.stats.failOpen, REPEATS);
});
