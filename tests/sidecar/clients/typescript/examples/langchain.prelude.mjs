// Prelude of TYPESCRIPT.md's LangChain.js example: a scripted tool-calling chat model making the same call
// 25 times, and a search whose output never changes.
import { BaseChatModel as BaseChatModel_ } from "@langchain/core/language_models/chat_models";
import { AIMessage as AIMessage_ } from "@langchain/core/messages";

class Scripted_ extends BaseChatModel_ {
  _llmType() {
    return "scripted";
  }
  bindTools() {
    return this;
  }
  async _generate(messages) {
    const n = messages.filter((m) => m.getType() === "tool").length;
    const message = n < 25
      ? new AIMessage_({ content: "", tool_calls: [{ name: "lookup", args: { q: "job 42" }, id: `call_${n}`, type: "tool_call" }] })
      : new AIMessage_("giving up");
    return { generations: [{ text: "", message }] };
  }
}
const model = new Scripted_({});
const search = async () => "status: pending";
