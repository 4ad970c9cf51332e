// Types of @loopwarden/client/ai: a guard for one run of the Vercel AI SDK (`ai` 7).
import type { Decision, Gate, LoopClient, RunRef } from "./index.js";

export interface AIGuardOptions {
  agentId?: string;
  sessionId?: string;
  /** Yours, or a new one. */
  runId?: string;
  /** Your own approval (a function, or one per tool): kept for the calls the guard allows. */
  toolApproval?: unknown;
  /** Your own stop conditions: combined with the guard's (stop once the run is aborted). */
  stopWhen?: unknown;
  /** Yours: called after the guard's, with the messages carrying its warnings. */
  prepareStep?: (options: any) => any;
  /** Yours: called after the guard reported the outcome. */
  onToolExecutionEnd?: (event: any) => unknown;
  gate?: Gate;
}

/** Spread it into `generateText` / `streamText` / a `ToolLoopAgent`'s settings; then `await lw.end()`. */
export interface AIGuard {
  toolApproval(event: { toolCall: { toolCallId: string; toolName: string; input: unknown }; [key: string]: any }): Promise<any>;
  onToolExecutionEnd(event: { toolCall: { toolCallId: string; toolName: string; input: unknown }; toolOutput: any; [key: string]: any }): Promise<void>;
  prepareStep(options: { messages: any[]; [key: string]: any }): Promise<{ messages: any[] } | undefined>;
  stopWhen: Array<(options: { steps: any[] }) => boolean | PromiseLike<boolean>>;
  readonly ref: RunRef;
  readonly gate: Gate;
  aborted(): Decision | Partial<Decision> | null;
  compaction(reason?: string): Promise<void>;
  end(): Promise<void>;
}

export declare function loopwardenRun(client: LoopClient, options?: AIGuardOptions): AIGuard;
