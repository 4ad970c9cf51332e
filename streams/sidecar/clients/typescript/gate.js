// What every framework integration does, written once (as streams/runner/integrations/_gate.py is for
// Python): runs by key (bounded), a call's decision between "before the tool" and "after the tool", the
// outcome reported, a warning that reached the model acked, a run ended. An integration maps its
// framework's notions (a call id, a thread, a session) to a run ref `{agentId, sessionId, runId}`; how
// the answer reaches the model and how a run ends are the framework's own.

const MAX_RUNS = 4096;
const MAX_PENDING = 4096;

function remember(map, key, value, max) {
  map.delete(key);
  map.set(key, value);
  if (map.size > max) map.delete(map.keys().next().value);
}

export class Gate {
  constructor(client, { maxRuns = MAX_RUNS, maxPending = MAX_PENDING } = {}) {
    this.client = client;
    this._runs = new Map(); // run key -> Run
    this._pending = new Map(); // run key + call id -> decision
    this._ended = new Map(); // run key -> the abort of an ended run
    this._maxRuns = Math.max(1, maxRuns);
    this._maxPending = Math.max(1, maxPending);
  }

  key(ref) {
    return `${ref.agentId ?? this.client.agentId}\u0000${ref.sessionId ?? ""}\u0000${ref.runId ?? ""}`;
  }

  run(ref) {
    const key = this.key(ref);
    let run = this._runs.get(key);
    if (!run) run = this.client.run(ref);
    remember(this._runs, key, run, this._maxRuns);
    return run;
  }

  /** Gate one call; never throws (loopwarden's trouble allows the call, counted). */
  async decide(ref, toolName, params, callId, options) {
    const run = this.run(ref);
    try {
      return await run.check(toolName, params, callId, options);
    } catch (err) {
      this.client._failed(err);
      return { action: "allow", proceed: true, message: null, verdictId: null, source: "error", failedOpen: true, runId: run.ids.run_id, toolCallId: callId ?? null, toolName, params };
    }
  }

  /** The call did not run: its veto is reported as its result (acks the block or abort). */
  async refused(ref, decision) {
    await this._quiet(() => this.run(ref).result(decision));
  }

  /** The call ran: its outcome reported; a warning that reached the model with it acked. */
  async finished(ref, decision, outcome, { warned = false } = {}) {
    const run = this.run(ref);
    const answer = await this._quiet(() => run.result(decision, outcome));
    if (warned && decision?.action === "warn") await this._quiet(() => run.ack(decision, "applied", "warning appended to the call's result"));
    return answer;
  }

  hold(ref, callId, decision) {
    remember(this._pending, `${this.key(ref)}\u0000${callId}`, decision, this._maxPending);
  }

  take(ref, callId) {
    const key = `${this.key(ref)}\u0000${callId}`;
    const decision = this._pending.get(key);
    this._pending.delete(key);
    return decision;
  }

  /** The run's abort (also after it ended), else null. */
  aborted(ref) {
    const key = this.key(ref);
    return this._ended.get(key) ?? this._runs.get(key)?.aborted ?? null;
  }

  async compaction(ref, reason) {
    await this._quiet(() => this.run(ref).compaction(reason));
  }

  /** `run_end` (acks an abort); the run is forgotten, its abort remembered (bounded). */
  async end(ref) {
    const key = this.key(ref);
    const run = this._runs.get(key) ?? this.client.run(ref);
    this._runs.delete(key);
    if (run.aborted) remember(this._ended, key, run.aborted, this._maxRuns);
    await this._quiet(() => run.end());
  }

  async _quiet(fn) {
    try {
      return await fn();
    } catch {
      this.client.stats.sendErrors += 1; // reporting must never break the agent
      return null;
    }
  }
}
