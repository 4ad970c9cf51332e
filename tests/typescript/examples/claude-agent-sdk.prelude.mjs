// Prelude of TYPESCRIPT.md's Claude Agent SDK example: a scripted local Anthropic Messages API (the same
// Bash call 25 times, then a final text) that the SDK's Claude Code is pointed at, in a throwaway home.
import http_ from "node:http";
import { mkdtempSync as mkdtemp_ } from "node:fs";
import { tmpdir as tmpdir_ } from "node:os";
import { join as join_ } from "node:path";

const server_ = http_.createServer((req, res) => {
  let raw = "";
  req.on("data", (c) => (raw += c));
  req.on("end", () => {
    const body = JSON.parse(raw || "{}");
    if (!req.url.includes("/messages") || req.url.includes("count_tokens")) return res.end(JSON.stringify({ input_tokens: 1 }));
    const n = (body.messages ?? []).flatMap((m) => (m.role === "user" && Array.isArray(m.content) ? m.content : [])).filter((b) => b?.type === "tool_result").length;
    const tool = body.tools?.length && n < 25;
    const usage = { input_tokens: 10, output_tokens: 5 };
    const block = tool ? { type: "tool_use", id: `toolu_${n}`, name: "Bash", input: {} } : { type: "text", text: "" };
    const delta = tool ? { type: "input_json_delta", partial_json: JSON.stringify({ command: "echo 'status: pending'", description: "poll" }) } : { type: "text_delta", text: "All done." };
    const events = [
      ["message_start", { type: "message_start", message: { id: `m${n}`, type: "message", role: "assistant", model: "claude-fake", content: [], stop_reason: null, stop_sequence: null, usage } }],
      ["content_block_start", { type: "content_block_start", index: 0, content_block: block }],
      ["content_block_delta", { type: "content_block_delta", index: 0, delta }],
      ["content_block_stop", { type: "content_block_stop", index: 0 }],
      ["message_delta", { type: "message_delta", delta: { stop_reason: tool ? "tool_use" : "end_turn", stop_sequence: null }, usage }],
      ["message_stop", { type: "message_stop" }],
    ];
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(events.map(([e, d]) => `event: ${e}\ndata: ${JSON.stringify(d)}\n\n`).join(""));
  });
});
await new Promise((resolve) => server_.listen(0, "127.0.0.1", resolve));
server_.unref();
const home_ = mkdtemp_(join_(tmpdir_(), "lw-example-"));
Object.assign(process.env, {
  HOME: home_,
  CLAUDE_CONFIG_DIR: join_(home_, ".claude"),
  ANTHROPIC_BASE_URL: `http://127.0.0.1:${server_.address().port}`,
  ANTHROPIC_API_KEY: "dummy",
  DISABLE_TELEMETRY: "1",
  DISABLE_ERROR_REPORTING: "1",
  DISABLE_AUTOUPDATER: "1",
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  DISABLE_NON_ESSENTIAL_MODEL_CALLS: "1",
});
