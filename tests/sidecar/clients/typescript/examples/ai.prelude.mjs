// Prelude of TYPESCRIPT.md's Vercel AI SDK example: a scripted model (the SDK's own mock) making the same
// call 25 times, and a search whose output never changes.
import { MockLanguageModelV3 as ScriptedModel } from "ai/test";

const usage_ = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
const model = new ScriptedModel({
  doGenerate: async ({ prompt }) => {
    const n = prompt.filter((m) => m.role === "tool").length;
    if (n >= 25) return { content: [{ type: "text", text: "giving up" }], finishReason: { unified: "stop", raw: "stop" }, usage: usage_, warnings: [] };
    const call = { type: "tool-call", toolCallId: `call_${n}`, toolName: "lookup", input: JSON.stringify({ q: "job 42" }) };
    return { content: [call], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage: usage_, warnings: [] };
  },
});
const search = async () => "status: pending";
