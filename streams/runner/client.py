"""The runner client: publish a run's events, decide or gate calls, act on the run's verdicts.

One :class:`LoopClient` per runner process: one outbox (events, keyed by run
key, :mod:`loopwarden.runner.outbox`) and one
:class:`~loopwarden.runner.listener.VerdictListener`; both connect by
themselves whenever the broker is up, before or after the client started.
A runner registers each run it drives (:meth:`LoopClient.run` returns a
:class:`Run` handle); verdicts of other runs are dropped, repeated
``verdict_id``\\ s too (bounded LRU).

Two ways to answer :meth:`LoopClient.check`:

- **local** (the default when the client has the fleet's config): the
  per-run rules are decided in-process (:mod:`loopwarden.runner.local`), at
  once; the published ``tool_call`` carries the decision, and the worker
  sends only what the runner could not know (fleet incidents, cross-run
  warnings, a correction where it is stricter), which the run's state
  applies to its next call;
- **worker**: the call is published with ``await_decision`` and the worker's
  verdict awaited (correlated by run key and ``tool_call_id``), for runners
  that do not embed the engine.

loopwarden must never stop a healthy agent: a check that gets no answer
within its timeout, or finds the broker away, allows the call and is
counted (:class:`~loopwarden.runner.state.ClientStats`); so does a local
decision that raised, and a payload value that cannot be JSON-encoded
(sent as its repr).

Acknowledgements: when the runner reports what it did with a gated call
(:meth:`LoopClient.tool_result` with the :class:`Decision`), the client sends
``verdict_ack`` by itself: ``applied`` for a block or abort answered with the
veto, ``failed`` when the tool ran anyway; :meth:`Run.end` acknowledges an
abort. A warning's delivery only the runner sees: :meth:`LoopClient.ack`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from msgspec import UNSET

from loopwarden.internals import aiokafka_logs
from loopwarden.kafka.connection import kafka_auth
from loopwarden.runner import wire
from loopwarden.runner.listener import VerdictListener
from loopwarden.runner.outbox import Outbox, wait_event
from loopwarden.runner.results import is_blocked_result
from loopwarden.runner.routing import CLOSED, RunEntry, VerdictCallback, VerdictStream
from loopwarden.runner.run import Run
from loopwarden.runner.settings import ClientSettings
from loopwarden.runner.state import ClientStats, Decision, DecisionAction, RecentIds, RunState, verdict_fits
from loopwarden.runner.text import verdict_text
from loopwarden.schemas.events import Event, ToolCall, ToolResult, encode_event
from loopwarden.schemas.verdicts import Verdict

if TYPE_CHECKING:
    from loopwarden.runner.local import ConfigSource, LocalDecider
    from loopwarden.schemas.config import FleetConfig

log = logging.getLogger(__name__)


class LoopClient:
    """Async client on aiokafka. Use ``async with LoopClient(bootstrap=...) as client:``.

    Settings: ``settings`` as given, else ``LOOPWARDEN_RUNNER_<FIELD>``
    environment variables (e.g. ``LOOPWARDEN_RUNNER_BOOTSTRAP``,
    ``LOOPWARDEN_RUNNER_CONFIG``, ``LOOPWARDEN_RUNNER_DECISIONS``) over the
    defaults; keyword arguments override both (streams/runner/RUNNER.md,
    "Settings"). ``config`` (a file path, an OpenClaw-shaped mapping or a
    :class:`~loopwarden.schemas.config.FleetConfig`) is the fleet's config for
    local decisions; with it (or ``LOOPWARDEN_RUNNER_CONFIG``) checks are
    decided in-process unless ``decisions="worker"``.
    """

    def __init__(
        self,
        settings: ClientSettings | None = None,
        *,
        config: FleetConfig | Mapping | str | os.PathLike | None = None,
        **overrides: Any,
    ) -> None:
        if settings is None:
            self.settings = ClientSettings.from_env(**overrides)
        else:
            self.settings = msgspec.structs.replace(settings, **overrides) if overrides else settings
        self.stats = ClientStats()
        self._runs: dict[wire.Ident, RunEntry] = {}  # by (run key, agent, session): the worker's state key
        self._keys: dict[str, int] = {}  # run key -> runs registered under it (the listener keeps their records)
        self._waiters: dict[tuple[wire.Ident, str], asyncio.Future] = {}
        self._waiting: dict[str, int] = {}  # run key -> gates waiting on it (the listener keeps their verdicts)
        self._seen = RecentIds(self.settings.dedup_size)
        self._outbox: Outbox | None = None
        self._listener: VerdictListener | None = None
        self.encode = wire.PayloadEncoder(self._count_fallback)
        self._local: LocalDecider | None = None
        self._config_source: ConfigSource | None = None
        self._quiet = False  # aiokafka's retry lines rate-limited while this client is open
        mode = self.settings.decisions
        if config is None:
            config = self.settings.config
        if mode == "local" or (mode == "auto" and config is not None):
            from loopwarden.runner.local import LocalDecider, fleet_config

            self._local = LocalDecider(fleet_config(config), self.settings.max_local_runs)
        self.settings = self.settings.for_mode(local=self._local is not None)

    def _count_fallback(self) -> None:
        self.stats.encode_fallbacks += 1

    @property
    def local(self) -> bool:
        """Whether checks are decided in-process (else by the worker, one round trip each)."""
        return self._local is not None

    @property
    def fleet(self) -> FleetConfig | None:
        """The config local decisions use now (fallback plus the config topic), None in worker mode."""
        return self._local.fleet if self._local is not None else None

    # -- lifecycle ---------------------------------------------------------------

    def _make_producer(self) -> AIOKafkaProducer:
        s = self.settings
        return AIOKafkaProducer(
            bootstrap_servers=s.servers,
            linger_ms=0,  # the outbox lingers (``linger_ms``) and hands a whole batch over in one step
            acks=1,
            enable_idempotence=False,
            request_timeout_ms=s.request_timeout_ms,
            max_request_size=max(1 << 20, s.max_event_bytes + 65536),  # the event, its key and the batch framing
            client_id=f"{s.client_id}-events",
            **kafka_auth(s),
        )

    def _on_sent(self) -> None:
        self.stats.events_sent += 1

    def _on_dropped(self) -> None:
        self.stats.events_dropped += 1

    def _on_failed(self) -> None:
        self.stats.send_errors += 1

    def _on_too_large(self) -> None:
        self.stats.events_too_large += 1

    def _on_refused(self) -> None:
        self.stats.events_refused += 1

    def _on_down(self) -> None:
        """The producer lost the broker: gates waiting for a verdict answer now (fail open)."""
        self.stats.disconnects += 1
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError("broker connection lost"))

    async def start(self) -> LoopClient:
        """Start connecting; returns once connected and listening, or at once if the broker is down.

        A broker that is down is not an error (unless ``require_broker``):
        the client connects by itself whenever it comes up, buffering events
        meanwhile (``max_buffered``), and checks answer without waiting.
        """
        s = self.settings
        self._outbox = Outbox(
            self._make_producer,
            s.max_buffered,
            send_timeout=s.request_timeout_ms / 1000,
            close_timeout=s.close_timeout,
            backoff_max=s.reconnect_backoff_max,
            log_interval=s.outage_log_interval,
            max_buffered_bytes=s.max_buffered_bytes,
            max_event_bytes=s.max_event_bytes,
            linger=(s.linger_ms or 0) / 1000,
            on_sent=self._on_sent,
            on_dropped=self._on_dropped,
            on_failed=self._on_failed,
            on_down=self._on_down,
            on_too_large=self._on_too_large,
            on_refused=self._on_refused,
        )
        self._listener = VerdictListener(
            s, self._on_verdict, self._on_undecodable, self._wants, self._on_foreign, self._on_rejected
        )
        aiokafka_logs.quiet(s.outage_log_interval)
        self._quiet = True
        try:
            self._outbox.start()
            if self._local is not None:
                from loopwarden.runner.local import ConfigSource

                self._config_source = ConfigSource(self._local.fleet, s, self._config_updated, self._on_config_rejected)
                self._config_source.start()
            connected = await self._outbox.first_attempt(s.request_timeout_ms / 1000 + 1)
            if not connected:
                self.stats.start_errors += 1
                if s.require_broker:
                    raise KafkaConnectionLost(f"loopwarden broker {s.bootstrap} unreachable")
            await self._listener.start()
            if connected and self._config_source is not None:
                # the config topic in full before the first decision, when the broker is there
                if not await wait_event(self._config_source.loaded, s.start_timeout):
                    log.warning("config topic %s not read within %.1fs", s.config_topic, s.start_timeout)
        except BaseException:
            await self.close()
            raise
        return self

    def _on_config_rejected(self) -> None:
        self.stats.config_rejected += 1

    def _config_updated(self, fleet: FleetConfig) -> None:
        if self._local is not None:
            self._local.fleet = fleet

    async def close(self) -> None:
        """Stop listening, end every run's iterators, flush events (bounded by the request timeout)."""
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionError("client closed"))
        self._waiters.clear()
        for key in list(self._runs):
            self.unregister(key)
        if self._config_source is not None:
            await self._config_source.stop()
            self._config_source = None
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            limit = self.settings.request_timeout_ms / 1000 + self.settings.close_timeout
            left = await outbox.close(limit)
            if left:
                log.warning("%d loopwarden events not delivered at close", left)
        if self._quiet:
            self._quiet = False
            aiokafka_logs.unquiet()

    async def __aenter__(self) -> LoopClient:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def listening(self) -> bool:
        """True once the listener is positioned on every control partition."""
        return self._listener is not None and self._listener.ready.is_set()

    @property
    def connected(self) -> bool:
        """True while the event producer is connected to the broker."""
        return self._outbox is not None and self._outbox.connected.is_set()

    @property
    def buffered(self) -> int:
        """Events waiting for the broker (at most ``max_buffered``)."""
        return len(self._outbox) if self._outbox is not None else 0

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
        self.register(ref.ident, on_verdict)
        return Run(self, ref)

    def register(self, key: wire.Ident, callback: VerdictCallback | None = None) -> RunState:
        """Deliver the verdicts of the run ``key`` (:attr:`wire.RunRef.ident`) here from now on."""
        entry = self._runs.get(key)
        if entry is None:
            entry = self._runs[key] = RunEntry()
            self._keys[key[0]] = self._keys.get(key[0], 0) + 1
        if callback is not None:
            entry.callbacks.append(callback)
        return entry.state

    def unregister(self, key: wire.Ident) -> None:
        entry = self._runs.pop(key, None)
        if entry is not None:
            left = self._keys.get(key[0], 1) - 1
            if left > 0:
                self._keys[key[0]] = left
            else:
                self._keys.pop(key[0], None)
            for queue in entry.queues:
                queue.put_nowait(CLOSED)

    def state(self, key: wire.Ident) -> RunState | None:
        entry = self._runs.get(key)
        return entry.state if entry is not None else None

    def verdicts(self, key: wire.Ident) -> VerdictStream:
        """Every verdict of a registered run from the moment of this call (not of the first
        ``anext``); the iteration ends when the run is unregistered."""
        entry = self._runs.get(key)
        queue: asyncio.Queue = asyncio.Queue()
        if entry is None:
            queue.put_nowait(CLOSED)
        else:
            entry.queues.append(queue)
        return VerdictStream(queue)

    # -- publishing ----------------------------------------------------------------

    async def publish(self, event: Event) -> bool:
        """Queue one event for the broker (keyed by run key); never waits for the broker.

        Returns False when it was not queued: the client is not started
        (counted ``send_errors``) or its buffer is full (``events_dropped``).
        The runner goes on either way.
        """
        return self._put(event, wire.ident(event))

    def _put(self, event: Event, key: wire.Ident) -> bool:
        call_id = getattr(event, "tool_call_id", None)
        if call_id:
            entry = self._runs.get(key)
            if entry is not None:  # a verdict must name one of the run's own calls (RunState.owns)
                entry.state.made(call_id, event.tool_name)
        outbox = self._outbox
        if outbox is None:
            self.stats.send_errors += 1
            return False
        return outbox.put(self.settings.events_topic, key[0].encode(), encode_event(event))

    def _decide(self, key: wire.Ident, event: Event) -> list[Verdict]:
        """The local decision for one event (fails open: an error is counted, nothing decided)."""
        local = self._local
        assert local is not None
        try:
            verdicts = local.apply(key, event)
        except Exception:  # noqa: BLE001 - never stop a healthy agent
            self.stats.local_errors += 1
            log.exception("local decision failed; the call is allowed")
            return []
        self.stats.local_decisions += 1
        return verdicts

    def _deliver(self, entry: RunEntry | None, verdict: Verdict, *, remember: bool = True) -> None:
        """Hand a verdict to the run: its state (unless a gate answered it), callbacks and iterators."""
        if entry is None:
            return
        if remember or verdict.action == "abort":
            entry.state.apply(verdict)
        self.stats.verdicts_delivered += 1
        for callback in entry.callbacks:
            try:
                callback(verdict)
            except Exception:  # noqa: BLE001
                self.stats.callback_errors += 1
                log.exception("verdict callback failed")
        for queue in entry.queues:
            queue.put_nowait(verdict)

    async def _publish_local(self, event: Event) -> None:
        """Decide a run's non-call event locally (a result, compaction retry, run end), then queue it."""
        key = wire.ident(event)
        if self._local is not None:
            entry = self._runs.get(key)
            for verdict in self._decide(key, event):
                self._deliver(entry, verdict)
        self._put(event, key)

    async def tool_call(
        self, ref: wire.RunRef, tool_name: str, params: Any = None, *, tool_call_id: str | None = None
    ) -> ToolCall:
        """Publish a ``tool_call`` without waiting for a decision (its verdict, if any, updates run state:
        a block refuses the run's next call)."""
        call = wire.tool_call(ref, tool_name, params, tool_call_id=tool_call_id, encode=self.encode)
        if self._local is None:
            await self.publish(call)
            return call
        key = wire.ident(call)
        verdicts = self._decide(key, call)
        call = self._mark(key, call, verdicts)
        entry = self._runs.get(key)
        for verdict in verdicts:
            self._deliver(entry, verdict)
        self._put(call, key)
        return call

    def _mark(self, key: wire.Ident, call: ToolCall, verdicts: list[Verdict]) -> ToolCall:
        from loopwarden.runner.local import mark, strongest

        best = strongest(verdicts)
        entry = self._runs.get(key)
        if entry is not None and call.tool_call_id:
            entry.state.decided(call.tool_call_id, best.action if best is not None else "allow")
        return mark(call, best)

    async def tool_result(self, call: ToolCall | Decision, *, result: Any = UNSET, error: Any = UNSET) -> ToolResult:
        """Publish the outcome of ``call`` (same run, tool, id and params).

        Given the gate's :class:`Decision`, also acknowledge the block or abort it
        answered: ``applied`` when ``result`` is the veto, else ``failed``.
        """
        decision = call if isinstance(call, Decision) else None
        if decision is not None:
            call = decision.call
        event = wire.result_for(call, result=result, error=error, encode=self.encode)
        if decision is not None and decision.source == "batch":
            return event  # refused with its batch before it was a call of the run: nothing to publish
        await self._publish_local(event)
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
            state = self.state(wire.ident(verdict))
            if state is not None:
                if state.abort_acked:
                    return
                state.abort_acked = True
        await self.ack(verdict, outcome, detail)

    async def compaction_retry(self, ref: wire.RunRef, reason: str | None = None) -> None:
        await self._publish_local(wire.compaction_retry(ref, reason))

    async def run_end(self, ref: wire.RunRef) -> None:
        await self._publish_local(wire.run_end(ref))

    # -- checks ----------------------------------------------------------------------

    async def check(self, call: ToolCall, timeout: float | None = None) -> Decision:
        """Decide whether ``call`` may run.

        Answers from the run's own state without deciding when the run is
        aborted, or when a block for an earlier (already executed) call is
        pending (a worker's correction, too). Then, in local mode, decides
        in-process at once and publishes the call with the decision; in
        worker mode, publishes it with ``await_decision: true`` and waits for
        the worker's answer, failing open (``allow``) on timeout or when the
        broker is away (at once, then: nothing waits for a dead broker).
        """
        stats = self.stats
        stats.checks += 1
        t0 = time.perf_counter()
        key = wire.ident(call)
        entry = self._runs.get(key)
        if entry is not None:
            if entry.state.aborted is not None:
                stats.aborted += 1
                return Decision(action="abort", source="aborted", call=call, verdict=entry.state.aborted)
            pending = entry.state.take_block()
            if pending is not None:
                stats.blocked += 1
                return Decision(action="block", source="pending_block", call=call, verdict=pending)
        if self._local is not None:
            if self.bounded_recovery(call):
                stats.checks -= 1  # counted again by the batch
                return self._check_batch_local(key, entry, [call], t0)[0]
            return self._check_local(key, entry, call, t0)
        return await self._check_worker(key, entry, call, timeout, t0)

    async def check_batch(self, calls: list[ToolCall], timeout: float | None = None) -> list[Decision]:
        """Decide one assistant message's tool calls (all of one run) before any of them runs.

        Under the ``openclaw-latest`` profile, in local mode, this is the OpenClaw release's batch
        admission with bounded recovery (RULES.md L9): siblings admitted earlier count as loop vetoes
        for later ones; the run's first critical refuses the whole batch (the trigger's result says
        not to repeat the action, its siblings' that they did not run); a second critical in the same
        run refuses it and aborts the run. Otherwise each call is checked as :meth:`check` does.
        """
        if not calls:
            return []
        if self._local is not None and self.bounded_recovery(calls[0]):
            key = wire.ident(calls[0])
            entry = self._runs.get(key)
            if entry is None or (entry.state.aborted is None and entry.state.pending_block is None):
                return self._check_batch_local(key, entry, calls, time.perf_counter())
        return [await self.check(call, timeout) for call in calls]

    def bounded_recovery(self, call: ToolCall) -> bool:
        """Whether ``call``'s run gets the release's batch admission (:meth:`check_batch`): the profile, local."""
        local = self._local
        try:
            return local is not None and local.profiled(call)
        except Exception:  # noqa: BLE001 - never stop a healthy agent
            return False

    def _check_batch_local(
        self, key: wire.Ident, entry: RunEntry | None, calls: list[ToolCall], t0: float
    ) -> list[Decision]:
        from loopwarden.runner.local import strongest

        local = self._local
        assert local is not None
        stats = self.stats
        stats.checks += len(calls)
        calls = [c if c.tool_call_id else msgspec.structs.replace(c, tool_call_id=wire.new_call_id()) for c in calls]
        try:
            admission = local.admit(key, calls)
        except Exception:  # noqa: BLE001 - never stop a healthy agent
            stats.local_errors += 1
            stats.allowed += len(calls)
            log.exception("local batch admission failed; the calls are allowed")
            return [Decision(action="allow", source="error", call=c, release=True) for c in calls]
        stats.local_decisions += len(admission.verdicts)
        trigger = admission.trigger
        if trigger is None:
            out = []
            for call, verdicts in zip(calls, admission.verdicts, strict=True):
                marked = self._mark(key, call, verdicts)
                self._put(marked, key)
                for v in verdicts:
                    self._deliver(entry, v, remember=False)
                best = strongest(verdicts)
                out.append(self._answered(best.action if best is not None else "allow", marked, best, t0, release=True))
            return out
        verdicts = admission.verdicts[trigger]
        critical = strongest(verdicts)
        assert critical is not None
        state = entry.state if entry is not None else None
        terminal = critical.action == "abort" or (state is not None and state.recovered)
        if terminal and critical.action != "abort":
            critical = msgspec.structs.replace(critical, action="abort")
        if state is not None:
            state.recovered = True
        marked = self._mark(key, calls[trigger], [critical])
        self._put(marked, key)
        for v in verdicts:
            self._deliver(entry, v, remember=False)  # the batch answers them: no pending block
        if terminal and critical not in verdicts:
            self._deliver(entry, critical)  # the run's abort: later checks answer it, adapters end the run
        action = "abort" if terminal else "block"
        out = []
        for i, call in enumerate(calls):
            if i == trigger:
                out.append(
                    self._answered(action, marked, critical, t0, release=True, recovery="trigger", terminal=terminal)
                )
            else:
                self._count(action)
                out.append(
                    Decision(
                        action=action, source="batch", call=call, release=True, recovery="sibling", terminal=terminal
                    )
                )
        return out

    def _answered(
        self, action: DecisionAction, call: ToolCall, verdict: Verdict | None, t0: float, **extra: Any
    ) -> Decision:
        """A locally decided call's answer, counted."""
        self._count(action)
        return Decision(
            action=action,
            source="local",
            call=call,
            verdict=verdict,
            seconds=time.perf_counter() - t0,
            **extra,
        )

    def _check_local(self, key: wire.Ident, entry: RunEntry | None, call: ToolCall, t0: float) -> Decision:
        if not call.tool_call_id:
            call = msgspec.structs.replace(call, tool_call_id=wire.new_call_id())
        verdicts = self._decide(key, call)
        call = self._mark(key, call, verdicts)
        self._put(call, key)
        verdict = superseded = None
        for v in verdicts:
            if v.action == "abort":
                superseded = verdict if verdict is not None and verdict.action == "block" else None
                verdict = v
            elif verdict is None or (verdict.action == "warn" and v.action == "block"):
                verdict = v
            self._deliver(entry, v, remember=False)  # the check answers this call: no pending block
        return self._answered(
            verdict.action if verdict is not None else "allow", call, verdict, t0, superseded=superseded
        )

    def _count(self, action: str) -> None:
        stats = self.stats
        if action == "block":
            stats.blocked += 1
        elif action == "warn":
            stats.warned += 1
        elif action == "abort":
            stats.aborted += 1
        else:
            stats.allowed += 1

    async def _check_worker(
        self, key: wire.Ident, entry: RunEntry | None, call: ToolCall, timeout: float | None, t0: float
    ) -> Decision:
        stats = self.stats
        if not call.await_decision or not call.tool_call_id:
            call = msgspec.structs.replace(
                call, await_decision=True, tool_call_id=call.tool_call_id or wire.new_call_id()
            )
        outbox = self._outbox
        if outbox is None:
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="closed", call=call)
        if not outbox.connected.is_set() or not self.listening:
            self._put(call, key)  # the worker still sees it when the broker is back
            stats.fail_open_error += 1
            stats.allowed += 1
            return Decision(action="allow", source="offline", call=call)
        waiter_key = (key, call.tool_call_id)
        fut = asyncio.get_running_loop().create_future()
        self._waiters[waiter_key] = fut
        self._waiting[key[0]] = self._waiting.get(key[0], 0) + 1
        limit = self.settings.check_timeout if timeout is None else timeout
        superseded = None
        try:
            async with asyncio.timeout(limit):
                if not self._put(call, key):
                    raise ConnectionError("event buffer full")
                verdict: Verdict = self._as_seen(await fut, call.tool_name)
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
            if self._waiters.get(waiter_key) is fut:
                del self._waiters[waiter_key]
            left = self._waiting.get(key[0], 1) - 1
            if left > 0:
                self._waiting[key[0]] = left
            else:
                self._waiting.pop(key[0], None)
        self._count(verdict.action)
        return Decision(
            action=verdict.action,
            source="verdict",
            call=call,
            verdict=verdict,
            seconds=time.perf_counter() - t0,
            superseded=superseded,
        )

    # -- verdict routing ----------------------------------------------------------------

    def _on_undecodable(self) -> None:
        self.stats.undecodable += 1

    def _wants(self, record_key: bytes) -> bool:
        """Whether a control record's key is a run of this client (the listener drops the rest undecoded)."""
        key = record_key.decode("utf-8", "replace")
        return key in self._keys or key in self._waiting

    def _on_foreign(self) -> None:
        self.stats.foreign_dropped += 1

    def _on_rejected(self) -> None:
        self.stats.signature_rejected += 1

    def _on_verdict(self, record_key: bytes | None, verdict: Verdict) -> None:
        stats = self.stats
        stats.verdicts_seen += 1
        if not verdict_fits(verdict):
            stats.undecodable += 1  # identifiers no worker writes: megabytes each, kept by the thousand
            return
        key = wire.ident(verdict, record_key)
        entry = self._runs.get(key)
        waiter = self._waiters.get((key, verdict.tool_call_id)) if verdict.tool_call_id else None
        if entry is None and waiter is None:
            stats.foreign_dropped += 1
            return
        if waiter is None and not entry.state.owns(verdict):
            stats.verdicts_stale += 1  # an earlier run's verdict (same session key), or a call never made
            return
        if self._seen.seen(verdict.verdict_id):
            stats.duplicates_dropped += 1
            return
        # What the runner hands on (gates, callbacks, iterators, run.aborted) says what the model would
        # read: text from the verdict's fields, never the record's own message, and the tool named as this
        # run called it, never as the record says (loopwarden.runner.text).
        own = entry.state.tool_of(verdict.tool_call_id) or entry.state.last_tool if entry is not None else None
        verdict = self._as_seen(verdict, own)
        if waiter is not None and not waiter.done():
            waiter.set_result(verdict)  # the gate acts on it; a block is not remembered as pending,
            self._deliver(entry, verdict, remember=False)  # but an abort ends the run
            return
        if entry is not None and self._local is not None and entry.state.covers(verdict):
            stats.verdicts_agreed += 1  # the worker said what this runner already decided and acted on
            return
        if entry is not None and self._local is not None:
            stats.corrections += 1  # stricter than the runner's own decision: applied to the next call
        self._deliver(entry, verdict)

    @staticmethod
    def _as_seen(verdict: Verdict, own_tool: str | None) -> Verdict:
        """A worker's verdict as the runner hands it on: the run's own tool name, text built from fields."""
        return msgspec.structs.replace(verdict, tool_name=own_tool, message=verdict_text(verdict, own_tool or ""))


class KafkaConnectionLost(ConnectionError):
    """``start()`` with ``require_broker``: the broker did not answer."""
