"""The runner client: publish a run's events, gate calls, act on the run's verdicts.

One :class:`LoopClient` per runner process: one producer (events, keyed by
run key) and one :class:`~loopwarden.runner.listener.VerdictListener`. A
runner registers each run it drives (:meth:`LoopClient.run` returns a
:class:`Run` handle); verdicts of other runs are dropped, repeated
``verdict_id``\\ s too (bounded LRU). Gate checks are correlated by
(run key, ``tool_call_id``). loopwarden must never stop a healthy agent: a
check that gets no answer within its timeout, or cannot be published,
allows the call and is counted (:class:`~loopwarden.runner.state.ClientStats`),
and so does a payload value that cannot be JSON-encoded (sent as its repr).

Acknowledgements: when the runner reports what it did with a gated call
(:meth:`LoopClient.tool_result` with the :class:`Decision`), the client sends
``verdict_ack`` by itself: ``applied`` for a block or abort answered with the
veto, ``failed`` when the tool ran anyway; :meth:`Run.end` acknowledges an
abort. A warning's delivery only the runner sees: :meth:`LoopClient.ack`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from msgspec import UNSET

from loopwarden.kafka.connection import kafka_auth
from loopwarden.runner import wire
from loopwarden.runner.listener import VerdictListener
from loopwarden.runner.results import is_blocked_result
from loopwarden.runner.run import Run
from loopwarden.runner.settings import ClientSettings
from loopwarden.runner.state import ClientStats, Decision, RecentIds, RunState
from loopwarden.schemas.events import Event, ToolCall, ToolResult, encode_event, run_key
from loopwarden.schemas.verdicts import Verdict

log = logging.getLogger(__name__)

VerdictCallback = Callable[[Verdict], Any]
_CLOSED = object()


class _Entry:
    """A registered run: its state, callbacks and iterator queues."""

    __slots__ = ("state", "callbacks", "queues")

    def __init__(self) -> None:
        self.state = RunState()
        self.callbacks: list[VerdictCallback] = []
        self.queues: list[asyncio.Queue] = []


class VerdictStream:
    """Async iterator over one run's verdicts; subscribed when created, so nothing is missed."""

    def __init__(self, queue: asyncio.Queue) -> None:
        self._queue = queue
        self._done = False

    def __aiter__(self) -> VerdictStream:
        return self

    async def __anext__(self) -> Verdict:
        if self._done:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _CLOSED:
            self._done = True
            raise StopAsyncIteration
        return item


class LoopClient:
    """Async client on aiokafka. Use ``async with LoopClient(bootstrap=...) as client:``."""

    def __init__(self, settings: ClientSettings | None = None, **overrides: Any) -> None:
        base = settings or ClientSettings()
        self.settings = msgspec.structs.replace(base, **overrides) if overrides else base
        self.stats = ClientStats()
        self._runs: dict[str, _Entry] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future] = {}
        self._waiting: dict[str, int] = {}  # run key -> gates waiting on it (the listener keeps their verdicts)
        self._seen = RecentIds(self.settings.dedup_size)
        self._producer: AIOKafkaProducer | None = None
        self._listener: VerdictListener | None = None
        self.encode = wire.PayloadEncoder(self._count_fallback)

    def _count_fallback(self) -> None:
        self.stats.encode_fallbacks += 1

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> LoopClient:
        s = self.settings
        self._producer = AIOKafkaProducer(
            bootstrap_servers=s.servers,
            linger_ms=s.linger_ms,
            acks=1,
            enable_idempotence=False,
            request_timeout_ms=s.request_timeout_ms,
            client_id=f"{s.client_id}-events",
            **kafka_auth(s),
        )
        self._listener = VerdictListener(
            s, self._on_verdict, self._on_undecodable, self._wants, self._on_foreign, self._on_rejected
        )
        try:
            await self._producer.start()
            await self._listener.start()
        except (KafkaError, OSError) as exc:
            await self.close()
            if s.require_broker:
                raise
            # the agent must not fail because loopwarden is down: every check fails open, counted
            log.warning("loopwarden broker unreachable, gate checks fail open: %r", exc)
            self.stats.start_errors += 1
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        """Stop listening, end every run's iterators, flush events (bounded by the request timeout)."""
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError("client closed"))
        self._waiters.clear()
        for key in list(self._runs):
            self.unregister(key)
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        producer, self._producer = self._producer, None
        if producer is not None:
            limit = self.settings.request_timeout_ms / 1000 + self.settings.close_timeout
            try:
                await asyncio.wait_for(producer.stop(), limit)
            except (TimeoutError, KafkaError):
                log.warning("event producer did not flush within %.1fs", limit)

    async def __aenter__(self) -> LoopClient:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def listening(self) -> bool:
        """True once the listener is positioned on every control partition."""
        return self._listener is not None and self._listener.ready.is_set()

    # -- runs ----------------------------------------------------------------------

    def run(
        self,
        agent_id: str,
        session_id: str | None = None,
        run_id: str | None = None,
        on_verdict: VerdictCallback | None = None,
    ) -> Run:
        """Register a run and return its handle (register before its first event)."""
        ref = wire.RunRef(agent_id=agent_id, session_id=session_id, run_id=run_id)
        self.register(ref.key, on_verdict)
        return Run(self, ref)

    def register(self, key: str, callback: VerdictCallback | None = None) -> RunState:
        """Deliver the verdicts of run key ``key`` here from now on."""
        entry = self._runs.get(key)
        if entry is None:
            entry = self._runs[key] = _Entry()
        if callback is not None:
            entry.callbacks.append(callback)
        return entry.state

    def unregister(self, key: str) -> None:
        entry = self._runs.pop(key, None)
        if entry is not None:
            for queue in entry.queues:
                queue.put_nowait(_CLOSED)

    def state(self, key: str) -> RunState | None:
        entry = self._runs.get(key)
        return entry.state if entry is not None else None

    def verdicts(self, key: str) -> VerdictStream:
        """Every verdict of a registered run from the moment of this call (not of the first
        ``anext``); the iteration ends when the run is unregistered."""
        entry = self._runs.get(key)
        queue: asyncio.Queue = asyncio.Queue()
        if entry is None:
            queue.put_nowait(_CLOSED)
        else:
            entry.queues.append(queue)
        return VerdictStream(queue)

    # -- publishing ----------------------------------------------------------------

    async def publish(self, event: Event) -> bool:
        """Hand one event to the producer (keyed by run key) without waiting for delivery.

        Returns False (and counts ``send_errors``) when it could not even be
        queued in time: the runner goes on either way.
        """
        producer = self._producer
        if producer is None:
            self.stats.send_errors += 1
            return False
        try:
            delivery = await asyncio.wait_for(
                producer.send(self.settings.events_topic, encode_event(event), key=run_key(event).encode()),
                self.settings.check_timeout,
            )
        except (TimeoutError, KafkaError) as exc:
            log.warning("event not published: %r", exc)
            self.stats.send_errors += 1
            return False
        self.stats.events_sent += 1
        delivery.add_done_callback(self._count_failed_delivery)
        return True

    def _count_failed_delivery(self, delivery: asyncio.Future) -> None:
        if not delivery.cancelled() and delivery.exception() is not None:
            self.stats.send_errors += 1

    async def tool_call(
        self, ref: wire.RunRef, tool_name: str, params: Any = None, *, tool_call_id: str | None = None
    ) -> ToolCall:
        """Publish a ``tool_call`` without waiting for a decision (its verdict, if any, updates run state)."""
        call = wire.tool_call(ref, tool_name, params, tool_call_id=tool_call_id, encode=self.encode)
        await self.publish(call)
        return call

    async def tool_result(self, call: ToolCall | Decision, *, result: Any = UNSET, error: Any = UNSET) -> ToolResult:
        """Publish the outcome of ``call`` (same run, tool, id and params).

        Given the gate's :class:`Decision`, also acknowledge the block or abort it
        answered: ``applied`` when ``result`` is the veto, else ``failed``.
        """
        decision = call if isinstance(call, Decision) else None
        if decision is not None:
            call = decision.call
        event = wire.result_for(call, result=result, error=error, encode=self.encode)
        await self.publish(event)
        if decision is not None and decision.action in ("block", "abort") and decision.verdict is not None:
            outcome, detail = (
                ("applied", "tool not run") if is_blocked_result(result) else ("failed", "the tool ran anyway")
            )
            await self._ack_once(decision.verdict, outcome, f"{decision.action}: {detail}")
            if decision.superseded is not None:
                await self.ack(decision.superseded, outcome, f"block (answered by the run's abort): {detail}")
        return event

    async def ack(self, verdict: Verdict, outcome: str = "applied", detail: str | None = None) -> bool:
        """Publish a ``verdict_ack`` for ``verdict`` (keyed by its run)."""
        ref = wire.RunRef(agent_id=verdict.agent_id, session_id=verdict.session_id, run_id=verdict.run_id)
        sent = await self.publish(wire.verdict_ack(ref, verdict.verdict_id, outcome, detail))
        if sent:
            self.stats.acks_sent += 1
        return sent

    async def _ack_once(self, verdict: Verdict, outcome: str, detail: str) -> None:
        """Ack; an abort (which answers every later check of its run) only the first time."""
        if verdict.action == "abort":
            state = self.state(wire.verdict_key(verdict))
            if state is not None:
                if state.abort_acked:
                    return
                state.abort_acked = True
        await self.ack(verdict, outcome, detail)

    async def compaction_retry(self, ref: wire.RunRef, reason: str | None = None) -> None:
        await self.publish(wire.compaction_retry(ref, reason))

    async def run_end(self, ref: wire.RunRef) -> None:
        await self.publish(wire.run_end(ref))

    # -- gate mode -------------------------------------------------------------------

    async def check(self, call: ToolCall, timeout: float | None = None) -> Decision:
        """Publish ``call`` with ``await_decision: true`` and wait for the worker's answer.

        Answers from the run's own state without publishing when the run is
        aborted, or when a block for an earlier (already executed) call is
        pending. Fails open (``allow``) on timeout or broker trouble.
        """
        stats = self.stats
        stats.checks += 1
        t0 = time.perf_counter()
        key = run_key(call)
        entry = self._runs.get(key)
        if entry is not None:
            if entry.state.aborted is not None:
                stats.aborted += 1
                return Decision(action="abort", source="aborted", call=call, verdict=entry.state.aborted)
            pending = entry.state.take_block()
            if pending is not None:
                stats.blocked += 1
                return Decision(action="block", source="pending_block", call=call, verdict=pending)
        if not call.await_decision or not call.tool_call_id:
            call = msgspec.structs.replace(
                call, await_decision=True, tool_call_id=call.tool_call_id or wire.new_call_id()
            )
        producer = self._producer
        if producer is None:
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="closed", call=call)
        waiter_key = (key, call.tool_call_id)
        fut = asyncio.get_running_loop().create_future()
        self._waiters[waiter_key] = fut
        self._waiting[key] = self._waiting.get(key, 0) + 1
        limit = self.settings.check_timeout if timeout is None else timeout
        try:
            async with asyncio.timeout(limit):
                delivery = await producer.send(self.settings.events_topic, encode_event(call), key=key.encode())
                stats.events_sent += 1
                delivery.add_done_callback(lambda d: self._delivery_into(d, fut))
                verdict: Verdict = await fut
                superseded = None
                if entry is not None and entry.state.aborted is not None and verdict.action != "abort":
                    # the run was aborted while this call waited; its own block still awaits an ack
                    superseded = verdict if verdict.action == "block" else None
                    verdict = entry.state.aborted
        except TimeoutError:
            stats.fail_open_timeout += 1
            stats.allowed += 1
            return Decision(action="allow", source="timeout", call=call, seconds=time.perf_counter() - t0)
        except (KafkaError, ConnectionError) as exc:
            log.warning("gate check failed open: %r", exc)
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="error", call=call, seconds=time.perf_counter() - t0)
        finally:
            if self._waiters.get(waiter_key) is fut:
                del self._waiters[waiter_key]
            left = self._waiting.get(key, 1) - 1
            if left > 0:
                self._waiting[key] = left
            else:
                self._waiting.pop(key, None)
        action = verdict.action
        if action == "block":
            stats.blocked += 1
        elif action == "warn":
            stats.warned += 1
        elif action == "abort":
            stats.aborted += 1
        else:
            stats.allowed += 1
        return Decision(
            action=action,
            source="verdict",
            call=call,
            verdict=verdict,
            seconds=time.perf_counter() - t0,
            superseded=superseded,
        )

    @staticmethod
    def _delivery_into(delivery: asyncio.Future, fut: asyncio.Future) -> None:
        if fut.done() or delivery.cancelled():
            return
        exc = delivery.exception()
        if exc is not None:
            fut.set_exception(exc)

    # -- verdict routing ----------------------------------------------------------------

    def _on_undecodable(self) -> None:
        self.stats.undecodable += 1

    def _wants(self, record_key: bytes) -> bool:
        """Whether a control record's key is a run of this client (the listener drops the rest undecoded)."""
        key = record_key.decode("utf-8", "replace")
        return key in self._runs or key in self._waiting

    def _on_foreign(self) -> None:
        self.stats.foreign_dropped += 1

    def _on_rejected(self) -> None:
        self.stats.signature_rejected += 1

    def _on_verdict(self, record_key: bytes | None, verdict: Verdict) -> None:
        stats = self.stats
        stats.verdicts_seen += 1
        key = wire.verdict_key(verdict, record_key)
        entry = self._runs.get(key)
        waiter = self._waiters.get((key, verdict.tool_call_id)) if verdict.tool_call_id else None
        if entry is None and waiter is None:
            stats.foreign_dropped += 1
            return
        if self._seen.seen(verdict.verdict_id):
            stats.duplicates_dropped += 1
            return
        if waiter is not None and not waiter.done():
            waiter.set_result(verdict)  # the gate acts on it; a block is not remembered as pending,
            if entry is not None and verdict.action == "abort":
                entry.state.apply(verdict)  # but an abort ends the run: every later check answers it
        elif entry is not None:
            entry.state.apply(verdict)
        if entry is None:
            return
        stats.verdicts_delivered += 1
        for callback in entry.callbacks:
            try:
                callback(verdict)
            except Exception:
                stats.callback_errors += 1
                log.exception("verdict callback failed")
        for queue in entry.queues:
            queue.put_nowait(verdict)
