// Types of @loopwarden/client/mastra: a guard for a Mastra agent (`@mastra/core` 1.x), its tool hooks and processors.
import type { Decision, Gate, LoopClient, RunRef } from "./index.js";

/** Mastra's `ToolHooks`, as the guard uses them. */
export interface MastraToolHooks {
  beforeToolCall?: (hook: { toolName: string; input: any; context: any; metadata?: Record<string, unknown> }) => any;
  afterToolCall?: (hook: { toolName: string; input: any; context: any; metadata?: Record<string, unknown>; output?: any; error?: unknown }) => void | Promise<void>;
}

export interface MastraGuardOptions {
  /** Default: the Mastra agent's id. */
  agentId?: string;
  /** Default: the request context's thread (`mastra__threadId`), else none. */
  sessionId?: string;
  /** Your own hooks: called after the guard's (`beforeToolCall` only for the calls it allows). */
  hooks?: MastraToolHooks;
  gate?: Gate;
}

/**
 * Spread it into the agent's settings: `new Agent({ id, name, instructions, model, tools, ...lw })`. A run is one
 * `generate` / `stream` call, keyed by its RequestContext (pass your own `requestContext` to address it).
 */
export interface MastraGuard {
  hooks: Required<MastraToolHooks>;
  inputProcessors: Array<{ id: string; name?: string; processInputStep(args: any): Promise<any> }>;
  outputProcessors: Array<{ id: string; name?: string; processOutputStep(args: any): Promise<any>; processToolResult(args: any): Promise<any>; processOutputResult(args: any): Promise<any> }>;
  readonly gate: Gate;
  /** The ids of the run of a request context (in progress, else its last). */
  ref(requestContext: object): RunRef | null;
  aborted(requestContext: object): Decision | Partial<Decision> | null;
  /** Arms the post-compaction guard for the run of `requestContext` (before or during the call). */
  compaction(requestContext: object, reason?: string): Promise<void>;
  /** `run_end` for a run that did not finish (a thrown error); a finished or aborted run is ended already. */
  end(requestContext: object): Promise<void>;
}

export declare function loopwardenAgent(client: LoopClient, options?: MastraGuardOptions): MastraGuard;
