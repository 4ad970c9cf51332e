// Types of @loopwarden/client (index.js): the client of the local decision service (`loopwarden sidecar`).

/** `unix:~/.loopwarden/run/sidecar.sock`: the service's default socket. */
export declare function defaultUrl(env?: Record<string, string | undefined>): string;
export declare const DEFAULT_TIMEOUT_MS: number;
export declare const MAX_RESULT_CHARS: number;
export declare const MAX_MESSAGE: number;
export declare const MAX_BATCH: number;
export declare const BLOCKED_TEXT: string;
export declare const WARN_PREFIX: string;

export type Action = "allow" | "warn" | "block" | "abort";

/** Where the service's answer came from; `timeout`/`error` (and the service's `offline`/`closed`): failed open. */
export type Source = "local" | "verdict" | "pending_block" | "aborted" | "worker_warning" | "timeout" | "error" | "offline" | "closed" | (string & {});

/** A check's answer. `proceed`: run the tool (allow, warn). `message`: the text for the model (warn, block, abort). */
export interface Decision {
  action: Action;
  proceed: boolean;
  message: string | null;
  detector: string | null;
  count: number | null;
  level: string | null;
  /** What `Run.ack` refers to. */
  verdictId: string | null;
  source: Source;
  failedOpen: boolean;
  /** Under the openclaw-latest profile's batch admission: "trigger" or "sibling" of a refused batch. */
  recovery: "trigger" | "sibling" | null;
  /** A warning under the openclaw-latest profile: the release's system note for the call's result. */
  note: string | null;
  runId: string | null;
  toolCallId: string | null;
  toolName: string;
  params: unknown;
}

export interface ClientStats {
  checks: number;
  allowed: number;
  warned: number;
  blocked: number;
  aborted: number;
  /** Checks the service did not answer: allowed. */
  failOpen: number;
  failOpenTimeout: number;
  failOpenError: number;
  resultsSent: number;
  acksSent: number;
  /** Results, acks, run starts and ends that did not reach the service. */
  sendErrors: number;
  /** Results and params sent as their digest (over 64 KiB). */
  digested: number;
  /** Requests not sent: the listener is not this user's service. */
  untrusted: number;
}

export interface Logger {
  warn?(line: string): void;
}

export interface ClientOptions {
  /** `http://HOST:PORT` or `unix:/PATH`; default `$LOOPWARDEN_SIDECAR_URL`, else the service's default socket. */
  url?: string;
  /** The service's Unix socket (instead of `url`). */
  socketPath?: string;
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** A file whose first line is the token; default `$LOOPWARDEN_SIDECAR_TOKEN_FILE`. */
  tokenFile?: string;
  /** Bound of every request (10..60000 ms, default 500): past it a check is allowed, counted. */
  timeoutMs?: number;
  /** The agent's id when a run names none (default "agent"). */
  agentId?: string;
  /** One line per kind of failure every 30 s (default `console`; `null`: silent). */
  logger?: Logger | null;
  env?: Record<string, string | undefined>;
}

export interface RunIds {
  agentId?: string | null;
  sessionId?: string | null;
  /** null: the session's current run (the service names it). */
  runId?: string | null;
}

export interface Call {
  toolName: string;
  params?: unknown;
  toolCallId?: string | null;
}

export interface Outcome {
  result?: unknown;
  error?: unknown;
}

export interface VerdictRef {
  message: string | null;
  verdict_id: string | null;
  run_id: string;
}

export interface ResultAnswer {
  ok: boolean;
  paired: boolean | null;
  /** The warning the paired check answered. */
  warning: VerdictRef | null;
  /** The run's abort (e.g. the post-compaction guard's, decided on this result). */
  abort: VerdictRef | null;
}

export declare class Run {
  readonly client: LoopClient;
  ids: { agent_id: string; session_id: string | null; run_id: string | null };
  /** The run's abort, once a check or a result reported one. */
  aborted: Decision | Partial<Decision> | null;
  /** A new run of the session (a new user prompt); without `runId` the service names it. */
  start(): Promise<{ run_id: string; ended: string | null } | null>;
  /** May this call run? Never throws: the service's trouble allows the call (`failedOpen`). */
  check(toolName: string, params?: unknown, toolCallId?: string | null, options?: { signal?: AbortSignal }): Promise<Decision>;
  /** One model message's calls, admitted together before any runs: one decision per call, in order. */
  checkBatch(calls: Call[], options?: { signal?: AbortSignal }): Promise<Decision[]>;
  /** The call's outcome; a refused call is reported as blocked (acks the block). Null: not reported. */
  result(decision: Decision | Partial<Decision>, outcome?: Outcome): Promise<ResultAnswer | null>;
  /** The model saw the verdict (a warning shown with the result). */
  ack(decision: Decision | Partial<Decision>, outcome?: "applied" | "failed", detail?: string | null): Promise<{ ok: boolean } | null>;
  /** The agent compacted its context and retries: arms the post-compaction guard. */
  compaction(reason?: string | null): Promise<{ ok: boolean } | null>;
  /** The run is over (acknowledges its abort). */
  end(): Promise<{ ok: boolean } | null>;
}

export declare class LoopClient {
  constructor(options?: ClientOptions);
  readonly address: { socketPath?: string; host: string; port?: number; prefix: string; url: string };
  readonly timeoutMs: number;
  readonly agentId: string;
  readonly stats: ClientStats;
  run(ids?: RunIds): Run;
  /** One POST to the service; throws on any failure (the Run methods do not). */
  request(path: string, body: unknown, options?: { signal?: AbortSignal }): Promise<any>;
  close(): void;
}

/** Run refs, decisions between "before" and "after" a tool, outcomes and acks: what every integration shares. */
export interface RunRef {
  agentId?: string | null;
  sessionId: string | null;
  runId: string | null;
}

export declare class Gate {
  constructor(client: LoopClient, options?: { maxRuns?: number; maxPending?: number });
  readonly client: LoopClient;
  run(ref: RunRef): Run;
  decide(ref: RunRef, toolName: string, params: unknown, callId: string | null, options?: { signal?: AbortSignal }): Promise<Decision>;
  refused(ref: RunRef, decision: Decision): Promise<void>;
  finished(ref: RunRef, decision: Decision | Partial<Decision>, outcome: Outcome, options?: { warned?: boolean }): Promise<ResultAnswer | null>;
  hold(ref: RunRef, callId: string, decision: Decision): void;
  take(ref: RunRef, callId: string): Decision | undefined;
  aborted(ref: RunRef): Decision | Partial<Decision> | null;
  compaction(ref: RunRef, reason?: string | null): Promise<void>;
  end(ref: RunRef): Promise<void>;
}

/** `[loopwarden digest sha256=<hex> chars=<N>]` of a text. */
export declare function digest(text: string): string;
/** JSON text of a value with object keys sorted (equal values, equal text), or null when it has none. */
export declare function canonical(value: unknown): string | null;
/** The written form of a digest: `[loopwarden digest sha256=<hex> chars=<N>]`. */
export declare function digestForm(sha256Hex: string, chars: number): string;
/** A value as sent: as given when its JSON is at most `max` characters, else its digest. */
export declare function bounded(value: unknown, max?: number): unknown;
/** An object result that is not OpenClaw's `{content, details}` shape, as its JSON text. */
export declare function resultValue(value: unknown): unknown;
/** The service's text for the model, printable and at most MAX_MESSAGE characters. */
export declare function shown(message: unknown, fallback?: string | null): string | null;
export declare function blockMessage(decision: Partial<Decision> | null | undefined): string;
export declare function warningNote(decision: Partial<Decision> | null | undefined): string;
/** A result with the warning appended (text as text, anything else as its JSON text). */
export declare function withWarning(result: unknown, decision: Partial<Decision>): string;
export declare function resolveAddress(options?: ClientOptions, env?: Record<string, string | undefined>): LoopClient["address"];
export declare function newRunId(): string;
/** A verdict's text from its fields alone (for a service that could not be checked). */
export declare function fieldText(action: Action, detector?: string | null, count?: number | null): string;
/** Throws unless the socket and its folder are this user's alone. */
export declare function checkSocket(path: string): void;
/** true: this user's (or root's) listener; null: cannot be checked; throws: another user's, or none. */
export declare function checkTcpListener(host: string, port: number): true | null;
