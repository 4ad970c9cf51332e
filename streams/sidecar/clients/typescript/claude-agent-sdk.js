// The Claude Agent SDK (`@anthropic-ai/claude-agent-sdk`): hook callbacks for `query({ options: { hooks } })`,
// the SDK's own extension point around each tool call. They answer as loopwarden's Claude Code hook does
// (streams/hooks/CLAUDE-CODE.md), in-process instead of through a command:
//
// - PreToolUse asks the service: a block is `permissionDecision: "deny"` with the service's text (the model
//   reads it as the call's result); an abort also ends the session (`continue: false`); a warning goes to
//   the model as the hook's `additionalContext` beside the call (and is acked);
// - PostToolUse / PostToolUseFailure report the result or the error; an abort decided on a result (the
//   post-compaction guard) ends the session there;
// - UserPromptSubmit starts a run, Stop ends it, PreCompact arms the post-compaction guard.
//
// Ids: session = the SDK's session id, run = the prompt (`prompt_id`), call = the model's `tool_use_id`.
//
// A result is what the model was shown of the tool's `tool_response` (`claudeShown`), as the Claude Code
// hook maps it (the table is in streams/hooks/CLAUDE-CODE.md; a test holds the two mappings equal).

import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { open } from "node:fs/promises";

import { Gate, blockMessage, canonical, digestForm, shown } from "./index.js";

// Fields of a tool_response the model is never shown and that change from call to call.
const VOLATILE = new Set(["durationMs", "duration_ms", "backgroundTaskId", "persistedOutputPath", "uuid"]);
const MAX_SAVED = 64 << 20; // bytes of a saved output hashed at most (the rest counted, not hashed)

function rest(response) {
  const kept = Object.fromEntries(Object.entries(response).filter(([k]) => !VOLATILE.has(k)));
  return canonical(kept) ?? kept; // too deep for JSON text: as it is (the client bounds it)
}

/** The digest of an output Claude Code saved to `path` (its UTF-8 text), or null when it cannot be read. */
async function savedOutput(path) {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK); // a FIFO must not hold the hook
    const stat = await handle.stat();
    if (!stat.isFile()) return null;
    const sha = createHash("sha256");
    const buffer = Buffer.alloc(1 << 20);
    let read = 0;
    let chars = 0;
    while (read < MAX_SAVED) {
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, read);
      if (!bytesRead) break;
      const chunk = buffer.subarray(0, bytesRead);
      sha.update(chunk);
      for (const b of chunk) if (b < 0x80 || b >= 0xc0) chars += 1; // bytes that start a character
      read += bytesRead;
    }
    return digestForm(sha.digest("hex"), chars + Math.max(stat.size - read, 0));
  } catch {
    return null;
  } finally {
    await handle?.close().catch(() => {});
  }
}

/**
 * What the model is shown of a Claude Code tool's `tool_response`, as one text: two responses give equal
 * text exactly when the model was shown equal text, the host's volatile parts (durations, saved-output
 * paths, task ids) aside. Passed on as an object, a saved output's unique path made every large Bash
 * output unequal (an identical 79 KB output was never a loop).
 */
export async function claudeShown(tool, response) {
  if (!response || typeof response !== "object" || Array.isArray(response)) return response;
  if (tool === "Bash") {
    // a large output is cut to its start in the response, all of it saved to a file: hashed whole from there
    const saved = response.persistedOutputPath;
    const whole = typeof saved === "string" ? await savedOutput(saved) : null;
    const parts = whole !== null ? [whole] : ["stdout", "stderr"].map((k) => String(response[k] || ""));
    let text = parts.filter(Boolean).join("\n");
    if (response.interrupted === true) text += "\n<error>Command was aborted before completion</error>";
    return text;
  }
  if (tool === "Read") {
    const file = response.file;
    if (response.type === "text" && file && typeof file === "object" && typeof file.content === "string") {
      const start = Number.isInteger(file.startLine) ? file.startLine : 1;
      return file.content.split("\n").map((line, i) => `${start + i}\t${line}`).join("\n");
    }
    return rest(response);
  }
  if (tool === "Grep") {
    const names = response.filenames;
    let text;
    if (response.mode === "files_with_matches" && Array.isArray(names)) {
      text = names.length ? `Found ${names.length} files\n` + names.map(String).join("\n") : "No files found";
    } else if (typeof response.content === "string") {
      text = response.content;
    } else {
      return rest(response);
    }
    const pages = ["appliedLimit", "appliedOffset"].filter((k) => response[k] != null).map((k) => `${k}=${response[k]}`);
    return text + (pages.length ? `\n[${pages.join(", ")}]` : "");
  }
  if (tool === "Glob" && Array.isArray(response.filenames)) {
    return response.filenames.map(String).join("\n") + (response.truncated === true ? "\n(Results are truncated.)" : "");
  }
  if (tool === "Edit" || tool === "MultiEdit" || tool === "Write") {
    // the model reads "The file PATH has been updated successfully.", not the change
    return canonical({ type: response.type ?? null, filePath: response.filePath ?? null, userModified: response.userModified ?? null });
  }
  return rest(response);
}

export function loopwardenHooks(client, { agentId, gate, matcher } = {}) {
  const g = gate ?? new Gate(client);

  function refOf(input) {
    return { agentId: agentId ?? client.agentId, sessionId: input?.session_id ?? null, runId: input?.prompt_id ?? null };
  }

  function deny(name, message) {
    return { hookSpecificOutput: { hookEventName: name, permissionDecision: "deny", permissionDecisionReason: message } };
  }

  async function pre(input) {
    const ref = refOf(input);
    const decision = await g.decide(ref, input.tool_name, input.tool_input ?? {}, input.tool_use_id);
    if (decision.action === "block" || decision.action === "abort" || !decision.proceed) {
      const message = blockMessage(decision);
      await g.refused(ref, decision);
      if (decision.action !== "abort") return deny("PreToolUse", message);
      await g.end(ref); // `continue: false` ends the session without a Stop hook
      return { continue: false, stopReason: message, ...deny("PreToolUse", message) };
    }
    g.hold(ref, input.tool_use_id, decision);
    if (decision.action === "warn") {
      await g._quiet(() => g.run(ref).ack(decision, "applied", "warning handed to the model as the call's context"));
      return { hookSpecificOutput: { hookEventName: "PreToolUse", additionalContext: shown(decision.message, "Tool-loop warning.") } };
    }
    return {};
  }

  async function post(input) {
    const ref = refOf(input);
    const decision = g.take(ref, input.tool_use_id) ?? { proceed: true, toolCallId: input.tool_use_id, toolName: input.tool_name, params: input.tool_input ?? {} };
    const outcome =
      input.hook_event_name === "PostToolUseFailure"
        ? { error: input.error ?? "error" }
        : { result: await claudeShown(input.tool_name, input.tool_response) };
    const answer = await g.finished(ref, decision, outcome);
    if (answer?.abort) {
      const message = shown(answer.abort.message, "Run aborted by loop detection.");
      await g.end(ref); // run_end acknowledges the abort: the session ends here, without a Stop hook
      return { continue: false, stopReason: message };
    }
    return {};
  }

  async function prompt(input) {
    await g._quiet(() => g.run(refOf(input)).start());
    return {};
  }

  async function stop(input) {
    await g.end(refOf(input));
    return {};
  }

  async function compact(input) {
    await g.compaction(refOf(input), input?.trigger ?? "compaction");
    return {};
  }

  // every callback fails open: loopwarden's trouble never turns into a hook failure
  const safe = (fn) => async (input) => {
    try {
      return await fn(input);
    } catch {
      client.stats.sendErrors += 1;
      return {};
    }
  };
  const entry = (fn) => [{ ...(matcher ? { matcher } : {}), hooks: [safe(fn)] }];
  return {
    PreToolUse: entry(pre),
    PostToolUse: entry(post),
    PostToolUseFailure: entry(post),
    UserPromptSubmit: entry(prompt),
    Stop: entry(stop),
    PreCompact: entry(compact),
  };
}
