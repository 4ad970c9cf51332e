"""loopwarden for CrewAI (``pip install -e '.[crewai]'`` in the clone).

CrewAI's tool hooks (``before_tool_call`` / ``after_tool_call``) and its
``before_llm_call`` hook, registered for the crews :meth:`LoopwardenCrewHooks.kickoff`
runs::

    lw = LoopwardenCrewHooks(client)
    result = await lw.kickoff(crew, inputs={...})   # the crew runs in a thread; run_end included

CrewAI's hooks are synchronous and run in the crew's threads, so each asks
the gate on the client's event loop (the one ``kickoff`` is awaited on) and
waits for the answer (``timeout``, then the call goes ahead, counted); a hook
called on that loop itself cannot wait and lets the call go ahead, counted.

- ``allow``: the tool runs; ``after_tool_call`` publishes its result (a
  failed tool's ``Error executing tool: ...`` as its error);
- ``warn``: the tool runs; the warning is appended to its result; acknowledged;
- ``block``: ``before_tool_call`` refuses the call (the tool does not run) and
  ``after_tool_call`` replaces CrewAI's own refusal text with the block message;
- ``abort``: as block, and the crew's next model request is refused
  (``before_llm_call``): the kickoff fails with CrewAI's ``LLMCallBlockedError``,
  the model is not asked again.

What CrewAI does not hand a hook: the model's tool call id (a call gets an id
of its own, ``crewai-...``; a call's two hooks are paired by the thread that
runs it) and the model message's other calls (each call is a batch of one
under the ``openclaw-latest`` profile).

Run identity: ``agent_id`` is the constructor's, else the agent's ``role``;
``session_id`` the crew's id; ``run_id`` one per :meth:`~LoopwardenCrewHooks.kickoff`.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

from crewai.hooks import (
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)

from loopwarden.runner.integrations._gate import Gate, block_message
from loopwarden.runner.wire import RunRef

FAILED = "Error executing tool: "  # how CrewAI hands the model a tool's exception


class LoopwardenCrewHooks:
    """The hooks of one client for the crews it kicks off."""

    def __init__(self, client: Any, agent_id: str | None = None, *, timeout: float = 10.0) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self.timeout = timeout
        self._runs: dict[str, str] = {}  # crew id -> the run id of its kickoff in progress
        self._refs: dict[str, RunRef | None] = {}  # run id of a kickoff in progress -> its run
        self._loop: asyncio.AbstractEventLoop | None = None
        self._local = threading.local()  # the call in progress in this thread: (ref, call id, decision)
        self._users = 0

    def ref(self, ctx: Any) -> RunRef:
        crew = str(getattr(getattr(ctx, "crew", None), "id", "") or "") or None
        agent = getattr(ctx, "agent", None)
        name = self.agent_id or getattr(agent, "role", None) or "crewai"
        run = self._runs.get(crew or "") or (f"crew-{crew}" if crew else None)
        ref = RunRef(agent_id=name, session_id=crew, run_id=run)
        if run is not None and run in self._refs:
            self._refs[run] = self._refs[run] or ref  # the run as the hooks registered it (ended by kickoff)
        return ref

    def _wait(self, coro: Any) -> Any:
        """Run ``coro`` on the client's loop from a crew thread; None if that cannot be waited for."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            coro.close()
            self.gate.client.stats.fail_open_error += 1
            return None
        try:
            return asyncio.run_coroutine_threadsafe(coro, loop).result(self.timeout + 1)
        except Exception:  # noqa: BLE001 - loopwarden trouble never breaks the crew
            self.gate.client.stats.fail_open_error += 1
            return None

    def _before_tool(self, ctx: Any) -> bool | None:
        ref, call_id = self.ref(ctx), f"crewai-{uuid.uuid4().hex}"
        decision = self._wait(self.gate.before(ref, ctx.tool_name, dict(ctx.tool_input or {}), call_id))
        self._local.call = (ref, call_id, decision)
        return False if decision is not None and not decision.proceed else None

    def _after_tool(self, ctx: Any) -> str | None:
        ref, call_id, decision = getattr(self._local, "call", (None, None, None))
        self._local.call = (None, None, None)
        if decision is None:
            return None
        if not decision.proceed:
            return block_message(decision)
        result = ctx.tool_result
        if isinstance(result, str) and result.startswith(FAILED):
            self._wait(self.gate.after(ref, call_id, error=result[len(FAILED) :]))
            return None
        note = self._wait(self.gate.after(ref, call_id, result=ctx.raw_tool_result))
        return f"{result}{note}" if note is not None else None

    def _before_llm(self, ctx: Any) -> bool | None:
        """An aborted run asks the model nothing more (CrewAI then fails the kickoff)."""
        return False if self.gate.aborted(self.ref(ctx)) is not None else None

    async def kickoff(self, crew: Any, inputs: dict[str, Any] | None = None, *, run_id: str | None = None) -> Any:
        """``crew.kickoff(inputs)`` in a thread, gated, as one run (``run_end`` when it returns or raises)."""
        self._loop = asyncio.get_running_loop()
        crew_id = str(crew.id)
        run_id = self._runs[crew_id] = run_id or f"run_{uuid.uuid4().hex}"
        self._refs[run_id] = None
        self._register()
        try:
            return await asyncio.to_thread(crew.kickoff, inputs=inputs)
        finally:
            self._unregister()
            self._runs.pop(crew_id, None)
            ref = self._refs.pop(run_id, None)
            if ref is not None:
                await self.gate.end(ref)

    async def compaction_retry(self, ref: RunRef, reason: str | None = None) -> None:
        """Report that a run compacted its history and retries (arms the post-compaction guard)."""
        await self.gate.compaction_retry(ref, reason)

    def _register(self) -> None:
        if self._users == 0:
            register_before_tool_call_hook(self._before_tool)
            register_after_tool_call_hook(self._after_tool)
            register_before_llm_call_hook(self._before_llm)
        self._users += 1

    def _unregister(self) -> None:
        self._users -= 1
        if self._users == 0:
            unregister_before_tool_call_hook(self._before_tool)
            unregister_after_tool_call_hook(self._after_tool)
            unregister_before_llm_call_hook(self._before_llm)
