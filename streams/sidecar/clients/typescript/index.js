// @loopwarden/client: the local decision service (`loopwarden sidecar`) for TypeScript and JavaScript agents.
//
// The same contract as Python's `LoopClient` (streams/runner/RUNNER.md) over the service's HTTP API
// (streams/sidecar/SIDECAR.md): check a call (or one model message's calls together), report its result,
// ack a warning the model saw, arm the post-compaction guard, start and end runs. Node's standard
// library only (`node:http`, so the Unix socket works as well as TCP), no build step: ESM with
// hand-written types beside it.
//
// loopwarden never breaks a healthy agent: every request is bounded by `timeoutMs`, and a check the
// service cannot answer (down, slow, a refused token, nonsense) allows the call, is counted in
// `stats` and logged once per kind every 30 s. Sizes are bounded both ways: a result over 64 KiB is
// sent as its digest, ids and texts are cut, an answer over 1 MiB is refused.

import http from "node:http";
import { createHash, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import { checkSocket, checkTcpListener, fieldText } from "./listener.js";

/** The service's default socket (`loopwarden.hooks.service.default_socket`): no port to agree on. */
export function defaultUrl(env = process.env) {
  return `unix:${join(env.HOME || homedir(), ".loopwarden", "run", "sidecar.sock")}`;
}
export const DEFAULT_TIMEOUT_MS = 500;
const MIN_TIMEOUT_MS = 10;
const MAX_TIMEOUT_MS = 60_000;
export const MAX_RESULT_CHARS = 64 << 10; // a result (or params) longer than this, as JSON, is sent as its digest
const MAX_PARAMS_CHARS = 256 << 10;
export const MAX_MESSAGE = 4000; // characters of the service's text handed to a model
const MAX_ID = 512; // the wire's caps (the service answers 400 beyond them)
const MAX_TOOL_NAME = 256;
const MAX_DETAIL = 1024;
export const MAX_BATCH = 128; // calls in one /v1/check_batch
const MAX_ANSWER_BYTES = 1 << 20;
const LOG_EVERY_MS = 30_000;
const LISTENER_CHECK_MS = 1000; // a TCP listener's owner is read again after this long
export const BLOCKED_TEXT = "Tool call blocked by loop detection.";
export const WARN_PREFIX = "\n\n[loopwarden] ";

/** `[loopwarden digest sha256=<hex> chars=<N>]`: what a huge value is sent as (equal values, equal digests). */
export function digest(text) {
  return digestForm(createHash("sha256").update(text, "utf8").digest("hex"), [...text].length);
}

/** The one written form of a digest (the Python hook writes it alike). */
export function digestForm(sha256Hex, chars) {
  return `[loopwarden digest sha256=${sha256Hex} chars=${chars}]`;
}

/** JSON text of a value with object keys sorted (equal values, equal text), or null when it has none. */
export function canonical(value) {
  try {
    const text = JSON.stringify(value, (_key, v) => {
      if (typeof v === "bigint") return v.toString();
      if (v && typeof v === "object" && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype) {
        const sorted = {};
        for (const k of Object.keys(v).sort()) sorted[k] = v[k];
        return sorted;
      }
      return v;
    });
    return text === undefined ? null : text;
  } catch {
    return null; // circular, too deep, a throwing toJSON
  }
}

/** A tool's result, error or params as sent: as given when its JSON is at most `max` characters, else its digest. */
export function bounded(value, max = MAX_RESULT_CHARS) {
  if (value === undefined) return null;
  if (value === null || typeof value === "boolean") return value;
  if (typeof value === "number") return Number.isFinite(value) ? value : String(value);
  if (typeof value === "string") return value.length <= max ? value : digest(value);
  if (value instanceof Error) return bounded(`${value.name}: ${value.message}`, max);
  const text = canonical(value);
  if (text === null) return bounded(String(value), max);
  return text.length <= max ? JSON.parse(text) : digest(text);
}

/**
 * A result as the engine should see it. OpenClaw hashes an object result by its `details` and `content`
 * text only (its tools' shape), so any other object (`{stdout, exitCode}`, `{status: "42%"}`) would hash
 * alike whatever it holds, and a poll whose output changes would look like a loop: such an object is
 * sent as its JSON text (keys sorted), which changes when the output does.
 */
export function resultValue(value) {
  if (!value || typeof value !== "object" || Array.isArray(value) || value instanceof Error) return value;
  if (Array.isArray(value.content) || (value.details && typeof value.details === "object")) return value;
  return canonical(value) ?? String(value);
}

function id(value, max = MAX_ID) {
  if (value === undefined || value === null || value === "") return null;
  const text = String(value);
  return text.length > max ? text.slice(0, max) : text;
}

/** Model-facing text: the service's own (built from a verdict's fields), printable and bounded. */
export function shown(message, fallback = null) {
  if (typeof message !== "string" || !message.trim()) return fallback;
  // eslint-disable-next-line no-control-regex
  const clean = message.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, " ");
  return clean.length > MAX_MESSAGE ? clean.slice(0, MAX_MESSAGE - 3) + "..." : clean;
}

/** What the model gets instead of a refused call's result. */
export function blockMessage(decision) {
  return shown(decision?.message, BLOCKED_TEXT);
}

/** What a warned call's result gets appended (the model reads it with the result); under the openclaw-latest
 * profile the release's system note, on a line of its own. */
export function warningNote(decision) {
  if (decision?.note) return "\n" + shown(decision.note, "");
  return WARN_PREFIX + shown(decision?.message, "Warning: this looks like a tool-call loop.");
}

/** A result with the warning appended: text as text, anything else as its JSON text. */
export function withWarning(result, decision) {
  const note = warningNote(decision);
  if (typeof result === "string") return result + note;
  const text = canonical(result);
  return (text ?? String(result)) + note;
}

/** The service's address: `url` (http://HOST:PORT or unix:/PATH) or `socketPath`, else $LOOPWARDEN_SIDECAR_URL, else
 * the service's default socket, `~/.loopwarden/run/sidecar.sock`. */
export function resolveAddress(options = {}, env = process.env) {
  if (options.socketPath) return { socketPath: String(options.socketPath), host: "localhost", port: undefined, prefix: "", url: `unix:${options.socketPath}` };
  const url = String(options.url || env.LOOPWARDEN_SIDECAR_URL || defaultUrl(env)).replace(/\/+$/, "");
  if (url.startsWith("unix:")) return { socketPath: url.slice(5), host: "localhost", port: undefined, prefix: "", url };
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`the service URL must be http://HOST:PORT or unix:/PATH, not ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== "http:") throw new TypeError(`the service URL must be http://HOST:PORT or unix:/PATH, not ${JSON.stringify(url)}`);
  const host = parsed.hostname.replace(/^\[|\]$/g, "");
  return { socketPath: undefined, host, port: Number(parsed.port || 80), prefix: parsed.pathname.replace(/\/+$/, ""), url };
}

function readToken(options, env) {
  if (options.token) return String(options.token).trim() || null;
  const file = options.tokenFile || env.LOOPWARDEN_SIDECAR_TOKEN_FILE;
  if (!file) return null;
  return readFileSync(file, "utf8").split("\n", 1)[0].trim() || null; // a missing file is the caller's error, at once
}

class ServiceError extends Error {
  constructor(kind, detail) {
    super(detail);
    this.name = "LoopwardenServiceError";
    this.kind = kind; // "timeout", "unavailable", "refused" (an HTTP error), "bad_answer"
  }
}

/** A check's answer in JavaScript's naming. `proceed`: run the tool (allow, warn). From a service that could not
 * be checked (`trusted` false) the text for the model is rebuilt from the answer's fields. */
function decisionFrom(answer, call, trusted = true) {
  const own = typeof answer.message === "string" ? answer.message : null;
  return {
    action: answer.action,
    proceed: answer.proceed === true || answer.action === "allow" || answer.action === "warn",
    message: trusted || answer.action === "allow" ? own : fieldText(answer.action, answer.detector, answer.count),
    detector: answer.detector ?? null,
    count: answer.count ?? null,
    level: answer.level ?? null,
    verdictId: answer.verdict_id ?? null,
    source: answer.source ?? "local",
    failedOpen: answer.failed_open === true,
    recovery: answer.recovery ?? null,
    note: trusted && typeof answer.note === "string" ? answer.note : null,
    runId: answer.run_id || call.runId || null,
    toolCallId: answer.tool_call_id || call.toolCallId || null,
    toolName: call.toolName,
    params: call.params,
  };
}

function failOpen(call, source, runId) {
  return {
    action: "allow",
    proceed: true,
    message: null,
    detector: null,
    count: null,
    level: null,
    verdictId: null,
    source,
    failedOpen: true,
    recovery: null,
    note: null,
    runId: runId ?? null,
    toolCallId: call.toolCallId ?? null,
    toolName: call.toolName,
    params: call.params,
  };
}

const ACTIONS = new Set(["allow", "warn", "block", "abort"]);

/**
 * `new LoopClient({ url | socketPath, token | tokenFile, timeoutMs, agentId })`: one per process; `client.run(...)`
 * per agent run. Keeps its connections alive; `close()` frees them.
 */
export class LoopClient {
  constructor(options = {}) {
    const env = options.env ?? process.env;
    this.address = resolveAddress(options, env);
    this.token = readToken(options, env);
    const raw = Number(options.timeoutMs ?? env.LOOPWARDEN_SIDECAR_TIMEOUT_MS ?? DEFAULT_TIMEOUT_MS);
    this.timeoutMs = Number.isFinite(raw) ? Math.min(Math.max(Math.round(raw), MIN_TIMEOUT_MS), MAX_TIMEOUT_MS) : DEFAULT_TIMEOUT_MS;
    this.agentId = id(options.agentId) || "agent";
    this.logger = options.logger === undefined ? console : options.logger;
    this.stats = {
      checks: 0,
      allowed: 0,
      warned: 0,
      blocked: 0,
      aborted: 0,
      failOpen: 0, // checks the service did not answer: allowed
      failOpenTimeout: 0, // of those, the ones that reached timeoutMs
      failOpenError: 0, // the rest: down, refused, a bad answer
      resultsSent: 0,
      acksSent: 0,
      sendErrors: 0, // results, acks, run starts and ends that did not reach the service
      digested: 0, // results and params sent as their digest
      untrusted: 0, // requests not sent: the listener is not this user's service
    };
    // idle connections are closed before the service's own 60 s would close them under a request
    this._agent = new http.Agent({ keepAlive: true, maxSockets: 32, maxFreeSockets: 8, timeout: 30_000 });
    this._lastLogged = new Map();
    this._now = options.now ?? Date.now;
    this._listeners = new Map(); // host:port -> its last check (a TCP listener's owner is read from /proc)
    this._readFile = options.readFile ?? readFileSync;
  }

  /** A handle on one run: `ids` are the agent, its session and the run (null: the session's current run). */
  run({ agentId, sessionId, runId } = {}) {
    return new Run(this, { agent_id: id(agentId) || this.agentId, session_id: id(sessionId), run_id: id(runId) });
  }

  close() {
    this._agent.destroy();
  }

  /** One POST; the answer's JSON, or a thrown `LoopwardenServiceError`. Within `timeoutMs` in all: a kept-alive
   * connection the service closed meanwhile (it drops idle ones after 60 s) is retried once on a new one. */
  async request(path, body, { signal } = {}) {
    return (await this._exchange(path, body, signal)).answer;
  }

  /** `{answer, trusted}`: the answer, and whether the listener was checked to be this user's service. */
  async _exchange(path, body, signal) {
    const trusted = this._authenticate(); // before a byte is sent
    const data = Buffer.from(JSON.stringify(body), "utf8");
    const deadline = this._now() + this.timeoutMs;
    try {
      return { answer: await this._post(path, data, this.timeoutMs, signal), trusted };
    } catch (err) {
      const left = deadline - this._now();
      if (!err.stale || left <= 0) throw err;
      return { answer: await this._post(path, data, left, signal), trusted };
    }
  }

  /** True: this user's service; false: a listener that cannot be checked (used, its text not shown); throws: not ours. */
  _authenticate() {
    const { socketPath, host, port } = this.address;
    try {
      if (socketPath) {
        checkSocket(socketPath);
        return true;
      }
      const key = `${host}:${port}`;
      const t = this._now();
      const cached = this._listeners.get(key);
      if (cached && t - cached.at < LISTENER_CHECK_MS) return cached.trusted;
      const trusted = checkTcpListener(host, port, this._readFile) === true;
      this._listeners.set(key, { at: t, trusted });
      return trusted;
    } catch (err) {
      if (err?.code === "UNTRUSTED") throw new ServiceError("untrusted", err.message);
      throw new ServiceError("unavailable", err?.code || err?.message || String(err));
    }
  }

  _post(path, data, timeoutMs, signal) {
    const { socketPath, host, port, prefix } = this.address;
    const headers = { "content-type": "application/json", "content-length": data.length };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (signal?.aborted) return Promise.reject(new ServiceError("timeout", "the caller gave up"));
    return new Promise((resolve, reject) => {
      let settled = false;
      const finish = (fn, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener?.("abort", onAbort);
        fn(value);
      };
      const req = http.request(
        { socketPath, host: socketPath ? "localhost" : host, port, path: prefix + path, method: "POST", headers, agent: this._agent },
        (res) => {
          const chunks = [];
          let size = 0;
          res.on("data", (chunk) => {
            size += chunk.length;
            if (size > MAX_ANSWER_BYTES) {
              req.destroy();
              finish(reject, new ServiceError("bad_answer", "answer over 1 MiB"));
            } else chunks.push(chunk);
          });
          res.on("error", (err) => finish(reject, new ServiceError("unavailable", err.code || err.message)));
          res.on("end", () => {
            let out;
            try {
              out = JSON.parse(Buffer.concat(chunks).toString("utf8"));
            } catch {
              return finish(reject, new ServiceError("bad_answer", `HTTP ${res.statusCode}, not JSON`));
            }
            if (res.statusCode !== 200) {
              const why = typeof out?.error === "string" ? out.error.slice(0, 200) : "";
              return finish(reject, new ServiceError("refused", `HTTP ${res.statusCode} ${why}`.trim()));
            }
            finish(resolve, out);
          });
        },
      );
      const timer = setTimeout(() => {
        req.destroy();
        finish(reject, new ServiceError("timeout", `no answer within ${this.timeoutMs} ms`));
      }, timeoutMs);
      const onAbort = () => {
        req.destroy();
        finish(reject, new ServiceError("timeout", "the caller gave up"));
      };
      signal?.addEventListener?.("abort", onAbort, { once: true });
      req.on("error", (err) => {
        const failure = new ServiceError("unavailable", err.code || err.message);
        failure.stale = req.reusedSocket && (err.code === "ECONNRESET" || err.code === "EPIPE");
        finish(reject, failure);
      });
      req.end(data);
    });
  }

  _log(kind, detail) {
    if (!this.logger) return;
    const t = this._now();
    const last = this._lastLogged.get(kind);
    if (last !== undefined && t - last < LOG_EVERY_MS) return;
    this._lastLogged.set(kind, t);
    const s = this.stats;
    this.logger.warn?.(
      `[loopwarden] ${kind}: ${detail}; the agent goes on (fail open: ${s.failOpen} check(s), ${s.sendErrors} report(s) failed so far)`,
    );
  }

  _failed(err) {
    this.stats.failOpen += 1;
    if (err?.kind === "timeout") this.stats.failOpenTimeout += 1;
    else this.stats.failOpenError += 1;
    if (err?.kind === "untrusted") this.stats.untrusted += 1;
    const kind = { timeout: "check timed out", untrusted: "check not sent" }[err?.kind] ?? "check failed";
    this._log(kind, err?.message || String(err));
    return err?.kind === "timeout" ? "timeout" : "error";
  }

  _count(decision) {
    const key = { allow: "allowed", warn: "warned", block: "blocked", abort: "aborted" }[decision.action];
    if (key) this.stats[key] += 1;
  }

  _call(run, toolName, params, toolCallId) {
    const sent = bounded(params === undefined ? {} : params, MAX_PARAMS_CHARS);
    if (typeof sent === "string" && sent.startsWith("[loopwarden digest") && sent !== params) this.stats.digested += 1;
    return { toolName: id(toolName, MAX_TOOL_NAME) || "unknown", params: sent, toolCallId: id(toolCallId), runId: run.ids.run_id };
  }

  async _check(run, toolName, params, toolCallId, signal) {
    this.stats.checks += 1;
    const call = this._call(run, toolName, params, toolCallId);
    let answer;
    let trusted;
    try {
      ({ answer, trusted } = await this._exchange(
        "/v1/check",
        { ...run.ids, tool_name: call.toolName, params: call.params, tool_call_id: call.toolCallId },
        signal,
      ));
      if (!answer || !ACTIONS.has(answer.action)) throw new ServiceError("bad_answer", "an answer without an action");
    } catch (err) {
      return failOpen(call, this._failed(err), run.ids.run_id);
    }
    const decision = decisionFrom(answer, call, trusted);
    this._count(decision);
    run._saw(decision);
    return decision;
  }

  async _checkBatch(run, calls, signal) {
    const built = calls.map((c) => this._call(run, c.toolName, c.params, c.toolCallId));
    const out = [];
    for (let i = 0; i < built.length; i += MAX_BATCH) {
      const part = built.slice(i, i + MAX_BATCH);
      this.stats.checks += part.length;
      let answer;
      let trusted;
      try {
        ({ answer, trusted } = await this._exchange(
          "/v1/check_batch",
          { ...run.ids, calls: part.map((c) => ({ tool_name: c.toolName, params: c.params, tool_call_id: c.toolCallId })) },
          signal,
        ));
        const ds = answer?.decisions;
        if (!Array.isArray(ds) || ds.length !== part.length || !ds.every((d) => d && ACTIONS.has(d.action))) {
          throw new ServiceError("bad_answer", "a batch answer that does not match its calls");
        }
      } catch (err) {
        const source = this._failed(err);
        this.stats.failOpen += part.length - 1; // every call of the batch was allowed unanswered
        this.stats[source === "timeout" ? "failOpenTimeout" : "failOpenError"] += part.length - 1;
        out.push(...part.map((c) => failOpen(c, source, run.ids.run_id)));
        continue;
      }
      for (let j = 0; j < part.length; j++) {
        const decision = decisionFrom(answer.decisions[j], part[j], trusted);
        this._count(decision);
        run._saw(decision);
        out.push(decision);
      }
    }
    return out;
  }

  async _send(path, body, counter) {
    try {
      const { answer, trusted } = await this._exchange(path, body);
      if (counter) this.stats[counter] += 1;
      if (!trusted && answer && typeof answer === "object") {
        // a result's warning or abort: the text for a model is rebuilt from what it is
        for (const [key, action] of [["warning", "warn"], ["abort", "abort"]]) {
          if (answer[key] && typeof answer[key] === "object") answer[key] = { ...answer[key], message: fieldText(action) };
        }
      }
      return answer;
    } catch (err) {
      this.stats.sendErrors += 1;
      if (err?.kind === "untrusted") this.stats.untrusted += 1;
      this._log(`${path} not reported`, err?.message || String(err));
      return null;
    }
  }
}

/** One run of one agent: its checks, results, acks, compaction and end. Never throws for loopwarden's trouble. */
export class Run {
  constructor(client, ids) {
    this.client = client;
    this.ids = ids;
    this.aborted = null; // the abort decision (or the abort a result's answer reported), once the run has one
  }

  _saw(decision) {
    if (decision.runId && !this.ids.run_id) this.ids = { ...this.ids, run_id: decision.runId };
    if (decision.action === "abort" && !this.aborted) this.aborted = decision;
  }

  /** A new run of the session (a new user prompt); without `runId` the service names it. */
  async start() {
    const answer = await this.client._send("/v1/run_start", this.ids);
    if (answer?.run_id) this.ids = { ...this.ids, run_id: id(answer.run_id) };
    this.aborted = null;
    return answer;
  }

  /** May this call run? Never throws: the service's trouble allows the call (`failedOpen: true`). */
  check(toolName, params, toolCallId, { signal } = {}) {
    return this.client._check(this, toolName, params, toolCallId ?? null, signal);
  }

  /** One model message's calls, admitted together before any runs (the release's batch admission under the
   * openclaw-latest profile; otherwise each is checked in turn): one decision per call, in order. */
  checkBatch(calls, { signal } = {}) {
    if (!calls.length) return Promise.resolve([]);
    return this.client._checkBatch(this, calls, signal);
  }

  /**
   * The call's outcome: `{ result }` or `{ error }`. A refused call (`!decision.proceed`) is reported as blocked,
   * which acknowledges the block. The answer carries `warning` (the paired check's) and `abort` (the run's).
   */
  async result(decision, outcome = {}) {
    const body = {
      ...this.ids,
      run_id: decision?.runId || this.ids.run_id,
      tool_call_id: id(decision?.toolCallId),
      tool_name: id(decision?.toolName, MAX_TOOL_NAME),
      params: decision?.params ?? null,
    };
    if (decision && decision.proceed === false) body.blocked = true;
    else if (outcome.error !== undefined && outcome.error !== null) body.error = this._bounded(outcome.error);
    else body.result = this._bounded(outcome.result);
    const answer = await this.client._send("/v1/result", body, "resultsSent");
    if (answer?.abort && !this.aborted) {
      this.aborted = { action: "abort", proceed: false, message: answer.abort.message ?? null, verdictId: answer.abort.verdict_id ?? null, source: "result", runId: answer.abort.run_id || body.run_id };
    }
    return answer;
  }

  _bounded(value) {
    const out = bounded(resultValue(value));
    if (typeof out === "string" && out.startsWith("[loopwarden digest") && out !== value) this.client.stats.digested += 1;
    return out;
  }

  /** The model saw the verdict (a warning shown with the result): `outcome` "applied" or "failed". */
  async ack(decision, outcome = "applied", detail = null) {
    const verdictId = decision?.verdictId ?? decision?.verdict_id;
    if (!verdictId) return null;
    const body = { ...this.ids, run_id: decision.runId || decision.run_id || this.ids.run_id, verdict_id: id(verdictId), outcome };
    if (detail) body.detail = String(detail).slice(0, MAX_DETAIL);
    return this.client._send("/v1/ack", body, "acksSent");
  }

  /** The agent compacted its context and retries: arms the post-compaction guard. */
  compaction(reason = null) {
    return this.client._send("/v1/compaction", { ...this.ids, reason: reason ? String(reason).slice(0, MAX_DETAIL) : null });
  }

  /** The run is over (acknowledges its abort, if any). */
  end() {
    return this.client._send("/v1/run_end", this.ids);
  }
}

/** A run id of our own, for frameworks that have none (random: run keys are global on the wire). */
export function newRunId() {
  return `run_${randomUUID().replace(/-/g, "")}`;
}

export { Gate } from "./gate.js";
export { checkSocket, checkTcpListener, fieldText } from "./listener.js";
