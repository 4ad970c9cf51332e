"""Local decisions: the per-run rules decided in the runner's process, as the worker decides them.

A runner that embeds the engine does not wait for a Kafka round trip per
tool call: :func:`decide` applies one event of one run with the worker's own
per-event decision (:func:`~loopwarden.detection.decision.decide_event`) on the
runner's own per-run state,
and returns the verdicts the worker would publish. :class:`LocalDecider`
keeps those states (bounded, least recently used dropped) and numbers its
verdicts ``runner:<instance>:<n>``. :class:`ConfigSource` gives it the
fleet's config: a fallback (file or mapping) with the compacted config
topic's records on top, read in full at start and then live, reconnecting
by itself (the worker's :class:`~loopwarden.kafka.configfeed.ConfigFeed`,
which needs no Faust); with ``config_keys`` it applies only records an
operator signed, as the workers do.

What a runner cannot see (other runs, fleet incidents) stays with the
worker, which audits the runner's decisions (schemas/WIRE.md, "Runner
decisions").
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.detection import RunState as EngineState
from loopwarden.detection.decision import decide_event
from loopwarden.detection.engine import as_sibling_veto, commit_batch, open_batch, refuse_batch
from loopwarden.detection.published import verdict_for
from loopwarden.detection.state import decode_state, encode_state
from loopwarden.internals.aiokafka_records import install as install_parse_guard
from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.kafka.connection import kafka_auth
from loopwarden.kafka.signing import verifier_from
from loopwarden.runner.outbox import Outage, stop_task
from loopwarden.runner.settings import ClientSettings
from loopwarden.runner.tables import LiveLRU
from loopwarden.schemas.config import ConfigError, FleetConfig
from loopwarden.schemas.config_check import load_checked
from loopwarden.schemas.events import Event, RunnerDecision, ToolCall
from loopwarden.schemas.verdicts import Verdict

log = logging.getLogger(__name__)

ACTION_RANK = {"allow": 0, "warn": 1, "block": 2, "abort": 3}


class Decided(msgspec.Struct, kw_only=True):
    """What one event did to a run: its new engine state (None: the run ended) and the verdicts to act on."""

    state: EngineState | None
    verdicts: list[Verdict]
    duplicate: bool = False


def decide(
    state: EngineState | None, event: Event, fleet: FleetConfig, name_event: Callable[[Any], str], now: float
) -> Decided:
    """The runner's decision for one event: the worker's own :func:`~loopwarden.detection.decision.decide_event`.

    The enforced verdicts in the order the worker publishes them: the emitted,
    not shadowed detections, then any escalation abort. Their ids are
    ``name_event(None)`` (called only when a verdict needs an id) plus the ordinal.
    """
    d = decide_event(state, event, fleet.resolve(event.agent_id), fleet.extensions_of(event), now, None, name_event)
    if d.duplicate:
        return Decided(state=d.state, verdicts=[], duplicate=True)
    enforced = [v for v in d.verdicts if v.enforced]
    enforced.extend(d.escalations)
    return Decided(state=d.state, verdicts=[verdict_for(v.detection, event, d.verdict_id(v.n), now) for v in enforced])


def strongest(verdicts: list[Verdict]) -> Verdict | None:
    """The verdict a call is answered with: abort over block over warn."""
    best = None
    for verdict in verdicts:
        if best is None or ACTION_RANK[verdict.action] > ACTION_RANK[best.action]:
            best = verdict
    return best


def runner_decision(verdict: Verdict | None) -> RunnerDecision:
    """The ``decision`` field a locally decided ``tool_call`` carries."""
    if verdict is None:
        return RunnerDecision(action="allow")
    return RunnerDecision(
        action=verdict.action, verdict_id=verdict.verdict_id, detector=verdict.detector, count=verdict.count
    )


class Admission(msgspec.Struct, kw_only=True):
    """A batch's admission: each call's verdicts up to the trigger, and the trigger's index (None: admitted)."""

    verdicts: list[list[Verdict]]
    trigger: int | None = None


class LocalDecider:
    """Per-run engine states of one runner and its verdict numbering.

    States are keyed as the worker keys them (agent, session, run: :func:`wire.ident`) and bounded
    by :class:`LiveLRU`: a run that had a warning, block or abort is evicted only after every run
    that had none (or when the live runs pass their half of ``max_runs``), and its ``run_end`` keeps
    its state: a run that resumes continues from its own history (RULES.md §11.3), so ending a
    blocked run does not lift its block. A new run (another run id) starts from zero, as in OpenClaw.
    """

    def __init__(self, fleet: FleetConfig, max_runs: int = 10000) -> None:
        self.fleet = fleet
        self.max_runs = max(1, max_runs)
        self.evicted = 0
        self._states: LiveLRU[Hashable, EngineState] = LiveLRU(self.max_runs)
        self._prefix = f"runner:{uuid.uuid4().hex[:12]}"
        self._seq = itertools.count()

    def _name_event(self, _origin: Any) -> str:
        """The verdict-id prefix of one event's verdicts: ``runner:<instance>:<event number>``."""
        return f"{self._prefix}:{next(self._seq)}"

    def apply(self, key: Hashable, event: Event, now: float | None = None) -> list[Verdict]:
        states = self._states
        state = states.get(key)
        decided = decide(state, event, self.fleet, self._name_event, time.time() if now is None else now)
        if decided.state is None:
            if not states.is_live(key):  # a live run's state outlives its run_end (resumed: still blocked)
                states.pop(key)
        elif state is None:
            self.evicted += len(states.put(key, decided.state))
        if decided.verdicts:
            self.evicted += len(states.mark_live(key))
        return decided.verdicts

    def live(self, key: Hashable) -> bool:
        """Whether the run had a warning, block or abort (its state is the last to go)."""
        return self._states.is_live(key)

    def profiled(self, event: Event) -> bool:
        """Whether the run's agent is under the ``openclaw-latest`` profile (bounded recovery applies)."""
        return bool(self.fleet.extensions_of(event).profile)

    def admit(self, key: Hashable, calls: list[ToolCall], now: float | None = None) -> Admission:
        """Admit one assistant tool batch as the OpenClaw release does (RULES.md L9), before any call runs.

        Each call is decided on a projection of the run where the siblings admitted before it count
        as loop vetoes. Without a critical, the run keeps the projection with those siblings as the
        pending calls they are, and each call's verdicts stand. The first critical stops the walk:
        the run keeps its history as it was plus a veto for every call with the trigger's tool and
        signature (nothing for the others), with the projection's warning buckets; the verdicts of
        the calls before the trigger are dropped (they do not run).
        """
        states = self._states
        state = states.get(key)
        when = time.time() if now is None else now
        proj = decode_state(encode_state(state)) if state is not None else EngineState()
        open_batch(proj, len(calls))
        verdicts: list[list[Verdict]] = []
        trigger = None
        for i, call in enumerate(calls):
            decided = decide(proj, call, self.fleet, self._name_event, when)
            proj = decided.state
            verdicts.append(decided.verdicts)
            if any(v.action in ("block", "abort") for v in decided.verdicts):
                trigger = i
                break
            if proj is not None:
                as_sibling_veto(proj, call)
        if proj is None:  # a run_end cannot be in a batch; nothing to keep
            return Admission(verdicts=verdicts, trigger=trigger)
        if trigger is None:
            commit_batch(proj, [c.tool_call_id for c in calls if c.tool_call_id])
        else:
            base = state if state is not None else EngineState()
            proj.history, proj.extras = base.history, base.extras
            proj.blocked, proj.blocked_without_id = list(base.blocked), base.blocked_without_id
            refuse_batch(proj, calls, calls[trigger], self.fleet.extensions_of(calls[trigger]))
        self.evicted += len(states.put(key, proj))
        if any(verdicts):
            self.evicted += len(states.mark_live(key))
        return Admission(verdicts=verdicts, trigger=trigger)

    def forget(self, key: Hashable) -> None:
        self._states.pop(key)

    def __len__(self) -> int:
        return len(self._states)


def fleet_config(config: FleetConfig | Mapping | str | Path | None) -> FleetConfig:
    """A fallback config: a FleetConfig, an OpenClaw-shaped document, or a file path."""
    if config is None:
        return FleetConfig()
    if isinstance(config, FleetConfig):
        return config
    if isinstance(config, Mapping):
        return FleetConfig.from_document(dict(config))
    said: list[str] = []  # a file: its typos and unreachable thresholds are logged, as the commands print them
    fleet = load_checked(config, said.append)
    if fleet is None:
        raise ConfigError("; ".join(said))
    for text in said:
        log.warning("loopwarden config %s: %s", config, text)
    return fleet


class ConfigSource:
    """The fallback config with the config topic's records on top, kept live; reconnects by itself."""

    def __init__(
        self,
        base: FleetConfig,
        settings: ClientSettings,
        on_update: Callable[[FleetConfig], Any],
        on_rejected: Callable[[], Any] | None = None,
    ) -> None:
        self.base = base
        self.settings = settings
        self._on_update = on_update
        install_parse_guard()  # the feed's consumer: a record aiokafka cannot parse is a mark, skipped
        self.feed = ConfigFeed(
            base,
            ",".join(settings.servers),
            settings.config_topic,
            on_update=self._updated,
            client_kwargs=kafka_auth(settings),
            # as the workers': with config keys, a record no operator signed changes no decision
            verifier=verifier_from(settings.config_keys, settings.config_keys_file),
            on_rejected=on_rejected,
        )
        self.outage = Outage("config feed", settings.outage_log_interval)
        self._task: asyncio.Task | None = None
        self._closing = False

    @property
    def loaded(self) -> asyncio.Event:
        return self.feed.loaded

    def _updated(self) -> None:
        self._on_update(self.feed.fleet)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="loopwarden-config")

    async def _run(self) -> None:
        backoff = 0.1
        while not self._closing:
            try:
                await self.feed.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - broker down: the last config stays in force
                self.outage.failed(exc)
            await asyncio.sleep(backoff)
            backoff = min(self.settings.reconnect_backoff_max, backoff * 2)

    async def stop(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task, self.settings.close_timeout)


def mark(call: ToolCall, verdict: Verdict | None) -> ToolCall:
    """``call`` carrying the runner's decision (and not asking the worker for one)."""
    return msgspec.structs.replace(call, decision=runner_decision(verdict), await_decision=False)
