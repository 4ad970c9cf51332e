// What every TypeScript integration test shares: the service the pytest driver started
// (tests/integration/test_typescript_clients.py: a real `loopwarden sidecar` with OpenClaw's defaults and
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

/** Identical calls whose output changes every time: never blocked (warned on the repeat only). */
export function assertNeverBlocked(texts, toolRuns) {
  assert.equal(toolRuns, REPEATS);
  assert.equal(texts.length, REPEATS);
  assert.ok(texts.every((t) => !t.includes("CRITICAL") && !t.includes("blocked")), texts.join("\n"));
}
