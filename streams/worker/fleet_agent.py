"""Worker wiring of the fleet extensions (loopwarden.fleet): repartition topics, agents, tables, board.

Runs are partitioned by run key, but an incident gathers runs of many
partitions, and a session's runs may sit on several. So the run side (the
batch path) sends each :class:`JoinSignal` to ``<app id>-fleet-signatures``
keyed by signature, and each :class:`FinishedRun` to
``<app id>-fleet-sessions`` keyed by session key. Two Faust agents read those
topics, each with its own changelogged table (signature -> incident state,
session -> newest fingerprints), so a signature's runs may be spread over
every worker while its incident lives in exactly one partition: it opens once.

Crash safety is the run table's: a signal is delivered before the run state
that remembers it is written, and an incident record is delivered before the
signature state that produced it; a replay re-applies signals, which the
state machine ignores for runs it already counts, and a re-published record
carries the same ``incident_id``.

Every worker also reads the whole incidents topic into an
:class:`IncidentBoard`, the run side's view of open incidents used by the
fleet response (``incidents.block``).

Event time: a signature partition's clock is the newest signal ``ts`` it
has seen; while no signal arrives it moves on with the wall clock, so a
quiet fleet still resolves its incidents.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import faust
import msgspec

from loopwarden.detection.decision import EventDecision
from loopwarden.detection.incident_block import IncidentBoard
from loopwarden.detection.state import RunState
from loopwarden.fleet import crossrun, incidents
from loopwarden.fleet.joins import run_signals
from loopwarden.kafka.signing import Verifier
from loopwarden.schemas.config import GLOBAL_KEY, FleetConfig
from loopwarden.schemas.events import Event, RunEnd, ToolResult, key_for
from loopwarden.schemas.fleet import (
    FinishedRun,
    Incident,
    JoinSignal,
    decode_incident,
    decode_signal,
    encode,
    signal_key,
)
from loopwarden.schemas.verdicts import Verdict
from loopwarden.worker.batch import Outgoing
from loopwarden.worker.committer import Publisher
from loopwarden.worker.metrics import MAX_FINGERPRINT_SERIES, Metrics
from loopwarden.worker.runtable import RunTable
from loopwarden.worker.settings import Settings

log = logging.getLogger(__name__)

SIGNATURES_TABLE = "fleet-signatures"
SESSIONS_TABLE = "fleet-sessions"
_verdict_encoder = msgspec.json.Encoder()

SendFn = Callable[..., Awaitable[Any]]  # (topic, key, value, partition=None) -> delivery future


def read_signal(metrics: Metrics, partition: int, raw: bytes | None) -> Any:
    """The signal a repartition record holds, or None (counted, logged): a record that is not one
    (garbage, JSON nested past msgspec's bound, the mark of a record aiokafka could not parse) is
    skipped, never raised out of the agent, which would stop the worker."""
    try:
        return decode_signal(raw)  # type: ignore[arg-type]
    except (msgspec.DecodeError, TypeError, RecursionError) as exc:
        metrics.fleet_skipped.inc()
        log.warning("fleet record on partition %s skipped: %s", partition, f"{type(exc).__name__}: {exc}"[:300])
        return None


def fleet_topics(settings: Settings) -> tuple[str, str]:
    """The two repartition topics (:attr:`Settings.fleet_topics`)."""
    return settings.fleet_topics


class FleetRuntime:
    """The fleet side of one worker; :attr:`board` and :meth:`after_step` are the batch path's hooks."""

    def __init__(
        self, app: faust.App, settings: Settings, metrics: Metrics, fleet: Callable[[], FleetConfig], send: SendFn
    ) -> None:
        s = self.settings = settings
        self.metrics = metrics
        self.fleet = fleet
        self.send = send
        # incidents and cross-run warnings are retried through an outage as the batch path's verdicts are
        self.publisher = Publisher(
            send,
            on_dropped=lambda out, exc: metrics.publish_dropped.labels(out.topic).inc(),
            on_retry=lambda out, exc: metrics.publish_retries.labels(out.topic).inc(),
        )
        self.board = IncidentBoard()
        self.verifier: Verifier | None = None  # incident keys: unsigned or forged incidents are ignored
        self.board_loaded = asyncio.Event()
        sig_name, ses_name = fleet_topics(s)
        self.signatures_topic = app.topic(
            sig_name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=s.fleet_partitions,
            internal=True,
        )
        self.sessions_topic = app.topic(
            ses_name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=s.fleet_partitions,
            internal=True,
        )

        def fleet_table(name: str, changelog: str) -> RunTable:
            """A RocksDB table of raw bytes on the fleet partitions, read and written like the run table."""
            table = app.Table(
                name,
                default=None,
                key_type=bytes,
                value_type=bytes,
                partitions=s.fleet_partitions,
                options=s.rocksdb_options,
            )
            return RunTable(table, changelog, send)

        self.signatures = fleet_table(SIGNATURES_TABLE, sig_name)
        self.sessions = fleet_table(SESSIONS_TABLE, ses_name)
        self.watermark = -math.inf  # newest signal ts seen by this worker
        self._arrived = time.time()  # wall time of the newest signal
        self.lock = asyncio.Lock()  # the signature agent and the expiry sweep take turns
        self.sessions_lock = asyncio.Lock()  # likewise for the sessions agent and the session expiry

    # -- run side (called by the batch path, per applied event) -----------------------------------

    def hooks(self, fleet: FleetConfig) -> tuple[IncidentBoard | None, Any]:
        """The batch path's (incident board, after_step) for one batch: neither while no incident is
        open and no agent has a fleet extension on (the common case pays nothing per event)."""
        if not self.board and not fleet.fleet_wide():
            return None, None
        return self.board, self.after_step

    def after_step(self, state_in: RunState | None, event: Event, result: EventDecision) -> list:
        """This step's signals for the repartition topics, as (topic, key, value) records to publish
        before the state that remembers them is written (the committer's order)."""
        if not isinstance(event, (ToolResult, RunEnd)):
            return []
        signals = run_signals(state_in, event, result, self.fleet().extensions_of(event), time.time())
        out = []
        for signal in signals:
            joined = isinstance(signal, JoinSignal)
            topic = self.signatures_topic.get_topic_name() if joined else self.sessions_topic.get_topic_name()
            self.metrics.fleet_signals.labels("join" if joined else "finished_run").inc()
            if joined:
                self.metrics.fleet_joins.labels(self.metrics.tool(signal.tool_name)).inc()
            out.append((topic, signal_key(signal), encode(signal)))
        return out

    # -- fleet side ---------------------------------------------------------------------------------

    def now(self) -> float:
        """This worker's event time: the newest signal ts, moved on by the wall time since it came."""
        if self.watermark == -math.inf:
            return -math.inf
        return self.watermark + max(0.0, time.time() - self._arrived)

    async def publish(self, records: list[Incident]) -> None:
        if not records:
            return
        topic = self.settings.incidents_topic
        await self.publisher.publish(
            [Outgoing(topic, r.incident_id.encode(), encode(r), f"incident:{r.incident_id}") for r in records]
        )
        for r in records:
            self.metrics.incidents.labels(r.state).inc()

    async def on_signature(self, partition: int, key: bytes, raw: bytes) -> None:
        signal = read_signal(self.metrics, partition, raw)
        if not isinstance(signal, JoinSignal):
            return
        if signal.ts > self.watermark:
            self.watermark = signal.ts
        self._arrived = time.time()
        cfg = self.fleet().extensions(GLOBAL_KEY).incidents
        stored = self.signatures.get(partition, key)
        st, records = incidents.apply_join(incidents.decode_state(stored) if stored else None, signal, cfg)
        await self.publish(records)  # delivered before the state that produced them is written
        await self.signatures.write([(partition, key, incidents.encode_state(st))])

    async def on_session(self, partition: int, key: bytes, raw: bytes) -> None:
        run = read_signal(self.metrics, partition, raw)
        if not isinstance(run, FinishedRun):
            return
        stored = self.sessions.get(partition, key)
        ext = self.fleet().extensions_of(run)  # a run seen through its spans: shadowed
        shadow = ext.shadowed("cross_run_repeat")  # recorded on the shadow topic; the runner hears nothing
        st, verdicts = crossrun.observe(crossrun.decode_state(stored) if stored else None, run, ext.cross_run, shadow)
        st.seen = time.time()
        topic = self.settings.shadow_topic if shadow else self.settings.control_topic
        source = f"{self.sessions_topic.get_topic_name()}:{partition}"
        outs = []
        for v in verdicts:
            rkey = key_for(v.agent_id, v.session_id, v.run_id).encode()  # the run's key; ``key`` is the session's
            outs.append(Outgoing(topic, rkey, _verdict_encoder.encode(_stamped(v)), source))
        await self.publisher.publish(outs)  # delivered before the session state that warned is written
        for _ in verdicts:
            self.metrics.verdicts.labels("warn", "cross_run_repeat", "shadow" if shadow else "enforce").inc()
        await self.sessions.write([(partition, key, crossrun.encode_state(st))])

    async def sweep(self, owned: set[int]) -> None:
        """Resolve quiet incidents, forget stale joins; refresh the gauges (the timer's job)."""
        now = self.now()
        cfg = self.fleet().extensions(GLOBAL_KEY).incidents
        open_count = 0
        runs: dict[str, int] = {}
        prints: dict[tuple[str, str, str], int] = {}
        writes, records = [], []
        latest = -math.inf
        for partition, key, raw in list(self.signatures.owned_items(owned)):
            st = incidents.decode_state(raw)
            latest = max(latest, st.last_seen)
            kept = len(st.recent)
            new, out = (st, []) if now == -math.inf else incidents.expire(st, now, cfg)
            records += out
            if new is None:
                writes.append((partition, key, None))
                continue
            if len(new.recent) != kept:
                writes.append((partition, key, incidents.encode_state(new)))
            if new.incident_id is not None:
                open_count += 1
                label = self.metrics.tool(new.tool_name)
                runs[label] = runs.get(label, 0) + new.run_count
                series = (new.fingerprint or "", new.fingerprint_kind or "", label)
                if series not in prints and len(prints) >= MAX_FINGERPRINT_SERIES:
                    series = ("other", "", "other")
                prints[series] = prints.get(series, 0) + new.run_count
        if now == -math.inf and latest > -math.inf:  # restarted: event time resumes from the stored states
            self.watermark, self._arrived = latest, time.time()
        await self.publish(records)
        await self.signatures.write(writes)
        m = self.metrics
        m.open_incidents.set(open_count)
        m.incident_runs.clear()
        for label, n in runs.items():
            m.incident_runs.labels(label).set(n)
        m.incident_fingerprints.clear()
        for (print_, kind, label), n in prints.items():
            m.incident_fingerprints.labels(print_, kind, label).set(n)

    async def sweep_sessions(self, owned: set[int]) -> int:
        """Drop the sessions with no finished run for ``crossRun.sessionTtl``: the sessions table
        would otherwise keep every session the fleet ever had. The number dropped."""
        now = time.time()
        fleet = self.fleet()
        writes = []
        for i, (partition, key, raw) in enumerate(list(self.sessions.owned_items(owned)), 1):
            st = crossrun.decode_state(raw)
            agent = st.runs[-1].agent_id if st.runs else GLOBAL_KEY
            if crossrun.idle(st, now, fleet.extensions(agent).cross_run.session_ttl):
                writes.append((partition, key, None))
            if i % 1000 == 0:
                await asyncio.sleep(0)
        await self.sessions.write(writes)
        return len(writes)

    def accept_incident(self, record: Any) -> bool:
        """Whether an incident record may reach the board (signed by a worker's key, when keys are set)."""
        verifier = self.verifier
        if verifier is None or verifier.verify(record.topic, record.key, record.value, record.headers):
            return True
        self.metrics.signature_rejected.labels("incident").inc()
        log.warning("incident record at %s:%s ignored: not signed by an incident key", record.partition, record.offset)
        return False

    async def board_feed(self) -> None:
        """Every incident record, from the start of the topic, onto this worker's board."""
        from aiokafka import AIOKafkaConsumer

        from loopwarden.kafka.connection import kafka_auth
        from loopwarden.kafka.topics import assign_from_start

        s = self.settings
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            client_id="loopwarden-incidents",
            **kafka_auth(s),
        )
        await consumer.start()
        try:
            await assign_from_start(consumer, s.incidents_topic)
            while True:
                for records in (await consumer.getmany(timeout_ms=200, max_records=1000)).values():
                    for record in records:
                        if not self.accept_incident(record):
                            continue
                        try:
                            self.board.apply(decode_incident(record.value))
                        except Exception:  # not ours (or unreadable, or too deep): ignore, never stop the feed
                            self.metrics.fleet_skipped.inc()
                            log.warning("incident record at %s:%s ignored", record.partition, record.offset)
                self.board_loaded.set()
        finally:
            await consumer.stop()


def _stamped(verdict: Verdict) -> Verdict:
    """The verdict with the wall time of its publication (``event_ts`` keeps the run's end)."""
    return msgspec.structs.replace(verdict, ts=time.time())


def install(
    app: faust.App,
    settings: Settings,
    metrics: Metrics,
    fleet: Callable[[], FleetConfig],
    send: SendFn,
    owned: Callable[[], set[int]],
) -> FleetRuntime:
    """Create the fleet runtime and register its agents, timer and board task on ``app``."""
    rt = FleetRuntime(app, settings, metrics, fleet, send)

    @app.agent(rt.signatures_topic, name="loopwarden.fleet-signatures")
    async def signatures(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            async with rt.lock:
                await rt.on_signature(msg.partition, msg.key, msg.value)

    @app.agent(rt.sessions_topic, name="loopwarden.fleet-sessions")
    async def sessions(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            async with rt.sessions_lock:
                await rt.on_session(msg.partition, msg.key, msg.value)

    @app.timer(1.0)
    async def fleet_sweep() -> None:
        if app.rebalancing:
            return
        async with rt.lock:
            await rt.sweep(owned())

    @app.timer(settings.expire_interval)
    async def fleet_session_expiry() -> None:
        if app.rebalancing:
            return
        sessions = settings.fleet_topics[1]
        async with rt.sessions_lock:
            await rt.sweep_sessions({tp.partition for tp in app.consumer.assignment() if tp.topic == sessions})

    @app.task
    async def incident_board() -> None:
        await rt.board_feed()

    return rt
