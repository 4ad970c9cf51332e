// The OpenClaw release's own loop detection, called the way its embedded runner calls it.
//
// Usage: node openclaw_detector.mjs DIST STEPS.json OUT.jsonl (files: the release logs to stdout/stderr)
// DIST: the release's dist folder. steps.json: [{session, run, calls: [{id, tool, params, result?, error?}]}],
// one entry per assistant tool batch, in order. For each batch the script does what the release's
// runner does: batch admission (admitToolCallBatch: each call judged with the siblings before it
// as veto records; a critical blocks the whole batch and records the vetoes itself), the commit of
// the admitted calls, then each executed call's outcome (recordToolCallOutcome). The detector's raw
// finding for each call (detectToolCallLoop on the same projection admission uses) gives the
// detector, warning key and message. One JSON line per call:
// {id, run, action: allow|warn|block|skipped, level, detector, count, warningKey, message}.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

const dist = process.argv[2];
const find = (prefix) => {
  const name = readdirSync(dist).find((f) => f.startsWith(prefix) && f.endsWith(".mjs"));
  if (!name) throw new Error(`no ${prefix}*.mjs in ${dist}`);
  return path.join(dist, name);
};
const caller = await import(find("agent-tools.before-tool-call-"));
const { beforeToolCallRuntime: rt } = await import(find("agent-tools.before-tool-call.runtime-"));
const admitToolCallBatch = caller.S;
if (typeof admitToolCallBatch !== "function" || admitToolCallBatch.name !== "admitToolCallBatch") {
  throw new Error("the release's admitToolCallBatch export moved");
}
// The caller's tool-name normalisation (`normalizeToolPolicyName(name || "tool")`): the raw findings and the
// outcomes are judged under the name admission records, so " " is "" and "Bash" is "exec" there too.
const { l: normalizeToolPolicyName } = await import(find("tool-policy-shared-"));
if (typeof normalizeToolPolicyName !== "function" || normalizeToolPolicyName.name !== "normalizeToolPolicyName") {
  throw new Error("the release's normalizeToolPolicyName export moved");
}
const toolOf = (call) => normalizeToolPolicyName(call.tool || "tool");
// Admission judges a call under its name normalised once more (`evaluateToolLoopCall`): a name that
// normalises to "" is judged as "tool" while it is recorded as "".
const judgedAs = (call) => normalizeToolPolicyName(toolOf(call) || "tool");

const steps = JSON.parse(readFileSync(process.argv[3], "utf8"));
const out = [];
for (const step of steps) {
  const ctx = {
    sessionKey: `agent:main:${step.session}`,
    sessionId: step.session,
    runId: step.run,
    loopDetection: { enabled: true },
  };
  const state = rt.getDiagnosticSessionState({ sessionKey: ctx.sessionKey, sessionId: ctx.sessionId });
  // The raw findings, on the projection admission uses: history plus earlier siblings as vetoes.
  const projected = { ...state, toolCallHistory: [...(state.toolCallHistory ?? [])] };
  const raw = [];
  for (const call of step.calls) {
    raw.push(rt.detectToolCallLoop(projected, judgedAs(call), call.params, ctx.loopDetection, { runId: ctx.runId }));
    const scratch = { ...state, toolCallHistory: [] };
    rt.recordToolCall(scratch, toolOf(call), call.params, call.id, ctx.loopDetection, { runId: ctx.runId });
    const rec = scratch.toolCallHistory.at(-1);
    rec.outcomeKind = "tool-loop-veto";
    projected.toolCallHistory.push(rec);
  }
  const admission = await admitToolCallBatch(
    step.calls.map((c) => ({ toolCall: { id: c.id, name: c.tool }, args: c.params })),
    ctx,
  );
  const row = (call, i, action) => {
    const r = raw[i];
    return {
      id: call.id,
      run: step.run,
      action,
      level: r.stuck ? r.level : null,
      detector: r.stuck ? r.detector : null,
      count: r.stuck ? r.count : null,
      warningKey: r.stuck ? r.warningKey : null,
      message: r.stuck ? r.message : null,
    };
  };
  if (admission.intervention) {
    const trigger = admission.intervention.toolCallId;
    step.calls.forEach((call, i) => {
      out.push(call.id === trigger ? row(call, i, "block") : { id: call.id, run: step.run, action: "skipped" });
    });
    continue;
  }
  admission.commitReadyCalls?.(step.calls.map((c) => ({ toolCallId: c.id, args: c.params })));
  const warned = new Map((admission.warnings ?? []).map((w) => [w.toolCallId, w.count]));
  step.calls.forEach((call, i) => {
    rt.recordToolCallOutcome(state, {
      toolName: toolOf(call),
      toolParams: call.params,
      toolCallId: call.id,
      result: call.result,
      error: call.error,
      config: ctx.loopDetection,
      runId: ctx.runId,
    });
    const r = row(call, i, warned.has(call.id) ? "warn" : "allow");
    if (warned.has(call.id) && warned.get(call.id) !== r.count) throw new Error(`warning count mismatch at ${call.id}`);
    out.push(r);
  });
}
writeFileSync(process.argv[4], out.map((r) => JSON.stringify(r)).join("\n") + "\n");
