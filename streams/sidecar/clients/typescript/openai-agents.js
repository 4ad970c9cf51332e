// OpenAI Agents JS (`@openai/agents`): tool guardrails, the SDK's own gate around a function tool.
//
// `guardAgent(agent, client)` adds an input and an output guardrail to every function tool of the agent
// (and of the agents it hands off to): the input guardrail asks the service before the tool runs (a block
// is `rejectContent` with the service's text, which the model reads as the call's output; an abort is
// `throwException`, so the run raises `ToolInputGuardrailTripwireTriggered`); the output guardrail reports
// the output and, for a warned call, replaces it with its text and the warning (`rejectContent`).
// `lw.run(runner, input, options)` is one run: its ids, and `run_end` however it ends.
//
// A run is keyed by its context object (`options.context`, one per `lw.run`; a run not started by
// `lw.run` is keyed by the SDK's own RunContext). A tool error reaches the output guardrail as the text
// the SDK gives the model (its `errorFunction`'s), so it is reported as that result.

import { Gate, blockMessage, newRunId, withWarning } from "./index.js";

const GUARDED = Symbol.for("loopwarden.guarded");

function functionTools(agent, seen = new Set()) {
  if (!agent || seen.has(agent)) return [];
  seen.add(agent);
  const own = (agent.tools ?? []).filter((t) => t?.type === "function");
  const handed = (agent.handoffs ?? []).flatMap((h) => functionTools(h?.agent ?? h, seen));
  return [...own, ...handed];
}

export function guardAgent(agent, client, { agentId, sessionId, gate } = {}) {
  const g = gate ?? new Gate(client);
  const refs = new WeakMap(); // context object (yours, or the SDK's RunContext) -> run ref

  function refOf(runContext, agentName) {
    const inner = runContext?.context && typeof runContext.context === "object" ? runContext.context : null;
    let ref = (runContext && refs.get(runContext)) ?? (inner && refs.get(inner));
    const key = inner ?? runContext;
    if (!ref) {
      ref = { agentId: agentId ?? agentName ?? client.agentId, sessionId: sessionId ?? null, runId: newRunId() };
      if (key) refs.set(key, ref);
    }
    return ref;
  }

  function parse(args) {
    if (typeof args !== "string") return args ?? {};
    try {
      return JSON.parse(args);
    } catch {
      return { arguments: args };
    }
  }

  const input = {
    type: "tool_input",
    name: "loopwarden",
    async run({ context, agent: who, toolCall }) {
      const ref = refOf(context, who?.name);
      const decision = await g.decide(ref, toolCall.name, parse(toolCall.arguments), toolCall.callId);
      if (decision.action === "abort") {
        await g.refused(ref, decision);
        return { behavior: { type: "throwException" }, outputInfo: { loopwarden: "abort", message: blockMessage(decision) } };
      }
      if (!decision.proceed) {
        await g.refused(ref, decision);
        return { behavior: { type: "rejectContent", message: blockMessage(decision) }, outputInfo: { loopwarden: decision.action } };
      }
      g.hold(ref, toolCall.callId, decision);
      return { behavior: { type: "allow" } };
    },
  };

  const output = {
    type: "tool_output",
    name: "loopwarden",
    async run({ context, agent: who, toolCall, output: result }) {
      const ref = refOf(context, who?.name);
      const decision = g.take(ref, toolCall.callId) ?? { proceed: true, toolCallId: toolCall.callId, toolName: toolCall.name, params: parse(toolCall.arguments) };
      const warned = decision.action === "warn";
      await g.finished(ref, decision, { result }, { warned });
      if (warned) return { behavior: { type: "rejectContent", message: withWarning(result, decision) }, outputInfo: { loopwarden: "warn" } };
      return { behavior: { type: "allow" } };
    },
  };

  for (const tool of functionTools(agent)) {
    if (tool[GUARDED]) continue; // a tool shared by two guarded agents is gated once
    tool[GUARDED] = true;
    tool.inputGuardrails = [input, ...(tool.inputGuardrails ?? [])];
    tool.outputGuardrails = [output, ...(tool.outputGuardrails ?? [])];
  }

  return {
    gate: g,
    /** The ids of the run a context belongs to (`options.context` of `lw.run`). */
    ref: (context) => refs.get(context) ?? null,
    aborted: (context) => {
      const ref = refs.get(context);
      return ref ? g.aborted(ref) : null;
    },
    compaction: (context, reason) => g.compaction(refOf(context, agent.name), reason),
    /** `runner.run(agent, input, options)` as one run; `run_end` (the abort's ack) however it ends. */
    async run(runner, inputItems, options = {}) {
      const context = options.context && typeof options.context === "object" ? options.context : {};
      const ref = { agentId: agentId ?? agent.name ?? client.agentId, sessionId: sessionId ?? options.sessionId ?? runner?.config?.groupId ?? null, runId: options.runId ?? newRunId() };
      refs.set(context, ref);
      const { sessionId: _s, runId: _r, ...rest } = options;
      try {
        return await runner.run(agent, inputItems, { ...rest, context });
      } finally {
        await g.end(ref);
      }
    },
  };
}
