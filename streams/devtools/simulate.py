"""``loopwarden simulate``: publish a synthetic fleet (healthy runs plus each loop kind) at a set rate.

The runs come from :mod:`loopwarden.devtools.synthetic` (generic repeat, stuck polling,
ping-pong, unknown tool, compaction loop, healthy); each event gets ``ts``
= send time, key = its run key. A new fleet (next seed) starts whenever one
is used up, so any duration works.

With ``--ack-share F`` it also plays the runners' side of acknowledgements:
it reads the control topic and answers a share F of the warn/block/abort
verdicts with a ``verdict_ack`` (a share of those ``failed``), so the
Enforcement metrics have data while the rest stay unacknowledged. Which
verdicts are acked depends only on their ids, so a rerun acks the same ones.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import msgspec

from loopwarden.kafka.connection import servers
from loopwarden.schemas.events import VerdictAck, encode_event, key_for

_encode = msgspec.json.Encoder().encode


@dataclass
class SimStats:
    sent: int = 0
    started: float = field(default_factory=time.monotonic)
    by_type: dict[str, int] = field(default_factory=dict)
    acks: dict[str, int] = field(default_factory=dict)  # outcome -> verdict_acks sent (--ack-share)


def run_key(event: dict) -> str:
    """The Kafka key of an event given as a dict (:func:`loopwarden.schemas.events.key_for`)."""
    return key_for(event["agent_id"], event.get("session_id"), event.get("run_id"))


def endless_fleet(
    agents: int,
    loop_share: float,
    seed: int,
    run_length: int = 40,
    gate_every: int = 0,
    prefix: str = "",
    breaker_agent: str | None = None,
    usage: bool = False,
) -> Iterator[dict]:
    """Fleet after fleet; run ids stay unique across rounds; every ``gate_every``-th call awaits a decision.

    ``usage``: tool calls carry tokens and cost (:func:`~loopwarden.devtools.synthetic.fleet_events`)."""
    from loopwarden.devtools.synthetic import fleet_events

    calls = 0
    for round_ in itertools.count():
        for event in fleet_events(
            agents=agents,
            runs_per_agent=2,
            loop_share=loop_share,
            run_length=run_length,
            seed=seed + round_,
            breaker_agent=breaker_agent,
            usage=usage,
        ):
            event["run_id"] = f"{prefix}{event['run_id']}.{round_}"
            if gate_every and event["type"] == "tool_call":
                calls += 1
                if calls % gate_every == 0:
                    event["await_decision"] = True
            yield event


def with_event_ids(events: Iterator[dict], seed: int = 0) -> Iterator[dict]:
    """``events``, each given a fresh 32-hex ``event_id`` as the runner client sends them (the
    engine keeps up to 128 per run to drop repeated deliveries, so they cost time and state)."""
    import random

    bits = random.Random(seed).getrandbits
    for event in events:
        event["event_id"] = f"{bits(128):032x}"
        yield event


def with_scenarios(
    events: Iterator[dict], outage: int = 0, heartbeat: int = 0, every: int = 500, seed: int = 7
) -> Iterator[dict]:
    """Mix the fleet scenarios into ``events``: ``outage`` agents hitting one failing tool and
    ``heartbeat`` sessions whose scheduled runs repeat, one round of each every ``every`` events."""
    from loopwarden.devtools.synthetic import heartbeat_events, outage_events

    if not outage and not heartbeat:
        yield from events
        return
    for round_ in itertools.count():
        extra: list[Iterator[dict]] = []
        if outage:
            extra.append(outage_events(agents=outage, seed=seed + round_, prefix=f"outage{round_}"))
        if heartbeat:
            extra.append(heartbeat_events(sessions=heartbeat, prefix=f"heartbeat{round_}"))
        mixed = itertools.chain.from_iterable(itertools.zip_longest(*extra))
        yield from itertools.chain(itertools.islice(events, every), (e for e in mixed if e is not None))


async def publish(
    bootstrap: str,
    topic: str,
    events: Iterator[dict],
    rate: float,
    duration: float | None,
    stats: SimStats | None = None,
    count: int | None = None,
    linger_ms: int = 5,
) -> SimStats:
    """Send events at ``rate``/s (0 = as fast as possible) for ``duration`` s or ``count`` events."""
    from aiokafka import AIOKafkaProducer

    from loopwarden.kafka.connection import start_client

    stats = stats or SimStats()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms, max_batch_size=256 * 1024)
    await start_client(producer)
    try:
        start = time.monotonic()
        tick = 0.01
        pending: list = []
        while True:
            now = time.monotonic()
            if duration is not None and now - start >= duration:
                break
            if count is not None and stats.sent >= count:
                break
            due = int((now - start) * rate) + 1 - stats.sent if rate > 0 else 2000
            if count is not None:
                due = min(due, count - stats.sent)
            for _ in range(max(0, due)):
                event = next(events)
                event["ts"] = time.time()
                pending.append(await producer.send(topic, _encode(event), key=run_key(event).encode()))
                stats.sent += 1
                kind = event["type"]
                stats.by_type[kind] = stats.by_type.get(kind, 0) + 1
            if len(pending) > 5000 or rate > 0:
                if pending:
                    await asyncio.gather(*pending)
                    pending.clear()
            if rate > 0:
                await asyncio.sleep(tick)
        if pending:
            await asyncio.gather(*pending)
        await producer.flush()
    finally:
        await producer.stop()
    return stats


def _shares(verdict: dict) -> tuple[float, float]:
    """Two independent stable pseudo-random numbers in [0, 1) for one verdict.

    Drawn from what the worker decides from the run's own events (run, detector, call, count),
    not from the verdict id: that names the triggering record's offset, which moves with whatever
    else the events topic carries, so a rerun of the same fleet acks the same verdicts."""
    fields = ("run_id", "session_id", "detector", "action", "tool_call_id", "count", "warning_key")
    key = "|".join(str(verdict.get(f)) for f in fields) if verdict.get("run_id") else verdict["verdict_id"]
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8]) / 2**64, int.from_bytes(digest[8:]) / 2**64


_ACKED_ACTIONS = frozenset({"warn", "block", "abort"})
_control_decoder = msgspec.json.Decoder(dict)


def ack_for(verdict: dict, share: float, failed_share: float) -> VerdictAck | None:
    """The ``verdict_ack`` a simulated runner sends for ``verdict`` (a control record), or None.

    Records that are not verdicts (``verdict_violation``), ``allow`` verdicts and
    verdicts outside ``share`` get none; ``failed_share`` of the acked ones fail.
    """
    if verdict.get("type") != "verdict" or verdict.get("action") not in _ACKED_ACTIONS:
        return None
    verdict_id = verdict.get("verdict_id")
    if not isinstance(verdict_id, str):
        return None
    acked, fails = _shares(verdict)
    if acked >= share:
        return None
    failed = fails < failed_share
    return VerdictAck(
        agent_id=verdict["agent_id"],
        session_id=verdict.get("session_id"),
        run_id=verdict.get("run_id"),
        ts=time.time(),
        verdict_id=verdict_id,
        outcome="failed" if failed else "applied",
        detail="simulated runner could not apply it" if failed else None,
    )


async def acknowledge(
    bootstrap: str,
    control_topic: str,
    events_topic: str,
    share: float,
    failed_share: float,
    stats: SimStats,
    ready: asyncio.Event,
    stop: asyncio.Event,
    linger_ms: int = 5,
) -> None:
    """Ack verdicts from ``control_topic`` (read from the end, so an older fleet's are left alone) until
    ``stop`` is set; ``ready`` is set once the consumer has its position, before any load is sent."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms)
    await consumer.start()
    await producer.start()
    try:
        await consumer.topics()  # fetches the metadata partitions_for_topic reads
        partitions = [
            TopicPartition(control_topic, p) for p in sorted(consumer.partitions_for_topic(control_topic) or ())
        ]
        if not partitions:
            raise RuntimeError(f"control topic {control_topic!r} does not exist (start the worker first)")
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)
        ready.set()
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            for records in batches.values():
                for record in records:
                    try:
                        verdict = _control_decoder.decode(record.value or b"")
                    except msgspec.DecodeError:
                        continue
                    ack = ack_for(verdict, share, failed_share)
                    if ack is None:
                        continue
                    await producer.send(events_topic, encode_event(ack), key=record.key)
                    stats.acks[ack.outcome] = stats.acks.get(ack.outcome, 0) + 1
        await producer.flush()
    finally:
        await producer.stop()
        await consumer.stop()


async def simulate(
    bootstrap: str,
    topic: str,
    events: Iterator[dict],
    rate: float,
    duration: float | None,
    count: int | None,
    ack_share: float = 0.0,
    ack_failed: float = 0.0,
    control_topic: str = "agent.loop-control",
    ack_grace: float = 2.0,
) -> SimStats:
    """:func:`publish`, plus :func:`acknowledge` beside it when ``ack_share`` > 0 (it keeps acking for
    ``ack_grace`` s after the last event, for the verdicts still on their way)."""
    stats = SimStats()
    if ack_share <= 0:
        return await publish(bootstrap, topic, events, rate, duration, stats=stats, count=count)
    ready, stop = asyncio.Event(), asyncio.Event()
    acker = asyncio.ensure_future(
        acknowledge(bootstrap, control_topic, topic, ack_share, ack_failed, stats, ready, stop)
    )
    waiting = asyncio.ensure_future(ready.wait())
    await asyncio.wait([acker, waiting], return_when=asyncio.FIRST_COMPLETED)
    if acker.done():
        acker.result()  # it failed before it was ready: raise its error
    waiting.cancel()
    try:
        await publish(bootstrap, topic, events, rate, duration, stats=stats, count=count)
        await asyncio.sleep(ack_grace)
    finally:
        stop.set()
        await acker
    return stats


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="publish a synthetic agent fleet to the events topic",
        description="Publish healthy runs and every loop kind at a given rate.",
    )
    p.add_argument("--broker", default="kafka://127.0.0.1:9092", help="Kafka URL (kafka://host:port)")
    p.add_argument("--topic", default="agent.events")
    p.add_argument("--agents", type=int, default=50, help="agents per fleet round")
    p.add_argument("--rate", type=float, default=200.0, help="events per second (0 = as fast as possible)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds to run (0 = until --count or Ctrl-C)")
    p.add_argument("--count", type=int, default=None, help="stop after this many events")
    p.add_argument("--loop-share", type=float, default=0.3, help="share of runs that loop")
    p.add_argument("--gate-every", type=int, default=0, help="every Nth tool_call sets await_decision (0 = none)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--usage",
        default=True,
        action=argparse.BooleanOptionalAction,
        help="tool calls carry usage (tokens, cost) so loop cost shows on the dashboard",
    )
    p.add_argument(
        "--outage",
        type=int,
        default=0,
        metavar="AGENTS",
        help="fleet-incident scenario: this many agents hit one failing tool every round (0 = off)",
    )
    p.add_argument(
        "--heartbeat",
        type=int,
        default=0,
        metavar="SESSIONS",
        help="cross_run_repeat scenario: this many sessions run the same scheduled work (0 = off)",
    )
    p.add_argument(
        "--ack-share",
        type=float,
        default=0.0,
        metavar="F",
        help="answer this share of warn/block/abort verdicts with a verdict_ack (0 = none)",
    )
    p.add_argument(
        "--ack-failed",
        type=float,
        default=0.2,
        metavar="F",
        help="share of the sent acks whose outcome is `failed` (with --ack-share)",
    )
    p.add_argument("--control-topic", default="agent.loop-control", help="where verdicts are read (--ack-share)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    bootstrap = ",".join(servers(args.broker))
    events = endless_fleet(
        args.agents, args.loop_share, args.seed, gate_every=args.gate_every, usage=getattr(args, "usage", True)
    )
    events = with_scenarios(
        events, outage=getattr(args, "outage", 0), heartbeat=getattr(args, "heartbeat", 0), seed=args.seed
    )
    duration = args.duration or None
    try:
        stats = asyncio.run(
            simulate(
                bootstrap,
                args.topic,
                events,
                args.rate,
                duration,
                args.count,
                ack_share=getattr(args, "ack_share", 0.0),
                ack_failed=getattr(args, "ack_failed", 0.0),
                control_topic=getattr(args, "control_topic", "agent.loop-control"),
            )
        )
    except KeyboardInterrupt:
        return 130
    elapsed = time.monotonic() - stats.started
    print(f"sent {stats.sent} events in {elapsed:.1f}s ({stats.sent / max(elapsed, 1e-9):.0f}/s): {stats.by_type}")
    if stats.acks:
        print(f"sent verdict_acks: {_encode(stats.acks).decode()}")  # JSON, by outcome
    return 0
