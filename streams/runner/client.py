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

:class:`LoopClient` is a facade over four collaborators, one concern each:
the run registry (:mod:`loopwarden.runner.registry`), publishing
(:mod:`loopwarden.runner.publishing`), local checks
(:mod:`loopwarden.runner.local_checks`), and worker checks with the routing
of control-topic verdicts (:mod:`loopwarden.runner.worker_checks`,
:mod:`loopwarden.runner.verdict_router`). It keeps the lifecycle, the acks
and the order of a check.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET

from loopwarden.internals import aiokafka_logs
from loopwarden.runner import wire
from loopwarden.runner.listener import VerdictListener
from loopwarden.runner.outbox import Outbox, wait_event
from loopwarden.runner.publishing import Publisher
from loopwarden.runner.registry import RunRegistry
from loopwarden.runner.results import is_blocked_result
from loopwarden.runner.routing import RunEntry, VerdictCallback, VerdictStream
from loopwarden.runner.run import Run
from loopwarden.runner.settings import ClientSettings
from loopwarden.runner.state import ClientStats, Decision, RecentIds, RunState
from loopwarden.runner.verdict_router import VerdictRouter, Waiters
from loopwarden.runner.worker_checks import WorkerChecks
from loopwarden.schemas.events import Event, ToolCall, ToolResult
from loopwarden.schemas.verdicts import Verdict

if TYPE_CHECKING:
    from loopwarden.runner.local_checks import LocalChecks
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
            settings = ClientSettings.from_env(**overrides)
        elif overrides:
            settings = msgspec.structs.replace(settings, **overrides)
        self.stats = stats = ClientStats()
        self.encode = wire.PayloadEncoder(self._count_fallback)
        mode = settings.decisions
        if config is None:
            config = settings.config
        local = mode == "local" or (mode == "auto" and config is not None)
        self.settings = settings = settings.for_mode(local=local)
        self._registry = registry = RunRegistry(stats)
        self._publisher = publisher = Publisher(settings, stats, registry)
        self._local_checks: LocalChecks | None = None
        if local:
            # imported only here: a client the worker decides for never loads the engine
            from loopwarden.runner.local import LocalDecider, fleet_config
            from loopwarden.runner.local_checks import LocalChecks

            decider = LocalDecider(fleet_config(config), settings.max_local_runs)
            self._local_checks = LocalChecks(decider, stats, registry, publisher)
        self._worker = WorkerChecks(publisher, stats, settings.check_timeout, lambda: self.listening)
        self._router = router = VerdictRouter(
            registry, stats, self._worker.waiters, self._worker.waiting, dedup_size=settings.dedup_size, local=local
        )
        self._on_verdict = router.on_verdict
        self._on_undecodable = router.on_undecodable
        self._wants = router.wants
        self._on_foreign = router.on_foreign
        self._on_rejected = router.on_rejected
        self._listener: VerdictListener | None = None
        self._quiet = False  # aiokafka's retry lines rate-limited while this client is open

    def _count_fallback(self) -> None:
        self.stats.encode_fallbacks += 1

    @property
    def local(self) -> bool:
        """Whether checks are decided in-process (else by the worker, one round trip each)."""
        return self._local_checks is not None

    @property
    def fleet(self) -> FleetConfig | None:
        """The config local decisions use now (fallback plus the config topic), None in worker mode."""
        return self._local_checks.decider.fleet if self._local_checks is not None else None

    # -- the collaborators' state, by the names tests and older callers use ------

    @property
    def _outbox(self) -> Outbox | None:
        return self._publisher.outbox

    @_outbox.setter
    def _outbox(self, outbox: Outbox | None) -> None:
        self._publisher.outbox = outbox

    @property
    def _put(self) -> Callable[[Event, wire.Ident], bool]:
        """The publisher's put, replaceable (a spy in tests): every event leaves through it."""
        return self._publisher.put

    @_put.setter
    def _put(self, put: Any) -> None:
        self._publisher.put = put

    @property
    def _local(self) -> Any:
        """The in-process decider (:class:`~loopwarden.runner.local.LocalDecider`), None in worker mode."""
        return self._local_checks.decider if self._local_checks is not None else None

    @property
    def _runs(self) -> dict[wire.Ident, RunEntry]:
        return self._registry.runs

    @property
    def _waiters(self) -> Waiters:
        return self._worker.waiters

    @property
    def _waiting(self) -> dict[str, int]:
        return self._worker.waiting

    @property
    def _seen(self) -> RecentIds:
        return self._router.seen

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> LoopClient:
        """Start connecting; returns once connected and listening, or at once if the broker is down.

        A broker that is down is not an error (unless ``require_broker``):
        the client connects by itself whenever it comes up, buffering events
        meanwhile (``max_buffered``), and checks answer without waiting.
        """
        s = self.settings
        router = self._router
        self._listener = VerdictListener(
            s, router.on_verdict, router.on_undecodable, router.wants, router.on_foreign, router.on_rejected
        )
        aiokafka_logs.quiet(s.outage_log_interval)
        self._quiet = True
        try:
            outbox = self._publisher.start(on_down=self._on_down)
            config_source = self._local_checks.start_config() if self._local_checks is not None else None
            connected = await outbox.first_attempt(s.request_timeout_ms / 1000 + 1)
            if not connected:
                self.stats.start_errors += 1
                if s.require_broker:
                    raise KafkaConnectionLost(f"loopwarden broker {s.bootstrap} unreachable")
            await self._listener.start()
            if connected and config_source is not None:
                # the config topic in full before the first decision, when the broker is there
                if not await wait_event(config_source.loaded, s.start_timeout):
                    log.warning("config topic %s not read within %.1fs", s.config_topic, s.start_timeout)
        except BaseException:
            await self.close()
            raise
        return self

    def _on_down(self) -> None:
        """The producer lost the broker: gates waiting for a verdict answer now (fail open)."""
        self._worker.fail_all("broker connection lost")

    async def close(self) -> None:
        """Stop listening, end every run's iterators, flush events (bounded by the request timeout)."""
        self._worker.fail_all("client closed")
        self._worker.waiters.clear()
        self._registry.close()
        if self._local_checks is not None:
            await self._local_checks.stop_config()
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        await self._publisher.close()
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
        return self._publisher.connected

    @property
    def buffered(self) -> int:
        """Events waiting for the broker (at most ``max_buffered``)."""
        return self._publisher.buffered

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
        return self._registry.register(key, callback)

    def unregister(self, key: wire.Ident) -> None:
        self._registry.unregister(key)

    def state(self, key: wire.Ident) -> RunState | None:
        return self._registry.state(key)

    def verdicts(self, key: wire.Ident) -> VerdictStream:
        """Every verdict of a registered run from the moment of this call (not of the first
        ``anext``); the iteration ends when the run is unregistered."""
        return self._registry.verdicts(key)

    # -- publishing ----------------------------------------------------------------

    async def publish(self, event: Event) -> bool:
        """Queue one event for the broker (keyed by run key); never waits for the broker.

        Returns False when it was not queued: the client is not started
        (counted ``send_errors``) or its buffer is full (``events_dropped``).
        The runner goes on either way.
        """
        return self._publisher.put(event, wire.ident(event))

    async def _publish_local(self, event: Event) -> None:
        """A run's non-call event (a result, compaction retry, run end): decided locally, then queued."""
        key = wire.ident(event)
        if self._local_checks is not None:
            self._local_checks.publish(key, event)
        else:
            self._publisher.put(event, key)

    async def tool_call(
        self, ref: wire.RunRef, tool_name: str, params: Any = None, *, tool_call_id: str | None = None
    ) -> ToolCall:
        """Publish a ``tool_call`` without waiting for a decision (its verdict, if any, updates run state:
        a block refuses the run's next call)."""
        call = wire.tool_call(ref, tool_name, params, tool_call_id=tool_call_id, encode=self.encode)
        if self._local_checks is None:
            await self.publish(call)
            return call
        return self._local_checks.tool_call(wire.ident(call), call)

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
        entry = self._registry.runs.get(key)
        if entry is not None:
            if entry.state.aborted is not None:
                stats.aborted += 1
                return Decision(action="abort", source="aborted", call=call, verdict=entry.state.aborted)
            pending = entry.state.take_block()
            if pending is not None:
                stats.blocked += 1
                return Decision(action="block", source="pending_block", call=call, verdict=pending)
        local = self._local_checks
        if local is not None:
            if local.bounded_recovery(call):
                stats.checks -= 1  # counted again by the batch
                return local.check_batch(key, [call], t0)[0]
            return local.check(key, call, t0)
        return await self._worker.check(key, entry, call, timeout, t0)

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
        local = self._local_checks
        if local is not None and local.bounded_recovery(calls[0]):
            key = wire.ident(calls[0])
            entry = self._registry.runs.get(key)
            if entry is None or (entry.state.aborted is None and entry.state.pending_block is None):
                return local.check_batch(key, calls, time.perf_counter())
        return [await self.check(call, timeout) for call in calls]

    def bounded_recovery(self, call: ToolCall) -> bool:
        """Whether ``call``'s run gets the release's batch admission (:meth:`check_batch`): the profile, local."""
        return self._local_checks is not None and self._local_checks.bounded_recovery(call)


class KafkaConnectionLost(ConnectionError):
    """``start()`` with ``require_broker``: the broker did not answer."""
