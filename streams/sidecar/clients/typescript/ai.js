// The Vercel AI SDK (`ai` 7): a guard for one run of `generateText` / `streamText` / `ToolLoopAgent`, through
// the SDK's own per-call settings, tools untouched:
//
// - `toolApproval` gates each call before it runs: a block is a denied approval whose reason (the
//   service's text) the model reads as the call's result; an allowed call keeps the approval it would
//   have had (your `toolApproval`, else the tool's `needsApproval`);
// - `onToolExecutionEnd` reports each result or error;
// - `prepareStep` appends a warning to its call's result before the model's next step (and acks it);
// - `stopWhen` ends the run once it is aborted (with your own stop conditions).
//
// The SDK has no run or session of its own: the guard is one run (`runId` yours, or a new one), and
// `await lw.end()` ends it (run_end, the abort's ack). Your own `toolApproval`, `stopWhen`, `prepareStep` and
// `onToolExecutionEnd` go to the guard, which calls them (settings given after `...lw` would replace its own).

import { Gate, blockMessage, newRunId, warningNote } from "./index.js";

function appendNote(output, note) {
  switch (output?.type) {
    case "text":
    case "error-text":
      return { ...output, value: String(output.value ?? "") + note };
    case "json":
    case "error-json":
      return { type: output.type === "json" ? "text" : "error-text", value: JSON.stringify(output.value) + note };
    case "content":
      return { ...output, value: [...(output.value ?? []), { type: "text", text: note }] };
    default:
      return output;
  }
}

async function fallbackApproval(approval, event) {
  const { toolCall, tools, messages, toolsContext, runtimeContext } = event;
  if (typeof approval === "function") return approval(event);
  const own = approval && Object.hasOwn(approval, toolCall.toolName) ? approval[toolCall.toolName] : undefined;
  if (own !== undefined) {
    if (typeof own !== "function") return own;
    return own(toolCall.input, { toolCallId: toolCall.toolCallId, messages, toolContext: toolsContext?.[toolCall.toolName], runtimeContext });
  }
  const tool = tools && Object.hasOwn(tools, toolCall.toolName) ? tools[toolCall.toolName] : undefined;
  if (tool?.needsApproval == null) return "not-applicable";
  const needs = typeof tool.needsApproval === "function"
    ? await tool.needsApproval(toolCall.input, { toolCallId: toolCall.toolCallId, messages, context: toolsContext?.[toolCall.toolName] })
    : tool.needsApproval;
  return needs ? "user-approval" : "not-applicable";
}

/**
 * `const lw = loopwardenRun(client, { sessionId })`, then `generateText({ model, tools, ...lw, prompt })` and
 * `await lw.end()`. `toolApproval`, `stopWhen`, `prepareStep` and `onToolExecutionEnd` given here are kept
 * (combined with the guard's).
 */
export function loopwardenRun(client, { agentId, sessionId, runId, toolApproval, stopWhen, prepareStep, onToolExecutionEnd, gate } = {}) {
  const g = gate ?? new Gate(client);
  const ref = { agentId: agentId ?? client.agentId, sessionId: sessionId ?? null, runId: runId ?? newRunId() };
  const warned = new Map(); // call id -> its warn decision, until the model is shown it
  const own = [].concat(stopWhen ?? []);

  const settings = {
    async toolApproval(event) {
      const call = event.toolCall;
      const decision = await g.decide(ref, call.toolName, call.input, call.toolCallId);
      if (!decision.proceed) {
        await g.refused(ref, decision);
        return { type: "denied", reason: blockMessage(decision) };
      }
      g.hold(ref, call.toolCallId, decision);
      if (decision.action === "warn") warned.set(call.toolCallId, decision);
      return fallbackApproval(toolApproval, event);
    },
    async onToolExecutionEnd(event) {
      const call = event.toolCall;
      const decision = g.take(ref, call.toolCallId) ?? { proceed: true, toolCallId: call.toolCallId, toolName: call.toolName, params: call.input };
      const out = event.toolOutput;
      const outcome = out?.type === "tool-error" ? { error: out.error } : { result: out?.output };
      await g.finished(ref, decision, outcome);
      if (onToolExecutionEnd) await onToolExecutionEnd(event);
    },
    async prepareStep(options) {
      const ours = await withWarnings(options.messages);
      if (!prepareStep) return ours;
      const yours = await prepareStep(ours ? { ...options, messages: ours.messages } : options);
      return ours && !yours?.messages ? { ...(yours ?? {}), messages: ours.messages } : yours;
    },
    stopWhen: [() => g.aborted(ref) !== null, ...own],
  };

  /** The step's messages with each warned call's result carrying its warning (acked), or undefined. */
  async function withWarnings(messages) {
    if (!warned.size) return undefined;
    let changed = false;
    const delivered = [];
    const next = messages.map((message) => {
      if (message.role !== "tool" || !Array.isArray(message.content)) return message;
      const content = message.content.map((part) => {
        const decision = part?.type === "tool-result" ? warned.get(part.toolCallId) : undefined;
        if (!decision) return part;
        warned.delete(part.toolCallId);
        delivered.push(decision);
        changed = true;
        return { ...part, output: appendNote(part.output, warningNote(decision)) };
      });
      return { ...message, content };
    });
    for (const decision of delivered) await g._quiet(() => g.run(ref).ack(decision, "applied", "warning appended to the call's result"));
    return changed ? { messages: next } : undefined;
  }
  // the run's handles, not settings: kept out of `...lw`
  Object.defineProperties(settings, {
    ref: { value: ref },
    gate: { value: g },
    aborted: { value: () => g.aborted(ref) },
    compaction: { value: (reason) => g.compaction(ref, reason) },
    end: { value: () => g.end(ref) },
  });
  return settings;
}
