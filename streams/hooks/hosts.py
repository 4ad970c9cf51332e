"""Each host's hook contract: what its hook input means, and how it is answered.

A host's hook JSON becomes a :class:`HookEvent` (session, run, call, tool, params,
result); the service's decision becomes the host's own output: a deny with the verdict
text as the reason the model reads, the warning as context the model sees, or the end of
the session where the host allows it. Field names are those of the host versions the
tests run (HOOKS.md and one page per host say which); Cursor's are from its documentation.
"""

from __future__ import annotations

import json
import re

from loopwarden.hooks import transcript

PROMPT, PRE, POST, STOP, COMPACT, OTHER = "prompt", "pre", "post", "stop", "compact", "other"


class HookEvent:
    """What one hook invocation reports, in the service's terms."""

    __slots__ = (
        "kind",
        "name",
        "session_id",
        "run_id",
        "tool_name",
        "params",
        "call_id",
        "result",
        "error",
        "error_kind",
        "reason",
        "transcript",
    )

    def __init__(self, kind: str, name: str, data: dict) -> None:
        self.kind = kind
        self.name = name
        self.session_id = _text(data.get("session_id"))
        self.run_id: str | None = None
        self.tool_name = _text(data.get("tool_name"))
        self.params = data.get("tool_input")
        self.call_id = _text(data.get("tool_use_id"))
        self.result: object = None
        self.error: object = None
        self.error_kind: str | None = None  # the host's own class of the error, where it names one
        self.reason: str | None = None
        self.transcript = _text(data.get("transcript_path"))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class Host:
    """The contract of one host. ``events`` maps its hook event names to our kinds."""

    name = ""
    events: dict[str, str] = {}
    run_field: str | None = None  # the input field naming the run (one user prompt), if the host has one
    warns_before = True  # the pre-call hook can hand the model context; else the warning goes with the result
    user_field: str | None = None  # the output field whose text the person at the keyboard sees, if any

    def parse(self, data: dict) -> HookEvent:
        name = str(data.get("hook_event_name") or "")
        ev = HookEvent(self.events.get(name, OTHER), name, data)
        if self.run_field:
            ev.run_id = _text(data.get(self.run_field))
        if ev.kind == POST:
            self.outcome(ev, data)
        elif ev.kind == COMPACT:
            ev.reason = _text(data.get("trigger")) or "compaction"
        return ev

    def outcome(self, ev: HookEvent, data: dict) -> None:
        if "error" in data and data["error"] not in (None, ""):
            ev.error = data["error"]
        else:
            ev.result = data.get("tool_response")

    # Answers; None prints nothing (the host goes on as it would without the hook).
    def deny(self, ev: HookEvent, message: str) -> dict | None:
        out = {"hookEventName": ev.name, "permissionDecision": "deny", "permissionDecisionReason": message}
        return {"hookSpecificOutput": out}

    def abort(self, ev: HookEvent, message: str) -> dict | None:
        """End the session; before a call, also refuse the call (after one, there is none to refuse)."""
        stop = {"continue": False, "stopReason": message}
        return stop | (self.deny(ev, message) or {}) if ev.kind == PRE else stop

    def context(self, ev: HookEvent, message: str) -> dict | None:
        return {"hookSpecificOutput": {"hookEventName": ev.name, "additionalContext": message}}

    def prompt_answer(self) -> dict | None:
        return None

    def recovered(self, ev: HookEvent) -> list[tuple[str, object]]:
        """Outcomes of earlier calls no post-call hook reported, read back at this hook: ``(call id,
        what the model was shown)``. The service records each only if its check is still pending."""
        return []


class ClaudeCode(Host):
    """Claude Code: ``prompt_id`` names the user prompt on every hook of its run; the
    model's ``tool_use_id`` is the call id. Deny and context at PreToolUse; ``continue:
    false`` ends the session from any hook."""

    name = "claude-code"
    run_field = "prompt_id"
    user_field = "systemMessage"  # shown to the user (the TUI's transcript, stderr in -p mode), never the model
    events = {
        "UserPromptSubmit": PROMPT,
        "PreToolUse": PRE,
        "PostToolUse": POST,
        "PostToolUseFailure": POST,
        "Stop": STOP,
        "SessionEnd": STOP,
        "PreCompact": COMPACT,
    }

    def outcome(self, ev: HookEvent, data: dict) -> None:
        super().outcome(ev, data)
        if ev.error is None and isinstance(ev.result, dict):
            ev.result = claude_shown(ev.tool_name or "", ev.result)


# Fields of a Claude Code tool_response the model is never shown and that change from run to run.
_CLAUDE_VOLATILE = frozenset({"durationMs", "duration_ms", "backgroundTaskId", "persistedOutputPath", "uuid"})


def _claude_rest(response: dict) -> str:
    return json.dumps({k: v for k, v in response.items() if k not in _CLAUDE_VOLATILE}, sort_keys=True, default=str)


MAX_SAVED = 64 << 20  # bytes of a saved tool output hashed at most (the rest is counted, not hashed)


def digest_form(sha256_hex: str, chars: int) -> str:
    """The one written form of a digest that stands in for a text (HOOKS.md), as the JavaScript clients write
    it too (``digest`` in streams/sidecar/clients/typescript/index.js, which the OpenClaw plugin imports).

    Not shared with the runner's ``digest_payload`` (streams/runner/wire.py): the hooks import nothing of
    loopwarden's beyond ``hooks/`` (standard library only, loaded by a bare ``python -S`` per hook call), and
    that one digests another input in another form, an encoded JSON payload's bytes (``bytes=N``), where
    this one digests a text counted in code points (``chars=N``)."""
    return f"[loopwarden digest sha256={sha256_hex} chars={chars}]"


def saved_output(path: str) -> str | None:
    """The digest of an output Claude Code saved to ``path`` (its UTF-8 text, read in pieces; past
    ``MAX_SAVED`` bytes only counted), or None when it cannot be read."""
    import hashlib
    import os
    import stat

    sha, chars, read = hashlib.sha256(), 0, 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hold the hook
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device: never ends
                return None
            while read < MAX_SAVED and (chunk := f.read(1 << 20)):
                read += len(chunk)
                sha.update(chunk)
                # characters of UTF-8 text: the bytes that do not continue a character
                chars += len(chunk) - sum(chunk.count(b) for b in _CONTINUATION)
            rest = os.fstat(fd).st_size - f.tell()
    except OSError:
        return None
    return digest_form(sha.hexdigest(), chars + max(rest, 0))


_CONTINUATION = [bytes([b]) for b in range(0x80, 0xC0)]


def claude_shown(tool: str, response: dict) -> object:
    """What the model is shown of a Claude Code tool's ``tool_response`` (an object for the built-in
    tools), as one text: two responses give equal text exactly when the model was shown equal
    text, the host's volatile parts (durations, saved-output paths, task ids) aside. A plain
    object would hash only on its ``details``/``content`` (RULES.md section 4.3), alike for every
    call of a tool. The table is in CLAUDE-CODE.md."""
    if tool == "Bash":
        # stderr arrives merged into stdout; a large output is cut to its start in the response (and
        # the model shown a preview) while all of it is saved to a file the model may read: hashed
        # whole from that file, so outputs differing past the cut stay unequal
        saved = response.get("persistedOutputPath")
        whole = saved_output(saved) if isinstance(saved, str) else None
        parts = [whole] if whole is not None else [str(response.get(k) or "") for k in ("stdout", "stderr")]
        text = "\n".join(p for p in parts if p)
        if response.get("interrupted") is True:
            text += "\n<error>Command was aborted before completion</error>"
        return text
    if tool == "Read":
        file = response.get("file")
        if response.get("type") == "text" and isinstance(file, dict) and isinstance(file.get("content"), str):
            start = file.get("startLine") if isinstance(file.get("startLine"), int) else 1
            return "\n".join(f"{start + i}\t{line}" for i, line in enumerate(file["content"].split("\n")))
        return _claude_rest(response)
    if tool == "Grep":
        names = response.get("filenames")
        if response.get("mode") == "files_with_matches" and isinstance(names, list):
            text = f"Found {len(names)} files\n" + "\n".join(map(str, names)) if names else "No files found"
        elif isinstance(response.get("content"), str):
            text = response["content"]
        else:
            return _claude_rest(response)
        pages = [f"{k}={response[k]}" for k in ("appliedLimit", "appliedOffset") if response.get(k) is not None]
        return text + (f"\n[{', '.join(pages)}]" if pages else "")
    if tool == "Glob" and isinstance(response.get("filenames"), list):
        text = "\n".join(map(str, response["filenames"]))
        return text + ("\n(Results are truncated.)" if response.get("truncated") is True else "")
    if tool in ("Edit", "MultiEdit", "Write"):
        # the model reads "The file PATH has been updated successfully." (or "File created
        # successfully at: PATH"), not the change: an identical edit repeated reads alike each time
        keys = ("type", "filePath", "userModified")
        return json.dumps({k: response.get(k) for k in keys}, sort_keys=True, default=str)
    return _claude_rest(response)


class Codex(ClaudeCode):
    """Codex CLI: Claude's shapes; ``turn_id`` names the user prompt. ``continue: false``
    is refused at PreToolUse (the call would run), so an abort is a deny: the run stays
    aborted and every later call of it is denied too. Outcomes are what the model is shown
    (CODEX.md has the table); those no PostToolUse reports are read back from the transcript."""

    name = "codex"
    run_field = "turn_id"
    user_field = "systemMessage"  # accepted; `codex exec` prints it in neither text nor --json mode
    events = {
        "UserPromptSubmit": PROMPT,
        "PreToolUse": PRE,
        "PostToolUse": POST,
        "Stop": STOP,
        "PreCompact": COMPACT,
    }

    def abort(self, ev: HookEvent, message: str) -> dict | None:
        """A deny before a call. After one, nothing: Codex 0.171.0 documents ``continue: false`` on
        PostToolUse, but ``codex exec`` ran on past it in a measured run (every call of a six-call
        script ran), so the hook neither says it nor acks an abort the host did not apply; the
        run's next call is denied and acked instead."""
        return self.deny(ev, message) if ev.kind == PRE else None

    def outcome(self, ev: HookEvent, data: dict) -> None:
        """PostToolUse fires only for calls that succeeded, with the tool's own output: the shell's
        without the exit code the model reads beside it (taken from the transcript), an MCP
        tool's CallToolResult (the model reads its ``structuredContent`` when it has one)."""
        response = data.get("tool_response")
        if ev.tool_name == "Bash" and isinstance(response, str):
            code = transcript.exit_code(ev.transcript, ev.call_id)
            ev.result = response if code is None else f"Process exited with code {code}\nOutput:\n{response}"
        elif isinstance(response, dict) and response.get("structuredContent") is not None:
            ev.result = _json_text(response["structuredContent"])
        elif isinstance(response, dict) and not isinstance(response.get("content"), list):
            ev.result = _json_text(response)  # a built-in's object (get_goal): the model reads its JSON
        else:
            ev.result = codex_shown(response)  # text, or an MCP result's content (hashed on its text)

    def recovered(self, ev: HookEvent) -> list[tuple[str, object]]:
        """At the next PreToolUse or the Stop: the outputs of the model's previous turn of calls, from
        the transcript (the calls Codex fires no PostToolUse for are among them)."""
        if ev.kind not in (PRE, STOP) or ev.transcript is None:
            return []
        return [(call_id, codex_shown(output)) for call_id, output in transcript.previous_outputs(ev.transcript)]


# Codex heads a call's output with lines of its own: a random chunk id, the wall time and a running
# command's session id differ on every run (the id as a process group does); the exit code, the
# token count (of the output) and the "Output:" marker do not. An apply_patch through the shell nests
# its own header (exit code, wall time in seconds) after it.
_CODEX_HEADER = re.compile(
    r"(?:Chunk ID|Wall time|Original token count|Exit code): |Process (?:exited with code|running with session ID) "
)
_CODEX_VOLATILE = ("Chunk ID: ", "Wall time: ")
_SESSION_ID = re.compile(r"^(Process running with session ID) \d+$")


def _json_text(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _codex_text(text: str) -> str:
    lines, kept, i = text.split("\n"), [], 0
    for nested in (False, True):  # Codex's header, then an apply_patch's own (it starts with the exit code)
        start = i
        if nested and not (i < len(lines) and lines[i].startswith("Exit code: ")):
            break
        while i < len(lines) and _CODEX_HEADER.match(lines[i]):
            i += 1
        if i == start or i >= len(lines) or lines[i] != "Output:":
            i = start
            break
        header = [_SESSION_ID.sub(r"\1", line) for line in lines[start:i] if not line.startswith(_CODEX_VOLATILE)]
        kept += [*header, "Output:"]
        i += 1
    return "\n".join(kept + lines[i:])


def codex_shown(output: object) -> object:
    """A Codex call's output as the model was shown it (text, or content items), without the
    header lines that differ on every run (the chunk id, the wall time)."""
    if isinstance(output, str):
        return _codex_text(output)
    if isinstance(output, list):
        return [
            item | {"text": _codex_text(item["text"])}
            if isinstance(item, dict) and isinstance(item.get("text"), str)
            else item
            for item in output
        ]
    return output


_VOLATILE_SHELL_LINES = re.compile(r"^(?:Process Group PGID|Background PIDs): [^\n]*\n?", re.MULTILINE)


class Gemini(Host):
    """Gemini CLI: no run and no call id in its hook input. ``BeforeAgent`` starts a run
    (the service names it), and a result is paired with its check by tool and params.
    BeforeTool cannot add context, so a warning goes with the call's result (AfterTool)."""

    name = "gemini"
    user_field = "systemMessage"  # printed on stderr in headless runs, never shown to the model
    warns_before = False
    events = {
        "BeforeAgent": PROMPT,
        "BeforeTool": PRE,
        "AfterTool": POST,
        "AfterAgent": STOP,
        "SessionEnd": STOP,
        "PreCompress": COMPACT,
    }

    def outcome(self, ev: HookEvent, data: dict) -> None:
        """The model is shown ``{"output": llmContent}``, or ``{"error": error.message}`` for a call
        that failed (CLI 0.61.0): the same here, the shell's process group line aside."""
        response = data.get("tool_response")
        error = response.get("error") if isinstance(response, dict) else None
        if error:
            message = error.get("message") if isinstance(error, dict) else None
            ev.error = message if isinstance(message, str) and message else error
            kind = error.get("type") if isinstance(error, dict) else None
            ev.error_kind = kind if isinstance(kind, str) else None
            return
        result = response.get("llmContent") if isinstance(response, dict) else response
        if ev.tool_name == "run_shell_command" and isinstance(result, str):
            # the shell tool names the process group it ran in: every run differs, so a command
            # that keeps failing the same way would never have "identical outcomes"
            result = _VOLATILE_SHELL_LINES.sub("", result)
        ev.result = result

    def deny(self, ev: HookEvent, message: str) -> dict | None:
        return {"decision": "deny", "reason": message}

    def abort(self, ev: HookEvent, message: str) -> dict | None:
        return {"continue": False, "stopReason": message, "decision": "deny", "reason": message}

    def context(self, ev: HookEvent, message: str) -> dict | None:
        """AfterTool's ``additionalContext`` is appended to the result's ``llmContent``, which the model
        never sees for a call that failed (it is shown ``error.message`` alone). For a failure,
        AfterTool's deny is the one answer the model reads: its reason becomes the error the model
        is shown, so it is the call's own error, unchanged, then the warning in the form a success
        shows it. Not for a fatal error (``no_space_left``: the deny would make it non-fatal)."""
        if ev.kind == POST and ev.error is not None:
            if ev.error_kind == "no_space_left" or not isinstance(ev.error, str):
                return None
            shown = message.replace("<", "&lt;").replace(">", "&gt;")  # as Gemini shows hook context
            return {"decision": "deny", "reason": f"{ev.error}\n\n<hook_context>{shown}</hook_context>"}
        return {"hookSpecificOutput": {"hookEventName": ev.name, "additionalContext": message}}


class Cursor(Host):
    """Cursor (from its documented contract; not installable here): ``conversation_id`` is
    the session, ``generation_id`` the run. Deny with ``agent_message`` for the model;
    a warning goes with the result (``postToolUse``'s ``additional_context``)."""

    name = "cursor"
    run_field = "generation_id"
    warns_before = False
    events = {
        "beforeSubmitPrompt": PROMPT,
        "preToolUse": PRE,
        "beforeShellExecution": PRE,
        "beforeMCPExecution": PRE,
        "postToolUse": POST,
        "postToolUseFailure": POST,
        "afterShellExecution": POST,
        "afterMCPExecution": POST,
        "stop": STOP,
        "sessionEnd": STOP,
        "preCompact": COMPACT,
    }

    def parse(self, data: dict) -> HookEvent:
        ev = super().parse(data)
        ev.session_id = _text(data.get("conversation_id")) or ev.session_id
        if ev.name in ("beforeShellExecution", "afterShellExecution"):
            ev.tool_name, ev.params = "Shell", {"command": data.get("command")}
        if isinstance(ev.params, str):  # MCP tool input arrives as a JSON string
            try:
                ev.params = json.loads(ev.params)
            except ValueError:
                pass
        return ev

    def outcome(self, ev: HookEvent, data: dict) -> None:
        if data.get("error_message"):
            ev.error = data["error_message"]
            return
        for field in ("tool_output", "output", "result_json"):
            if field in data:
                value = data[field]
                # documented as text (tool_output and result_json hold JSON text); anything else is
                # sent as its JSON text too: a plain object would hash on details/content alone
                ev.result = value if isinstance(value, str) or value is None else _json_text(value)
                return

    def deny(self, ev: HookEvent, message: str) -> dict | None:
        return {"permission": "deny", "user_message": message, "agent_message": message}

    def abort(self, ev: HookEvent, message: str) -> dict | None:
        """Cursor's hooks cannot end the session: refuse the call, or after one tell the model."""
        return self.deny(ev, message) if ev.kind == PRE else self.context(ev, message)

    def context(self, ev: HookEvent, message: str) -> dict | None:
        return {"additional_context": message} if ev.name == "postToolUse" else None

    def prompt_answer(self) -> dict | None:
        return {"continue": True}


HOSTS: dict[str, Host] = {h.name: h for h in (ClaudeCode(), Codex(), Gemini(), Cursor())}
