// Types of @loopwarden/client/openai-agents: tool guardrails for OpenAI Agents JS.
import type { Decision, Gate, LoopClient, RunRef } from "./index.js";

export interface GuardedAgent {
  readonly gate: Gate;
  /** The ids of the run a context object belongs to. */
  ref(context: object): RunRef | null;
  aborted(context: object): Decision | Partial<Decision> | null;
  compaction(context: object, reason?: string): Promise<void>;
  /** `runner.run(agent, input, options)` as one run; `run_end` however it ends. */
  run<T = any>(runner: { run(agent: any, input: any, options?: any): Promise<T> }, input: any, options?: { context?: object; sessionId?: string; runId?: string; [key: string]: any }): Promise<T>;
}

/** Adds loopwarden's input and output guardrails to every function tool of `agent` (and of its handoffs). */
export declare function guardAgent(agent: { name?: string; tools?: any[]; handoffs?: any[] }, client: LoopClient, options?: { agentId?: string; sessionId?: string; gate?: Gate }): GuardedAgent;
