// Types of @loopwarden/client/claude-agent-sdk: hook callbacks for `query({ options: { hooks } })`.
import type { Gate, LoopClient } from "./index.js";

type Callback = (input: any, toolUseID: string | undefined, options: { signal: AbortSignal }) => Promise<Record<string, unknown>>;
type Matchers = Array<{ matcher?: string; hooks: Callback[] }>;

export interface LoopwardenHooks {
  PreToolUse: Matchers;
  PostToolUse: Matchers;
  PostToolUseFailure: Matchers;
  UserPromptSubmit: Matchers;
  Stop: Matchers;
  PreCompact: Matchers;
}

export declare function loopwardenHooks(client: LoopClient, options?: { agentId?: string; gate?: Gate; matcher?: string }): LoopwardenHooks;

/** What the model is shown of a Claude Code tool's `tool_response`, as one text (the hook's mapping). */
export declare function claudeShown(tool: string, response: unknown): Promise<unknown>;
