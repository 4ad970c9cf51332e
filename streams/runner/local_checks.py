"""Checks decided in-process: the engine's verdicts, at once, published with the call.

:class:`LocalChecks` applies each event of a run to the runner's own per-run
state (:class:`~loopwarden.runner.local.LocalDecider`), marks the published
``tool_call`` with the decision, and answers the gate; the run's other events
(a result, a compaction retry, the run's end) are decided too, so its state
follows the worker's. A decision that raises allows the call and is counted
(``local_errors``): never stop a healthy agent. Under the ``openclaw-latest``
profile one assistant message's calls are admitted as a batch with bounded
recovery (RULES.md L9).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from loopwarden.runner import wire
from loopwarden.runner.local import ConfigSource, LocalDecider, mark, strongest
from loopwarden.runner.publishing import Publisher
from loopwarden.runner.registry import RunRegistry
from loopwarden.runner.state import ClientStats, Decision, DecisionAction
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import Event, ToolCall
from loopwarden.schemas.verdicts import Verdict

log = logging.getLogger(__name__)


class LocalChecks:
    """The engine in-process, over the client's registry and publisher."""

    def __init__(self, decider: LocalDecider, stats: ClientStats, registry: RunRegistry, publisher: Publisher) -> None:
        self.decider = decider
        self.stats = stats
        self.registry = registry
        self.publisher = publisher
        self.config_source: ConfigSource | None = None

    # -- the fleet's config --------------------------------------------------------

    def start_config(self) -> ConfigSource:
        """Read the config topic over the fallback config, live from now on."""
        source = self.config_source = ConfigSource(
            self.decider.fleet, self.publisher.settings, self._config_updated, self._config_rejected
        )
        source.start()
        return source

    async def stop_config(self) -> None:
        source, self.config_source = self.config_source, None
        if source is not None:
            await source.stop()

    def _config_rejected(self) -> None:
        self.stats.config_rejected += 1

    def _config_updated(self, fleet: FleetConfig) -> None:
        self.decider.fleet = fleet

    # -- deciding ------------------------------------------------------------------

    def decide(self, key: wire.Ident, event: Event) -> list[Verdict]:
        """The local decision for one event (fails open: an error is counted, nothing decided)."""
        try:
            verdicts = self.decider.apply(key, event)
        except Exception:  # noqa: BLE001 - never stop a healthy agent
            self.stats.local_errors += 1
            log.exception("local decision failed; the call is allowed")
            return []
        self.stats.local_decisions += 1
        return verdicts

    def publish(self, key: wire.Ident, event: Event) -> None:
        """Decide a run's non-call event (a result, compaction retry, run end), then queue it."""
        entry = self.registry.runs.get(key)
        for verdict in self.decide(key, event):
            self.registry.deliver(entry, verdict)
        self.publisher.put(event, key)

    def tool_call(self, key: wire.Ident, call: ToolCall) -> ToolCall:
        """Decide and queue a call nobody gates: its verdicts update the run's state."""
        verdicts = self.decide(key, call)
        call = self.mark(key, call, verdicts)
        entry = self.registry.runs.get(key)
        for verdict in verdicts:
            self.registry.deliver(entry, verdict)
        self.publisher.put(call, key)
        return call

    def mark(self, key: wire.Ident, call: ToolCall, verdicts: list[Verdict]) -> ToolCall:
        """The call as published: the decision it got, also remembered by the run."""
        best = strongest(verdicts)
        entry = self.registry.runs.get(key)
        if entry is not None and call.tool_call_id:
            entry.state.decided(call.tool_call_id, best.action if best is not None else "allow")
        return mark(call, best)

    def bounded_recovery(self, call: ToolCall) -> bool:
        """Whether ``call``'s run gets the release's batch admission: the ``openclaw-latest`` profile."""
        try:
            return self.decider.profiled(call)
        except Exception:  # noqa: BLE001 - never stop a healthy agent
            return False

    # -- checks --------------------------------------------------------------------

    def answered(
        self, action: DecisionAction, call: ToolCall, verdict: Verdict | None, t0: float, **extra: Any
    ) -> Decision:
        """A locally decided call's answer, counted."""
        self.stats.count(action)
        return Decision(
            action=action,
            source="local",
            call=call,
            verdict=verdict,
            seconds=time.perf_counter() - t0,
            **extra,
        )

    def check(self, key: wire.Ident, call: ToolCall, t0: float) -> Decision:
        if not call.tool_call_id:
            call = msgspec.structs.replace(call, tool_call_id=wire.new_call_id())
        verdicts = self.decide(key, call)
        call = self.mark(key, call, verdicts)
        self.publisher.put(call, key)
        entry = self.registry.runs.get(key)
        verdict = superseded = None
        for v in verdicts:
            if v.action == "abort":
                superseded = verdict if verdict is not None and verdict.action == "block" else None
                verdict = v
            elif verdict is None or (verdict.action == "warn" and v.action == "block"):
                verdict = v
            self.registry.deliver(entry, v, remember=False)  # the check answers this call: no pending block
        return self.answered(
            verdict.action if verdict is not None else "allow", call, verdict, t0, superseded=superseded
        )

    def check_batch(self, key: wire.Ident, calls: list[ToolCall], t0: float) -> list[Decision]:
        """One assistant message's calls admitted together (RULES.md L9), each counted."""
        stats = self.stats
        registry = self.registry
        entry = registry.runs.get(key)
        stats.checks += len(calls)
        calls = [c if c.tool_call_id else msgspec.structs.replace(c, tool_call_id=wire.new_call_id()) for c in calls]
        try:
            admission = self.decider.admit(key, calls)
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
                marked = self.mark(key, call, verdicts)
                self.publisher.put(marked, key)
                for v in verdicts:
                    registry.deliver(entry, v, remember=False)
                best = strongest(verdicts)
                out.append(self.answered(best.action if best is not None else "allow", marked, best, t0, release=True))
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
        marked = self.mark(key, calls[trigger], [critical])
        self.publisher.put(marked, key)
        for v in verdicts:
            registry.deliver(entry, v, remember=False)  # the batch answers them: no pending block
        if terminal and critical not in verdicts:
            registry.deliver(entry, critical)  # the run's abort: later checks answer it, adapters end the run
        action = "abort" if terminal else "block"
        out = []
        for i, call in enumerate(calls):
            if i == trigger:
                out.append(
                    self.answered(action, marked, critical, t0, release=True, recovery="trigger", terminal=terminal)
                )
            else:
                stats.count(action)
                out.append(
                    Decision(
                        action=action, source="batch", call=call, release=True, recovery="sibling", terminal=terminal
                    )
                )
        return out
