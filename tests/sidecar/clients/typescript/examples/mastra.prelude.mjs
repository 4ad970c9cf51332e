// Prelude of TYPESCRIPT.md's Mastra example: Mastra's own scripted model making the same call 25 times, and a
// search whose output never changes.
import { MastraLanguageModelV2Mock as ScriptedModel } from "@mastra/core/test-utils/llm-mock";

const usage_ = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };
const model = new ScriptedModel({
  doGenerate: async ({ prompt }) => {
    const n = prompt.filter((m) => m.role === "tool").flatMap((m) => m.content).length;
    if (n >= 25) return { content: [{ type: "text", text: "giving up" }], finishReason: "stop", usage: usage_, warnings: [] };
    const call = { type: "tool-call", toolCallId: `call_${n}`, toolName: "lookup", input: JSON.stringify({ q: "job 42" }) };
    return { content: [call], finishReason: "tool-calls", usage: usage_, warnings: [] };
  },
});
const search = async () => "status: pending";
