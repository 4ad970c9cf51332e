"""The README's runner example, whole: an agent loop gated by loopwarden, acks included.

Start a local stack in one terminal, then run this in another::

    .venv/bin/loopwarden up --config deploy/config/loopwarden.json5
    .venv/bin/python tests/examples/runner_example.py

The "model" asks for the same ``web_fetch`` again and again because the page
never changes; with that config loopwarden warns at the 11th identical call
and blocks the 21st. The part between the README markers is the README's
code block, word for word (tests/project/test_docs.py checks it); the suite runs
this file against ``loopwarden up`` (tests/devtools/test_up.py).
"""

from __future__ import annotations

# README: begin
import os
import uuid

from loopwarden.runner import LoopClient


async def main() -> str:
    bootstrap = os.environ.get("LOOPWARDEN_RUNNER_BOOTSTRAP", "127.0.0.1:19092")  # what `loopwarden up` printed
    model = StuckModel()
    config = "deploy/config/loopwarden.json5"  # the workers' config: per-run rules are decided in-process
    async with LoopClient(bootstrap=bootstrap, config=config) as lw:  # one client per runner process
        run = lw.run(agent_id="my-agent", session_id="s-1", run_id=f"run-{uuid.uuid4().hex[:8]}")
        last = "allow"
        while (call := model.next_tool_call()) is not None:
            call_id, name, params = call
            d = await run.check(name, params, tool_call_id=call_id)  # allow | warn | block | abort
            result = await tools[name](**params) if d.proceed else d.blocked_result()
            await run.tool_result(d, result=result)  # also acks a block/abort; the veto is not hashed
            model.add_tool_result(call_id, result, note=d.message if d.action == "warn" else None)
            if d.action == "warn":
                await run.ack(d)  # the model has the warning: ack it (blocks and aborts are acked above)
            if d.action != "allow" or d.failed_open:
                print(f"{call_id}: {d.action} ({d.source}) {d.message or ''}")
            last = d.action
            if d.action == "abort":  # compaction_loop_persisted: end the run
                break
        await run.end()
    # after the client closed: its events are delivered (or counted as not), so the stats are final
    print(f"{model.turns - 1} tool calls, last decision {last}; client stats: {lw.stats}")
    return last


# README: end


async def web_fetch(url: str) -> dict:
    """Your tool; here a page that never changes."""
    return {"content": [{"type": "text", "text": f"{url}: status pending"}]}


class StuckModel:
    """Your model: here one that asks for the same page until it is told to stop."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.turns = 0

    def next_tool_call(self) -> tuple[str, str, dict] | None:
        self.turns += 1
        if any("blocked" in note.lower() for note in self.notes) or self.turns > 60:
            return None  # it read the veto and answers without the tool
        return f"call-{self.turns}", "web_fetch", {"url": "https://example.test/job/42"}

    def add_tool_result(self, call_id: str, result: dict, note: str | None = None) -> None:
        text = result["content"][0]["text"]
        self.notes += [text] + ([note] if note else [])


tools = {"web_fetch": web_fetch}


if __name__ == "__main__":
    import asyncio

    asyncio.run(main())
