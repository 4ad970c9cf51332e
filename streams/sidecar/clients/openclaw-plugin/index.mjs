// loopwarden for OpenClaw: every tool call asks the local decision service (`loopwarden sidecar`) first.
//
// OpenClaw decides loops per run, in-process; the service sees the whole fleet (other runs, agents,
// gateways). `before_tool_call` sends the call to `POST /v1/check` and blocks it with the service's
// text when the verdict says so; `after_tool_call` sends the outcome to `POST /v1/result`;
// `agent_end` ends the run (`POST /v1/run_end`). Plain ESM, no dependencies: Node's `http` over the
// service's Unix socket (by default `~/.loopwarden/run/sidecar.sock`, the service's own default), or
// the global `fetch` for an `http://` URL.
//
// Nothing is sent to a listener that is not this user's service: the socket's folder must be owned
// by this user (or root) and writable by no one else, and the socket too (Node cannot read a Unix
// socket peer's uid, so the folder and the socket file's owner stand for it); a loopback TCP port
// must be listened on by this user (or root), read from Linux's /proc/net/tcp. The model is shown
// the service's text only from a listener so checked; otherwise (TCP beyond loopback, no /proc) the
// text is built here from the verdict's fields.
//
// The service is advisory from OpenClaw's point of view: OpenClaw fails a `before_tool_call` hook
// closed (blocks the call) when it throws or takes longer than 15 s, so this plugin never throws
// and gives up after its own short timeout (`timeoutMs`, default 250 ms): loopwarden trouble
// allows the call, logs one line and is counted.

import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { homedir } from "node:os";
import { join } from "node:path";

// The listener checks, the verdict text from fields and the digest form are the TypeScript client's
// (@loopwarden/client, beside this folder): one implementation for every JavaScript client.
import { digest } from "../typescript/index.js";
import { checkSocket, checkTcpListener, fieldText } from "../typescript/listener.js";

export { checkSocket, checkTcpListener, digest, fieldText };

export const PLUGIN_ID = "loopwarden";
/** The service's default socket (as `loopwarden.hooks.service.default_socket`): no port to agree on. */
export const DEFAULT_URL = `unix:${join(homedir(), ".loopwarden", "run", "sidecar.sock")}`;
export const DEFAULT_TIMEOUT_MS = 250;
const MIN_TIMEOUT_MS = 10;
const MAX_TIMEOUT_MS = 10_000;
const MAX_TEXT = 2000; // the most of the service's text the model is shown
const MAX_ID = 512; // ids longer than this are cut (the service bounds them too)
const MAX_TEXT_CHARS = 65_536; // a string of a result (or an error) longer than this is sent as its digest
const MAX_RESULT_CHARS = 512 * 1024; // a result still longer than this as JSON is sent as one digest (the service takes 1 MiB)
const MAX_DEPTH = 63; // a result nested deeper is sent as one digest (the service refuses bodies nested past 64)
const MAX_PENDING = 4096; // calls between before and after, remembered for the outcome
const LOG_EVERY_MS = 30_000; // repeated failures of one kind: one log line per this long
const BLOCKED = "Tool call blocked by loop detection.";
const MAX_ANSWER = 1 << 20; // bytes of an answer read over the socket
/** One POST over a Unix socket: the answer's status and JSON (Node's `http` with `socketPath`). */
function postUnix(socketPath, path, headers, body, signal) {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ socketPath, path, method: "POST", headers: { ...headers, host: "localhost" }, signal }, (res) => {
      const chunks = [];
      let size = 0;
      res.on("data", (chunk) => {
        size += chunk.length;
        if (size > MAX_ANSWER) req.destroy(new Error("answer too large"));
        else chunks.push(chunk);
      });
      res.on("end", () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** The plugin's settings from its config block (`plugins.entries.loopwarden.config`) and the environment. */
export function settingsFrom(config = {}, env = process.env) {
  const cfg = config && typeof config === "object" ? config : {};
  const home = env.HOME ? join(env.HOME, ".loopwarden", "run", "sidecar.sock") : null;
  const fallback = home ? `unix:${home}` : DEFAULT_URL;
  const url = String(cfg.url || env.LOOPWARDEN_SIDECAR_URL || fallback).replace(/\/+$/, "");
  const raw = Number(cfg.timeoutMs ?? env.LOOPWARDEN_OPENCLAW_TIMEOUT_MS ?? DEFAULT_TIMEOUT_MS);
  const timeoutMs = Number.isFinite(raw) ? Math.min(Math.max(Math.round(raw), MIN_TIMEOUT_MS), MAX_TIMEOUT_MS) : DEFAULT_TIMEOUT_MS;
  const tokenFile = cfg.tokenFile || env.LOOPWARDEN_SIDECAR_TOKEN_FILE || null;
  const agentId = typeof cfg.agentId === "string" && cfg.agentId ? cfg.agentId : null;
  return { url, timeoutMs, tokenFile, agentId };
}

function bounded(value, max = MAX_ID) {
  if (value === undefined || value === null || value === "") return null;
  const text = String(value);
  return text.length > max ? text.slice(0, max) : text;
}

/** Model-facing text: the service's own (built from a verdict's fields), printable and bounded. */
function shown(message, fallback) {
  if (typeof message !== "string" || !message.trim()) return fallback;
  // eslint-disable-next-line no-control-regex
  const clean = message.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, " ");
  return clean.length > MAX_TEXT ? clean.slice(0, MAX_TEXT - 3) + "..." : clean;
}

/** JSON text of a value, with object keys sorted: equal values, equal text, whatever their key order. */
function sortedJson(value) {
  return JSON.stringify(value, (_key, v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]))
      : v,
  );
}

/**
 * A copy of `value` with every string longer than MAX_TEXT_CHARS replaced by its digest, keeping the shape
 * OpenClaw's outcome rules read (an exec's `status` and `exitCode`, a content entry's `type`); null when
 * it nests deeper than MAX_DEPTH or is not plain JSON data. Walked without recursion.
 */
function digestLargeStrings(value) {
  const big = (v) => (typeof v === "string" && v.length > MAX_TEXT_CHARS ? digest(v) : v);
  if (!value || typeof value !== "object") return big(value);
  const root = Array.isArray(value) ? [] : {};
  const stack = [[value, root, 1]];
  while (stack.length) {
    const [from, to, depth] = stack.pop();
    if (depth > MAX_DEPTH) return null;
    for (const key of Object.keys(from)) {
      const v = from[key];
      if (v && typeof v === "object") {
        if (typeof v.toJSON === "function") return null; // a Date, a Buffer...: sent as one digest
        const copy = Array.isArray(v) ? [] : {};
        to[key] = copy;
        stack.push([v, copy, depth + 1]);
      } else {
        to[key] = big(v);
      }
    }
  }
  return root;
}

/**
 * A result as sent to the service: as OpenClaw gave it when it is small; else each string longer than
 * 64 KiB as its digest (the rest as is, so OpenClaw's rules still see `details`); a result that stays
 * too large, too deep or odd is sent as the digest of its whole JSON text. Never cut.
 */
export function resultBody(result) {
  if (result === undefined) return undefined;
  let text;
  try {
    text = JSON.stringify(result);
  } catch {
    return digest(String(result));
  }
  if (text === undefined) return null;
  if (text.length <= MAX_TEXT_CHARS) return result;
  let smaller = null;
  try {
    smaller = digestLargeStrings(result);
  } catch {
    smaller = null; // a getter that throws: one digest below
  }
  if (smaller !== null && JSON.stringify(smaller).length <= MAX_RESULT_CHARS) return smaller;
  try {
    return digest(sortedJson(result));
  } catch {
    return digest(text);
  }
}

/**
 * An error as sent to the service: a text (an Error's message, as OpenClaw hashes it) as is, or its digest
 * when longer than 64 KiB; any other value as a result is. Never cut, never rewritten: two errors that
 * differ anywhere stay two errors.
 */
export function errorBody(error) {
  const text = typeof error === "string" ? error : error instanceof Error ? error.message || error.name : null;
  if (text === null) return resultBody(error) ?? null;
  return text.length > MAX_TEXT_CHARS ? digest(text) : text;
}

/**
 * The hooks' logic without OpenClaw: `beforeToolCall(event, ctx)` and `afterToolCall(event, ctx)` take
 * OpenClaw's hook arguments; `stats` counts what happened. `fetchImpl`, `logger` and `now` are for tests.
 */
export function createGuard(
  settings,
  { fetchImpl = globalThis.fetch, logger = console, now = Date.now, checkListener = checkTcpListener } = {},
) {
  const stats = {
    checks: 0,
    allowed: 0,
    warned: 0,
    blocked: 0,
    failOpen: 0, // checks that could not be answered (service down, slow, bad answer): allowed
    failOpenTimeout: 0, // of those, the ones that hit the timeout
    reported: 0,
    reportErrors: 0, // results / run ends that did not reach the service
    tokenErrors: 0,
    untrusted: 0, // requests not sent: the listener is not this user's service
  };
  const lastLogged = new Map(); // failure kind -> time of its last log line
  const pending = new Map(); // call key -> { checked: true, warning?: string }

  let token = null;
  if (settings.tokenFile) {
    try {
      token = readFileSync(settings.tokenFile, "utf8").trim() || null;
    } catch (err) {
      stats.tokenErrors += 1;
      logger.warn(`[loopwarden] cannot read token file ${settings.tokenFile}: ${err?.code || err?.message || err}`);
    }
  }

  function logFailure(kind, detail) {
    const t = now();
    const last = lastLogged.get(kind);
    if (last !== undefined && t - last < LOG_EVERY_MS) return;
    lastLogged.set(kind, t);
    logger.warn(
      `[loopwarden] ${kind}: ${detail}; allowing (fail open; ${stats.failOpen} check(s), ${stats.reportErrors} report(s) failed so far)`,
    );
  }

  function ids(event, ctx) {
    return {
      agent_id: bounded(settings.agentId || ctx?.agentId) || "openclaw",
      session_id: bounded(ctx?.sessionKey || ctx?.sessionId),
      run_id: bounded(ctx?.runId || event?.runId),
    };
  }

  function callKey(ref, callId) {
    return `${ref.agent_id}\u0000${ref.session_id}\u0000${ref.run_id}\u0000${callId}`;
  }

  function remember(key, value) {
    pending.set(key, value);
    if (pending.size > MAX_PENDING) pending.delete(pending.keys().next().value);
  }

  /** The answer's JSON and whether the listener was checked to be this user's service (its text may be shown). */
  async function post(path, body, signal) {
    const headers = { "content-type": "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    const timeout = AbortSignal.timeout(settings.timeoutMs);
    const both = signal && AbortSignal.any ? AbortSignal.any([timeout, signal]) : timeout;
    const data = JSON.stringify(body);
    if (settings.url.startsWith("unix:")) {
      const socketPath = settings.url.slice("unix:".length);
      checkSocket(socketPath); // before a byte is sent
      const { status, text } = await postUnix(socketPath, path, headers, data, both);
      if (status !== 200) throw new Error(`HTTP ${status}`);
      return { answer: JSON.parse(text), trusted: true };
    }
    const target = new URL(settings.url + path);
    const port = Number(target.port || 80);
    const trusted = checkListener(target.hostname.replace(/^\[|\]$/g, ""), port) === true;
    const response = await fetchImpl(target.href, { method: "POST", headers, body: data, signal: both });
    if (!response.ok) {
      await response.body?.cancel?.().catch(() => {});
      throw new Error(`HTTP ${response.status}`);
    }
    return { answer: await response.json(), trusted };
  }

  function failureKind(err) {
    const name = err?.name || "";
    if (name === "TimeoutError" || name === "AbortError") return "timeout";
    if (err?.code === "UNTRUSTED") return "untrusted";
    return "unavailable";
  }

  async function beforeToolCall(event, ctx) {
    stats.checks += 1;
    const ref = ids(event, ctx);
    const callId = bounded(event?.toolCallId || ctx?.toolCallId);
    let answer;
    let trusted = false;
    try {
      ({ answer, trusted } = await post(
        "/v1/check",
        {
          ...ref,
          tool_name: bounded(event?.toolName || ctx?.toolName) || "unknown",
          params: event?.params ?? {},
          tool_call_id: callId,
        },
        ctx?.abortSignal,
      ));
      if (!answer || typeof answer !== "object" || typeof answer.action !== "string") throw new Error("bad answer");
    } catch (err) {
      stats.failOpen += 1;
      const kind = failureKind(err);
      if (kind === "timeout") stats.failOpenTimeout += 1;
      if (kind === "untrusted") stats.untrusted += 1;
      logFailure(
        kind === "timeout" ? "check timed out" : kind === "untrusted" ? "check not sent" : "check failed",
        kind === "timeout" ? `no answer within ${settings.timeoutMs} ms` : String(err?.cause?.code || err?.message || err),
      );
      return undefined;
    }
    const key = callKey(ref, bounded(answer.tool_call_id) || callId);
    // the model reads the service's words only from this user's own service; else words from the fields
    const text = (action, fallback) => (trusted ? shown(answer.message, fallback) : fieldText(action, answer.detector, answer.count));
    if (answer.proceed === false || answer.action === "block" || answer.action === "abort") {
      stats.blocked += 1;
      remember(key, { checked: true });
      return { block: true, blockReason: text(answer.action === "abort" ? "abort" : "block", BLOCKED) };
    }
    if (answer.action === "warn") {
      stats.warned += 1;
      const warning = text("warn", null);
      remember(key, { checked: true, warning });
      if (warning) logger.warn(`[loopwarden] ${ref.agent_id} ${event?.toolName}: ${warning}`);
      return undefined;
    }
    stats.allowed += 1;
    remember(key, { checked: true });
    return undefined;
  }

  async function afterToolCall(event, ctx) {
    const ref = ids(event, ctx);
    const callId = bounded(event?.toolCallId || ctx?.toolCallId);
    pending.delete(callKey(ref, callId));
    const body = {
      ...ref,
      tool_call_id: callId,
      tool_name: bounded(event?.toolName || ctx?.toolName),
      params: event?.params ?? null,
    };
    if (event?.error !== undefined && event.error !== null) body.error = errorBody(event.error);
    else body.result = resultBody(event?.result) ?? null;
    try {
      await post("/v1/result", body);
      stats.reported += 1;
    } catch (err) {
      stats.reportErrors += 1;
      logFailure("result not reported", String(err?.cause?.code || err?.message || err));
    }
  }

  async function agentEnd(event, ctx) {
    const ref = ids(event, ctx);
    if (!ref.run_id) return;
    try {
      await post("/v1/run_end", ref);
    } catch (err) {
      stats.reportErrors += 1;
      logFailure("run end not reported", String(err?.cause?.code || err?.message || err));
    }
  }

  return { settings, stats, beforeToolCall, afterToolCall, agentEnd, pending };
}

export default {
  id: PLUGIN_ID,
  name: "loopwarden",
  description: "Fleet-wide tool-loop guard: asks the local loopwarden service before each tool call.",
  register(api) {
    const guard = createGuard(settingsFrom(api.pluginConfig), { logger: api.logger });
    api.on("before_tool_call", guard.beforeToolCall);
    api.on("after_tool_call", guard.afterToolCall);
    api.on("agent_end", guard.agentEnd);
  },
};
