// Compiled by `tsc --noEmit --strict` (tests/sidecar/test_typescript_clients.py): the package's hand-written
// types describe what a TypeScript user writes. Never run.

import { LoopClient, bounded, type Decision, type ClientStats } from "@loopwarden/client";
import { loopwardenRun } from "@loopwarden/client/ai";
import { loopwardenHooks } from "@loopwarden/client/claude-agent-sdk";
import { loopwardenMiddleware } from "@loopwarden/client/langchain";
import { loopwardenAgent } from "@loopwarden/client/mastra";
import { guardAgent } from "@loopwarden/client/openai-agents";

async function main(): Promise<void> {
  const client = new LoopClient({ socketPath: "/run/loopwarden/sidecar.sock", token: "t", timeoutMs: 250, agentId: "bot" });
  const run = client.run({ sessionId: "s-1" });
  await run.start();
  const d: Decision = await run.check("read", { path: "notes.md" }, "call-1");
  if (!d.proceed) await run.result(d);
  else {
    const answer = await run.result(d, { result: "text" });
    if (answer?.abort) await run.end();
    if (d.action === "warn") await run.ack(d, "applied");
  }
  const batch: Decision[] = await run.checkBatch([{ toolName: "a", params: {}, toolCallId: "1" }]);
  await run.compaction("overflow");
  await run.end();
  const stats: ClientStats = client.stats;
  const n: number = stats.failOpen + stats.failOpenTimeout + batch.length;
  const sent: unknown = bounded("x".repeat(n));
  void sent;

  const lw = loopwardenRun(client, { sessionId: "s-2" });
  const { toolApproval, prepareStep, onToolExecutionEnd, stopWhen } = lw;
  void [toolApproval, prepareStep, onToolExecutionEnd, stopWhen];
  await lw.end();

  const hooks = loopwardenHooks(client, { agentId: "claude" });
  const pre = hooks.PreToolUse[0].hooks[0];
  void pre;

  const mw = loopwardenMiddleware(client);
  await mw.compaction({ threadId: "t-1", runId: "h-1" }, "overflow");
  const aborted: boolean = mw.aborted({ runId: "h-1" }) !== null;
  void aborted;

  const guarded = guardAgent({ name: "agent", tools: [] }, client);
  const out: string = await guarded.run({ run: async () => "done" }, "hi", { sessionId: "s-3" });
  void out;

  const rc = new Map<string, unknown>(); // a RequestContext's stand-in: the guard keys a run by the object
  const mastra = loopwardenAgent(client, { sessionId: "s-4", hooks: { afterToolCall: async () => undefined } });
  const { hooks: toolHooks, inputProcessors, outputProcessors } = mastra;
  void [toolHooks.beforeToolCall, inputProcessors[0].processInputStep, outputProcessors[0].processToolResult];
  await mastra.compaction(rc, "overflow");
  const stopped: boolean = mastra.aborted(rc) !== null && mastra.ref(rc)?.runId !== null;
  void stopped;
  await mastra.end(rc);
  client.close();
}

void main;
