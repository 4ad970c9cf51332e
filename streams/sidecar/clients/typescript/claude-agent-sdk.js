// The Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`): hook callbacks for `query({ options: { hooks } })`,
// the SDK's own extension point around each tool call. They answer as loopwarden's Claude Code hook does
// (streams/hooks/CLAUDE-CODE.md), in-process instead of through a command:
//
// - PreToolUse asks the service: a block is `permissionDecision: "deny"` with the service's text (the model
//   reads it as the call's result); an abort also ends the session (`continue: false`); a warning goes to
//   the model as the hook's `additionalContext` beside the call (and is acked);
// - PostToolUse / PostToolUseFailure report the result or the error; an abort decided on a result (the
//   post-compaction guard) ends the session there;
// - UserPromptSubmit starts a run, Stop ends it, PreCompact arms the post-compaction guard.
//
// Ids: session = the SDK's session id, run = the prompt (`prompt_id`), call = the model's `tool_use_id`.

import { Gate, blockMessage, shown } from "./index.js";

export function loopwardenHooks(client, { agentId, gate, matcher } = {}) {
  const g = gate ?? new Gate(client);

  function refOf(input) {
    return { agentId: agentId ?? client.agentId, sessionId: input?.session_id ?? null, runId: input?.prompt_id ?? null };
  }

  function deny(name, message) {
    return { hookSpecificOutput: { hookEventName: name, permissionDecision: "deny", permissionDecisionReason: message } };
  }

  async function pre(input) {
    const ref = refOf(input);
    const decision = await g.decide(ref, input.tool_name, input.tool_input ?? {}, input.tool_use_id);
    if (decision.action === "block" || decision.action === "abort" || !decision.proceed) {
      const message = blockMessage(decision);
      await g.refused(ref, decision);
      if (decision.action !== "abort") return deny("PreToolUse", message);
      await g.end(ref); // `continue: false` ends the session without a Stop hook
      return { continue: false, stopReason: message, ...deny("PreToolUse", message) };
    }
    g.hold(ref, input.tool_use_id, decision);
    if (decision.action === "warn") {
      await g._quiet(() => g.run(ref).ack(decision, "applied", "warning handed to the model as the call's context"));
      return { hookSpecificOutput: { hookEventName: "PreToolUse", additionalContext: shown(decision.message, "Tool-loop warning.") } };
    }
    return {};
  }

  async function post(input) {
    const ref = refOf(input);
    const decision = g.take(ref, input.tool_use_id) ?? { proceed: true, toolCallId: input.tool_use_id, toolName: input.tool_name, params: input.tool_input ?? {} };
    const outcome = input.hook_event_name === "PostToolUseFailure" ? { error: input.error ?? "error" } : { result: input.tool_response };
    const answer = await g.finished(ref, decision, outcome);
    if (answer?.abort) {
      const message = shown(answer.abort.message, "Run aborted by loop detection.");
      await g.end(ref); // run_end acknowledges the abort: the session ends here, without a Stop hook
      return { continue: false, stopReason: message };
    }
    return {};
  }

  async function prompt(input) {
    await g._quiet(() => g.run(refOf(input)).start());
    return {};
  }

  async function stop(input) {
    await g.end(refOf(input));
    return {};
  }

  async function compact(input) {
    await g.compaction(refOf(input), input?.trigger ?? "compaction");
    return {};
  }

  // every callback fails open: loopwarden's trouble never turns into a hook failure
  const safe = (fn) => async (input) => {
    try {
      return await fn(input);
    } catch {
      client.stats.sendErrors += 1;
      return {};
    }
  };
  const entry = (fn) => [{ ...(matcher ? { matcher } : {}), hooks: [safe(fn)] }];
  return {
    PreToolUse: entry(pre),
    PostToolUse: entry(post),
    PostToolUseFailure: entry(post),
    UserPromptSubmit: entry(prompt),
    Stop: entry(stop),
    PreCompact: entry(compact),
  };
}
