"""Checks the worker decides: the call published with ``await_decision``, its verdict awaited.

For runners that do not embed the engine. A gate waits for the verdict
correlated by run key and ``tool_call_id`` (:class:`VerdictRouter` answers it)
and fails open, counted, on timeout, when the broker is away (at once:
nothing waits for a dead broker) or when the producer loses it meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import msgspec
from aiokafka.errors import KafkaError

from loopwarden.runner import wire
from loopwarden.runner.publishing import Publisher
from loopwarden.runner.routing import RunEntry
from loopwarden.runner.state import ClientStats, Decision
from loopwarden.runner.verdict_router import Waiters, as_seen
from loopwarden.schemas.events import ToolCall
from loopwarden.schemas.verdicts import Verdict

log = logging.getLogger(__name__)


class WorkerChecks:
    """The gates waiting for a worker's verdict; ``listening``: the listener is positioned."""

    def __init__(
        self, publisher: Publisher, stats: ClientStats, check_timeout: float, listening: Callable[[], bool]
    ) -> None:
        self.publisher = publisher
        self.stats = stats
        self.check_timeout = check_timeout
        self.listening = listening
        self.waiters: Waiters = {}
        self.waiting: dict[str, int] = {}  # run key -> gates waiting on it (the listener keeps their verdicts)

    def fail_all(self, reason: str) -> None:
        """Every waiting gate answers now (fail open): the broker is gone or the client closes."""
        for fut in self.waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError(reason))

    async def check(
        self, key: wire.Ident, entry: RunEntry | None, call: ToolCall, timeout: float | None, t0: float
    ) -> Decision:
        stats = self.stats
        if not call.await_decision or not call.tool_call_id:
            call = msgspec.structs.replace(
                call, await_decision=True, tool_call_id=call.tool_call_id or wire.new_call_id()
            )
        publisher = self.publisher
        outbox = publisher.outbox
        if outbox is None:
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="closed", call=call)
        if not outbox.connected.is_set() or not self.listening():
            publisher.put(call, key)  # the worker still sees it when the broker is back
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="offline", call=call)
        waiter_key = (key, call.tool_call_id)
        fut = asyncio.get_running_loop().create_future()
        self.waiters[waiter_key] = fut
        self.waiting[key[0]] = self.waiting.get(key[0], 0) + 1
        limit = self.check_timeout if timeout is None else timeout
        superseded = None
        try:
            async with asyncio.timeout(limit):
                if not publisher.put(call, key):
                    raise ConnectionError("event buffer full")
                verdict: Verdict = as_seen(await fut, call.tool_name)
                if entry is not None and entry.state.aborted is not None and verdict.action != "abort":
                    # the run was aborted while this call waited; its own block still awaits an ack
                    superseded = verdict if verdict.action == "block" else None
                    verdict = entry.state.aborted
        except TimeoutError:
            stats.fail_open_timeout += 1
            stats.allowed += 1
            return Decision(action="allow", source="timeout", call=call, seconds=time.perf_counter() - t0)
        except (KafkaError, ConnectionError) as exc:
            log.debug("gate check failed open: %r", exc)
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="error", call=call, seconds=time.perf_counter() - t0)
        finally:
            if self.waiters.get(waiter_key) is fut:
                del self.waiters[waiter_key]
            left = self.waiting.get(key[0], 1) - 1
            if left > 0:
                self.waiting[key[0]] = left
            else:
                self.waiting.pop(key[0], None)
        stats.count(verdict.action)
        return Decision(
            action=verdict.action,
            source="verdict",
            call=call,
            verdict=verdict,
            seconds=time.perf_counter() - t0,
            superseded=superseded,
        )
