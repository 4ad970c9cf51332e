// Prelude of TYPESCRIPT.md's Claude Agent SDK example: the scripted local Anthropic Messages API of
// anthropic.mjs (the same Bash call 25 times, then a final text) that the SDK's Claude Code is pointed at,
// in a throwaway home.
import { mkdtempSync as mkdtemp_ } from "node:fs";
import { tmpdir as tmpdir_ } from "node:os";
import { join as join_ } from "node:path";
import { claudeEnv as claudeEnv_, scriptedAnthropic as scriptedAnthropic_ } from "./anthropic.mjs";

const poll_ = { script: () => ["Bash", { command: "echo 'status: pending'", description: "poll" }], calls: 25 };
const { server: server_, url: url_ } = await scriptedAnthropic_(() => poll_);
server_.unref();
Object.assign(process.env, claudeEnv_(mkdtemp_(join_(tmpdir_(), "lw-example-")), url_));
