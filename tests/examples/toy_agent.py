"""A toy agent loop on loopwarden's runner client: it gets stuck polling, and is blocked.

Run it end to end on the embedded broker (starts Tansu and a worker, then
the agent), once ``.venv`` exists (either README command creates it)::

    .venv/bin/python tests/examples/toy_agent.py

A plain ``python tests/examples/toy_agent.py`` re-runs itself with
``.venv/bin/python`` when its own interpreter lacks loopwarden's packages.

The "model" here asks for the same ``web_fetch`` again and again because
the page never changes. Each call is gated (``run.check``): loopwarden
warns at the 11th identical call and blocks the 13th (thresholds 10/12
in :data:`CONFIG`); the runner then hands the model the veto result
instead of running the tool, and the model gives up.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}


def fetch(url: str) -> dict:
    """The tool: a page that never changes."""
    return {"content": [{"type": "text", "text": f"{url}: status pending"}]}


async def toy_agent(client, agent_id: str = "toy", max_turns: int = 30) -> list[tuple[str, str]]:
    """Drive one run until the model stops or is stopped; returns ``(action, text)`` per turn."""
    from loopwarden.runner import is_blocked_result

    run = client.run(agent_id=agent_id, session_id=f"{agent_id}-session", run_id=f"run-{uuid.uuid4().hex[:8]}")
    transcript: list[tuple[str, str]] = []
    for _turn in range(max_turns):
        params = {"url": "https://example.test/job/42"}  # the model's next tool call: always the same
        decision = await run.check("web_fetch", params, timeout=5.0)
        if decision.action in ("block", "abort"):
            result = decision.blocked_result()  # the model sees why; the veto is not hashed
        else:
            result = fetch(params["url"])
        await run.tool_result(decision, result=result)
        transcript.append((decision.action, result["content"][0]["text"]))
        if decision.action == "warn":
            transcript.append(("model-sees-warning", decision.message or ""))
        if is_blocked_result(result):
            break  # the "model" reads the veto and answers without the tool
    await run.end()
    return transcript


async def _print_transcript(client) -> None:
    for action, text in await toy_agent(client):
        print(f"{action:>20}  {text[:110]}")


def _use_venv() -> None:
    """Re-run under the repository's ``.venv`` when this interpreter cannot import loopwarden's dependencies."""
    import importlib.util
    import os

    if importlib.util.find_spec("msgspec") is not None and importlib.util.find_spec("aiokafka") is not None:
        return
    venv = Path(__file__).resolve().parents[2] / ".venv"
    venv_python = venv / "bin" / "python"
    if venv_python.exists() and Path(sys.prefix).resolve() != venv.resolve():  # (not already that venv)
        os.execv(str(venv_python), [str(venv_python), __file__, *sys.argv[1:]])
    sys.exit(
        "loopwarden's packages are not installed here: run `bash deploy/ci/venv.sh` (or either README "
        "command) first, then `.venv/bin/python tests/examples/toy_agent.py`"
    )


if __name__ == "__main__":
    _use_venv()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import run

    run(_print_transcript, "toy", CONFIG)
