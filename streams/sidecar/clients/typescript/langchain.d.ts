// Types of @loopwarden/client/langchain: agent middleware for LangChain.js v1 `createAgent`.
import type { AgentMiddleware } from "langchain";
import type { Decision, Gate, LoopClient, RunRef } from "./index.js";

/** A prompt of a thread: `runId` is the id of its human message. */
export interface PromptRef {
  threadId?: string | null;
  runId: string;
}

export type LoopwardenMiddleware = AgentMiddleware & {
  readonly gate: Gate;
  ref(ref: PromptRef): RunRef;
  aborted(ref: PromptRef): Decision | Partial<Decision> | null;
  compaction(ref: PromptRef, reason?: string): Promise<void>;
};

export declare function loopwardenMiddleware(client: LoopClient, options?: { agentId?: string; gate?: Gate; name?: string }): LoopwardenMiddleware;
