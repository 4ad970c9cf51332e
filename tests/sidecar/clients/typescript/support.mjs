// What every TypeScript integration test shares: the service the pytest driver started
// (tests/sidecar/test_typescript_clients.py: a real `loopwarden sidecar` with OpenClaw's defaults and
// detection on: warning at 10 identical calls, critical at 20 identical calls with identical outcomes,
// post-compaction guard window 3), the scenario's constants and its assertions. The driver copies this
// folder next to the package and the framework from the npm cache, so imports resolve as in a user's project.

import assert from "node:assert/strict";
import http from "node:http";
import { randomUUID } from "node:crypto";

import { LoopClient } from "@loopwarden/client";

export const REPEATS = 25;
export const RUNS_BEFORE_BLOCK = 20;
export const WARNED_CALL = 11; // 1-based: the call whose result carries the warning
export const BLOCK_TEXT = "CRITICAL: Called lookup with identical arguments and identical outcomes 20 times.";
export const WARN_TEXT = "WARNING: You have called lookup 10 times with identical arguments.";
export const GUARD_WINDOW = 3;

export const URL_ = process.env.LW_URL; // http://127.0.0.1:PORT
export const SOCKET = process.env.LW_SOCKET; // the same service's Unix socket
export const DOWN = process.env.LW_DOWN_URL; // nothing listens there

export function rid(tag) {
  return `${tag}-${randomUUID().slice(0, 10)}`;
}

/** A client of the live service (over its Unix socket unless `tcp`); `down`: of no service at all. */
export function client({ tcp = false, down = false, agentId = "ts-agent" } = {}) {
  if (down) return new LoopClient({ url: DOWN, agentId, timeoutMs: 2000, logger: null });
  return new LoopClient(tcp ? { url: URL_, agentId, timeoutMs: 10_000 } : { socketPath: SOCKET, agentId, timeoutMs: 10_000 });
}

/** The service's counters (`GET /v1/stats`). */
export function serviceStats() {
  return new Promise((resolve, reject) => {
    http.get(`${URL_}/v1/stats`, (res) => {
      let raw = "";
      res.on("data", (c) => (raw += c));
      res.on("end", () => resolve(JSON.parse(raw)));
    }).on("error", reject);
  });
}

/** `texts`: what the model got as each of the 25 calls' results, in order. */
export function assertRepeatOutcome(texts, toolRuns) {
  assert.equal(toolRuns, RUNS_BEFORE_BLOCK);
  assert.equal(texts.length, REPEATS);
  texts.forEach((t, i) => assert.equal(t.includes(WARN_TEXT), i === WARNED_CALL - 1, `call ${i + 1}: ${t}`));
  texts.forEach((t, i) => assert.equal(t.startsWith(BLOCK_TEXT), i >= RUNS_BEFORE_BLOCK, `call ${i + 1}: ${t}`));
}

/** A tool output over 64 KiB (the client sends its digest): 84,000 characters of build log, then a last line
 * that carries `n` (progress seen only at the very end) or, without `n`, never changes. */
export function largeOutput(n) {
  return "compiling module ...\n".repeat(4000) + (n === undefined ? "done\n" : `finished step ${n}\n`);
}

/** Identical calls whose output changes every time: never blocked (warned on the repeat only). */
export function assertNeverBlocked(texts, toolRuns) {
  assert.equal(toolRuns, REPEATS);
  assert.equal(texts.length, REPEATS);
  assert.ok(texts.every((t) => !t.includes("CRITICAL") && !t.includes("blocked")), texts.join("\n"));
}

/** One model message of three calls per step, 12 steps: an identical pair (`job 42`) beside a fresh call. */
export const PARALLEL_CALLS = 36;
export function parallelScript(done) {
  return done < PARALLEL_CALLS
    ? [["lookup", { q: "job 42" }, `call_${done}`], ["lookup", { q: "job 42" }, `call_${done + 1}`], ["lookup", { q: `note ${done}` }, `call_${done + 2}`]]
    : [];
}

/**
 * The parallel scenario's outcome (`texts`: the 36 results the model read): the repeated pair reaches 20
 * identical calls in step 10, so step 11 refuses its pair (calls 30, 31) and runs its fresh call; by step 12
 * the fresh calls have pushed enough of the pair out of OpenClaw's 30-call history that it runs again.
 */
export function assertParallelOutcome(texts, toolRuns, stats) {
  assert.deepEqual(texts.flatMap((t, i) => (t.startsWith(BLOCK_TEXT) ? [i] : [])), [30, 31]);
  assert.equal(toolRuns, PARALLEL_CALLS - 2);
  assert.deepEqual(texts.flatMap((t, i) => (t.includes(WARN_TEXT) ? [i] : [])), [15]); // the pair's 11th call
  assert.equal(stats.resultsSent, PARALLEL_CALLS);
}

/** Two calls alternating with no progress, one a step, 30 steps. */
export const PING_PONG_CALLS = 30;
export function pingPongScript(done) {
  return done < PING_PONG_CALLS ? [["lookup", { q: done % 2 ? "b" : "a" }, `call_${done}`]] : [];
}

/**
 * The ping-pong's outcome: warned on the 10th alternating call, refused on the 20th; the refusal is not a call
 * of the run, so the alternation starts again and the rest run (OpenClaw's rule: a block does not end the run).
 */
export function assertPingPongOutcome(texts, toolRuns) {
  const warned = texts.findIndex((t) => t.includes("WARNING: You are alternating between repeated tool-call patterns"));
  const blocked = texts.findIndex((t) => t.startsWith("CRITICAL: You are alternating between repeated tool-call patterns"));
  assert.deepEqual([warned, blocked, toolRuns], [9, 19, PING_PONG_CALLS - 1]);
}
