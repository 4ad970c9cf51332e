// Compiled by `tsc --noEmit --strict --skipLibCheck` against @mastra/core's own types
// (tests/sidecar/test_typescript_clients.py): the guard spreads into a Mastra Agent's settings as it is.
// `--skipLibCheck` because Mastra's bundled declarations do not compile on their own. Never run.

import { Agent } from "@mastra/core/agent";
import { RequestContext } from "@mastra/core/request-context";
import { createTool } from "@mastra/core/tools";
import { z } from "zod";

import { LoopClient } from "@loopwarden/client";
import { loopwardenAgent } from "@loopwarden/client/mastra";

declare const model: ConstructorParameters<typeof Agent>[0]["model"];

async function main(): Promise<void> {
  const client = new LoopClient({ agentId: "bot" });
  const lookup = createTool({ id: "lookup", description: "Look.", inputSchema: z.object({ q: z.string() }), execute: async ({ q }) => q });
  const lw = loopwardenAgent(client, { hooks: { afterToolCall: async ({ toolName }) => void toolName } });
  const agent = new Agent({ id: "a", name: "a", instructions: "Help.", model, tools: { lookup }, ...lw });
  const mine = new Agent({ id: "b", name: "b", instructions: "Help.", model, inputProcessors: [...lw.inputProcessors], outputProcessors: [...lw.outputProcessors], hooks: lw.hooks });
  const rc = new RequestContext();
  await lw.compaction(rc, "overflow");
  const out = await agent.generate("hi", { maxSteps: 30, requestContext: rc });
  const text: string = out.text;
  void [text, mine, lw.aborted(rc)];
  client.close();
}

void main;
