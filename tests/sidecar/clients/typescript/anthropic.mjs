// A scripted local Anthropic Messages API for the Claude Agent SDK (which runs its bundled Claude Code), as
// tests/hosts/fake_models.py is for the CLIs: stateless, it asks for `script(n)` while the request carries
// n < calls tool results, then answers a final text. The SDK's cases (claude_agent_sdk.test.mjs) and
// TYPESCRIPT.md's example's prelude (examples/claude-agent-sdk.prelude.mjs) both run against it.

import http from "node:http";
import { join } from "node:path";

export const FINAL = "All done.";

/** The tool results a request carries, in order. */
export function toolResults(body) {
  return (body.messages ?? []).flatMap((m) => (m.role === "user" && Array.isArray(m.content) ? m.content.filter((b) => b?.type === "tool_result") : []));
}

function sse(events) {
  return events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join("");
}

function answer(body, { script, calls }) {
  const n = toolResults(body).length;
  const tool = body.tools?.length && n < calls ? script(n) : null;
  const usage = { input_tokens: 10, output_tokens: 5 };
  const start = { id: `msg_${n}`, type: "message", role: "assistant", model: body.model ?? "claude-fake", content: [], stop_reason: null, stop_sequence: null, usage };
  const block = tool ? { type: "tool_use", id: `toolu_${String(n).padStart(4, "0")}`, name: tool[0], input: {} } : { type: "text", text: "" };
  const delta = tool ? { type: "input_json_delta", partial_json: JSON.stringify(tool[1]) } : { type: "text_delta", text: FINAL };
  return sse([
    ["message_start", { type: "message_start", message: start }],
    ["content_block_start", { type: "content_block_start", index: 0, content_block: block }],
    ["content_block_delta", { type: "content_block_delta", index: 0, delta }],
    ["content_block_stop", { type: "content_block_stop", index: 0 }],
    ["message_delta", { type: "message_delta", delta: { stop_reason: tool ? "tool_use" : "end_turn", stop_sequence: null }, usage }],
    ["message_stop", { type: "message_stop" }],
  ]);
}

/**
 * The server, listening on loopback: `behaviour()` gives the current `{ script, calls }` (`script(n)`: the n-th
 * call as `[tool name, input]`), `seen(body)` gets every /messages request. Resolves to the server and its URL.
 */
export async function scriptedAnthropic(behaviour, seen = () => {}) {
  const server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      let body = {};
      try {
        body = JSON.parse(raw || "{}");
      } catch {}
      if (req.url.includes("/count_tokens")) return res.end(JSON.stringify({ input_tokens: 10 }));
      if (!req.url.includes("/messages")) return res.end("{}");
      seen(body);
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.end(answer(body, behaviour()));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

/** Claude Code's environment for the scripted model: a throwaway home, no telemetry, no updates. */
export function claudeEnv(home, baseUrl) {
  return {
    HOME: home,
    CLAUDE_CONFIG_DIR: join(home, ".claude"),
    ANTHROPIC_BASE_URL: baseUrl,
    ANTHROPIC_API_KEY: "dummy",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_NON_ESSENTIAL_MODEL_CALLS: "1",
  };
}
