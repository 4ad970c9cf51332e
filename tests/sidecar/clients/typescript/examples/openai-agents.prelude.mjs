// Prelude of TYPESCRIPT.md's OpenAI Agents JS example: a scripted Model making the same call 25 times, and
// a search whose output never changes.
import { Usage as Usage_ } from "@openai/agents";

const model = {
  async getResponse(request) {
    const n = (Array.isArray(request.input) ? request.input : []).filter((i) => i.type === "function_call_result").length;
    const usage = new Usage_({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 });
    if (n >= 25) return { usage, output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "giving up" }] }] };
    return { usage, output: [{ type: "function_call", callId: `call_${n}`, name: "lookup", arguments: JSON.stringify({ q: "job 42" }), status: "completed" }] };
  },
  async *getStreamedResponse() {
    throw new Error("not used");
  },
};
const search = async () => "status: pending";
