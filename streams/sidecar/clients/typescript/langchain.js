// LangChain.js v1 / LangGraph.js: agent middleware for `createAgent` (`langchain`), the framework's own
// extension point around a tool call and the agent loop:
//
// - `afterModel` admits a model message's calls together (`/v1/check_batch`: the openclaw-latest profile's
//   bounded recovery);
// - `wrapToolCall` asks the service before the tool runs: a block is the tool's `ToolMessage` (status
//   "error") with the service's text; a warning is appended to the call's `ToolMessage`; the result or
//   the error is reported;
// - `beforeModel` ends the run and jumps to the end once it is aborted (no further model call);
// - `afterAgent` ends the run (run_end, the abort's ack).
//
// Ids: session = the LangGraph thread (`configurable.thread_id`), run = the invocation's user prompt (the
// id of the last human message, which LangGraph's message reducer always sets), call = the model's.

import { createMiddleware } from "langchain";
import { ToolMessage } from "@langchain/core/messages";

import { Gate, blockMessage, newRunId, warningNote } from "./index.js";

function isHuman(message) {
  const type = typeof message?.getType === "function" ? message.getType() : message?.type ?? message?._getType?.();
  return type === "human";
}

function withNote(message, decision) {
  const note = warningNote(decision);
  if (typeof message.content === "string") message.content = message.content + note;
  else if (Array.isArray(message.content)) message.content = [...message.content, { type: "text", text: note }];
  else message.content = JSON.stringify(message.content) + note;
  return message;
}

export function loopwardenMiddleware(client, { agentId, gate, name = "loopwarden" } = {}) {
  const g = gate ?? new Gate(client);
  const unnamed = new WeakMap(); // a state without a human message -> a run id of its own

  /** The run a graph state and runtime belong to. */
  function refOf(state, runtime) {
    const messages = state?.messages ?? [];
    let runId = null;
    for (let i = messages.length - 1; i >= 0; i--) {
      if (isHuman(messages[i])) {
        runId = messages[i].id ?? null;
        break;
      }
    }
    if (!runId && state && typeof state === "object") {
      runId = unnamed.get(state) ?? newRunId();
      unnamed.set(state, runId);
    }
    const threadId = runtime?.configurable?.thread_id ?? null;
    return { agentId: agentId ?? client.agentId, sessionId: threadId, runId };
  }

  const middleware = createMiddleware({
    name,
    afterModel: async (state, runtime) => {
      // one model message's calls admitted together before any runs (the openclaw-latest profile's batch
      // admission; otherwise each is checked in turn, as LangGraph would run them: all before any result)
      const last = state?.messages?.at(-1);
      const calls = (last?.tool_calls ?? []).filter((c) => c?.id);
      if (calls.length < 2) return undefined;
      const ref = refOf(state, runtime);
      const decisions = await g.run(ref).checkBatch(calls.map((c) => ({ toolName: c.name, params: c.args ?? {}, toolCallId: c.id })));
      decisions.forEach((d, i) => g.hold(ref, calls[i].id, d));
      return undefined;
    },
    wrapToolCall: async (request, handler) => {
      const ref = refOf(request.state, request.runtime);
      const call = request.toolCall;
      const admitted = call.id ? g.take(ref, call.id) : undefined;
      const decision = admitted && admitted.toolName === call.name ? admitted : await g.decide(ref, call.name, call.args ?? {}, call.id);
      if (!decision.proceed) {
        await g.refused(ref, decision);
        return new ToolMessage({ content: blockMessage(decision), tool_call_id: call.id, name: call.name, status: "error" });
      }
      let out;
      try {
        out = await handler(request);
      } catch (err) {
        await g.finished(ref, decision, { error: err });
        throw err;
      }
      if (!ToolMessage.isInstance(out)) {
        await g.finished(ref, decision, { result: null }); // a Command: the graph goes elsewhere
        return out;
      }
      const outcome = out.status === "error" ? { error: out.content } : { result: out.content };
      const warned = decision.action === "warn";
      await g.finished(ref, decision, outcome, { warned });
      return warned ? withNote(out, decision) : out;
    },
    beforeModel: {
      canJumpTo: ["end"],
      hook: async (state, runtime) => {
        const ref = refOf(state, runtime);
        if (!g.aborted(ref)) return undefined;
        await g.end(ref); // a jump to the end from here skips afterAgent (langchain 1.5)
        return { jumpTo: "end" };
      },
    },
    afterAgent: async (state, runtime) => {
      await g.end(refOf(state, runtime));
      return undefined;
    },
  });
  Object.defineProperties(middleware, {
    gate: { value: g },
    /** The run of a thread's prompt: `{ threadId, runId }` (runId: the human message's id). */
    ref: { value: ({ threadId, runId }) => ({ agentId: agentId ?? client.agentId, sessionId: threadId ?? null, runId }) },
    aborted: { value: (ref) => g.aborted(middleware.ref(ref)) },
    compaction: { value: (ref, reason) => g.compaction(middleware.ref(ref), reason) },
  });
  return middleware;
}
