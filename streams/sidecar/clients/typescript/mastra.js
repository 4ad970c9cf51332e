// Mastra (`@mastra/core` 1.x): a guard made of the agent's own tool hooks and processors, tools untouched:
//
// - `hooks.beforeToolCall` gates each call before it runs: a block returns `{ proceed: false, output }`, so the
//   tool is not run and the model reads the service's text as the call's result;
// - `hooks.afterToolCall` reports each result or error;
// - an output processor's `processOutputStep` (after the model's step, before its tools) notes a step of two or
//   more calls: the first of them to reach `beforeToolCall` admits them all together (`/v1/check_batch`: the
//   openclaw-latest profile's batch admission), before any of them runs;
// - an output processor's `processToolResult` appends a warning to its call's result in the message list (what
//   the model and the stream get) and acks it; `processOutputResult` ends a finished run (run_end);
// - an input processor's `processInputStep` appends the warning of a call whose tool threw to its error text
//   (`processToolResult` sees successful results only) before the next model step;
// - an input processor's `processInputStep` ends an aborted run before the next model step, Mastra's way: its
//   `abort()` (a tripwire: `result.tripwire` is set, no further model call).
//
// A run is one `generate` / `stream` call, keyed by its RequestContext (Mastra makes one per call; pass your
// own `requestContext` to address the run, for `lw.compaction` or `lw.aborted`). Ids: agent = `agentId` given
// here, else the Mastra agent's id (the tool hooks' `metadata.agentId`; processors are not told it), session =
// `sessionId` given here, else the request context's thread (`mastra__threadId`), run = made per call, call =
// the model's tool call id.

import { Gate, blockMessage, newRunId, warningNote, withWarning } from "./index.js";

const THREAD_KEY = "mastra__threadId"; // Mastra's MASTRA_THREAD_ID_KEY
const WARNED = "\u0000warned\u0000"; // a warned call held between afterToolCall and processToolResult
const ADMITTED = "\u0000admitted\u0000"; // a call's decision from its step's batch, until its hook takes it

/**
 * `const lw = loopwardenAgent(client)`, then `new Agent({ id, name, instructions, model, tools, ...lw })`. Your own
 * `hooks` go here (called after the guard's); your own processors go beside the guard's:
 * `inputProcessors: [...lw.inputProcessors, ...yours]`.
 */
export function loopwardenAgent(client, { agentId, sessionId, hooks, gate } = {}) {
  const g = gate ?? new Gate(client);
  const refs = new WeakMap(); // RequestContext -> the ref of its run in progress
  const last = new WeakMap(); // RequestContext -> the ref of its last run (ended)
  const none = {}; // the key when Mastra gives no request context
  const batches = new WeakMap(); // RequestContext -> the step's calls, admitted together by the first hook
  const erred = new WeakMap(); // run ref -> warned calls whose tool threw, until the next step shows the warning

  function failedWarnings(ref) {
    let list = erred.get(ref);
    if (!list) erred.set(ref, (list = []));
    return list;
  }

  /** A warned call whose tool threw: the warning appended to its error text in the message list (then acked). */
  async function showOnErrors(ref, messageList) {
    const list = erred.get(ref);
    if (!list?.length || typeof messageList?.updateToolInvocation !== "function") return false;
    erred.delete(ref);
    const parts = (messageList.get?.all?.db?.() ?? []).flatMap((m) => m?.content?.parts ?? []);
    let changed = false;
    for (const { callId, decision } of list) {
      const part = parts.findLast((p) => p?.type === "tool-invocation" && p.toolInvocation?.toolCallId === callId);
      const call = part?.toolInvocation;
      if (call?.state !== "output-error") continue;
      const errorText = String(call.errorText ?? "") + warningNote(decision);
      if (messageList.updateToolInvocation({ type: "tool-invocation", toolInvocation: { ...call, errorText } })) {
        changed = true;
        await g._quiet(() => g.run(ref).ack(decision, "applied", "warning appended to the call's error"));
      }
    }
    return changed;
  }

  function keyOf(requestContext) {
    return requestContext && typeof requestContext === "object" ? requestContext : none;
  }

  function refOf(requestContext, agentName) {
    const key = keyOf(requestContext);
    let ref = refs.get(key);
    if (!ref) {
      const thread = typeof key.get === "function" ? key.get(THREAD_KEY) : undefined;
      ref = { agentId: agentId ?? agentName ?? client.agentId, sessionId: sessionId ?? (typeof thread === "string" ? thread : null), runId: newRunId() };
      refs.set(key, ref);
    }
    return ref;
  }

  async function endRun(requestContext) {
    const key = keyOf(requestContext);
    const ref = refs.get(key);
    if (!ref) return;
    refs.delete(key);
    last.set(key, ref);
    await g.end(ref);
  }

  function callOf(hook) {
    const context = hook?.context ?? {};
    return { context, callId: context.toolCallId ?? context.agent?.toolCallId ?? null };
  }

  /** The step's calls admitted together (once, by the first of them to get here); this call's decision, if any. */
  async function admitted(ref, requestContext, callId) {
    const batch = batches.get(keyOf(requestContext));
    if (!batch || !batch.ids.has(callId)) return undefined;
    batch.admitting ??= g.run(ref).checkBatch(batch.calls).then((decisions) => {
      decisions.forEach((d, i) => g.hold(ref, ADMITTED + batch.calls[i].toolCallId, d));
    }, () => undefined); // checkBatch fails open itself; each call is then checked alone
    await batch.admitting;
    batch.ids.delete(callId);
    if (!batch.ids.size) batches.delete(keyOf(requestContext));
    return g.take(ref, ADMITTED + callId);
  }

  const guardHooks = {
    async beforeToolCall(hook) {
      const { context, callId } = callOf(hook);
      const ref = refOf(context.requestContext, hook.metadata?.agentId);
      const early = await admitted(ref, context.requestContext, callId);
      const decision = early && early.toolName === hook.toolName ? early : await g.decide(ref, hook.toolName, hook.input ?? {}, callId);
      if (!decision.proceed) {
        await g.refused(ref, decision);
        return { proceed: false, output: blockMessage(decision) };
      }
      g.hold(ref, callId, decision);
      return hooks?.beforeToolCall ? hooks.beforeToolCall(hook) : undefined;
    },
    async afterToolCall(hook) {
      const { context, callId } = callOf(hook);
      const ref = refOf(context.requestContext, hook.metadata?.agentId);
      const decision = g.take(ref, callId) ?? { proceed: true, toolCallId: callId, toolName: hook.toolName, params: hook.input ?? {} };
      const failed = hook.error !== undefined;
      await g.finished(ref, decision, failed ? { error: hook.error } : { result: hook.output });
      if (decision.action === "warn") {
        if (!failed) g.hold(ref, WARNED + callId, decision); // processToolResult appends it
        else failedWarnings(ref).push({ callId, decision }); // processToolResult sees no error: the next step's processInputStep
      }
      if (hooks?.afterToolCall) await hooks.afterToolCall(hook);
    },
  };

  const input = {
    id: "loopwarden-input",
    name: "loopwarden",
    async processInputStep(args) {
      const ref = refs.get(keyOf(args.requestContext)); // none before the run's first call (or compaction)
      const changed = ref ? await showOnErrors(ref, args.messageList) : false;
      const aborted = ref ? g.aborted(ref) : null;
      if (!aborted) return changed ? args.messageList : undefined;
      await endRun(args.requestContext); // run_end acknowledges the abort
      return args.abort(blockMessage(aborted), { retry: false, metadata: { loopwarden: "abort" } });
    },
  };

  const output = {
    id: "loopwarden-output",
    name: "loopwarden",
    async processOutputStep(args) {
      const calls = (args.toolCalls ?? []).filter((c) => c?.toolCallId);
      if (calls.length >= 2) {
        const batch = calls.map((c) => ({ toolName: c.toolName, params: c.args ?? {}, toolCallId: c.toolCallId }));
        batches.set(keyOf(args.requestContext), { calls: batch, ids: new Set(batch.map((c) => c.toolCallId)), admitting: null });
      }
      return args.messageList;
    },
    async processToolResult(args) {
      const ref = refs.get(keyOf(args.requestContext));
      const decision = ref ? g.take(ref, WARNED + args.toolCallId) : undefined;
      if (!decision) return undefined;
      const result = withWarning(args.result, decision);
      const toolInvocation = { state: "result", toolCallId: args.toolCallId, toolName: args.toolName, args: args.args, result };
      if (args.messageList?.updateToolInvocation({ type: "tool-invocation", toolInvocation })) {
        await g._quiet(() => g.run(ref).ack(decision, "applied", "warning appended to the call's result"));
      }
      return args.messageList;
    },
    async processOutputResult(args) {
      await endRun(args.requestContext);
      return args.messageList;
    },
  };

  const settings = { hooks: guardHooks, inputProcessors: [input], outputProcessors: [output] };
  // the guard's handles, not agent settings: kept out of `...lw`
  Object.defineProperties(settings, {
    gate: { value: g },
    ref: { value: (requestContext) => refs.get(keyOf(requestContext)) ?? last.get(keyOf(requestContext)) ?? null },
    aborted: {
      value: (requestContext) => {
        const ref = refs.get(keyOf(requestContext)) ?? last.get(keyOf(requestContext));
        return ref ? g.aborted(ref) : null;
      },
    },
    compaction: { value: (requestContext, reason) => g.compaction(refOf(requestContext), reason) },
    end: { value: (requestContext) => endRun(requestContext) },
  });
  return settings;
}
