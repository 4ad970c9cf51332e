"""No single record stops the stream: a few hundred poison records between real runs' events.

Large garbage (2 MB), a 900 KB record of truncated JSON, depth 10,000,
invalid UTF-8, tombstones, non-object JSON and lone-surrogate tags are
produced on the same keys as real looping runs. The worker stays up, every
bad record is dead-lettered exactly once with its original key and bytes,
the runs' verdicts equal replay's, and the dead-letter counter equals the
number of bad records sent.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random

import pytest

from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.verdicts import MAX_DEAD_LETTER_RAW
from tests.support.live import check_against_replay, collect, expected_verdicts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}


def run_events(run: str, n: int) -> list[dict]:
    out = []
    for i in range(n):
        call = {
            "type": "tool_call",
            "agent_id": f"agent-{run}",
            "session_id": f"s-{run}",
            "run_id": run,
            "tool_name": "read",
            "tool_call_id": f"{run}-{i}",
            "params": {"path": "/same"},
        }
        out.append(call)
        out.append({**call, "type": "tool_result", "result": {"content": [{"type": "text", "text": "same"}]}})
    return out


def poison(rng: random.Random) -> list[tuple[bytes | None, str]]:
    """(value, why) pairs; None is a tombstone."""
    base = [
        (rng.randbytes(2_000_000), "2 MB garbage"),
        (b'{"type": "tool_call", "agent_id": "a", "params": {"blob": "' + b"x" * 900_000, "900 KB bad JSON"),
        (b"[" * 10_000 + b"]" * 10_000, "depth 10,000"),
        (b'{"type": "tool_call", "agent_id": "\xff\xfe"}', "invalid UTF-8"),
        (None, "tombstone"),
        (b'"just a string"', "non-object JSON"),
        (b"[1, 2, 3]", "array"),
        (b'{"type": "tool_\\udbffcall", "agent_id": "a"}', "lone-surrogate tag"),
        (b'{"type": null, "agent_id": "a"}', "null type"),
        (b'{"type": "tool_call", "agent_id": 7}', "agent_id not a string"),
    ]
    small = [(rng.randbytes(rng.randint(1, 300)), "random bytes") for _ in range(200)]
    return base + small


def test_poison_records_between_real_runs(tansu, names, workers, tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(CONFIG))
    # The events topic here accepts 3 MB records; the worker is told so and sizes its dead letters for it.
    worker = workers(names, config=config, extra=["--max-message-bytes", "3000000"])
    worker.wait_ready()

    rng = random.Random(8)
    runs = {f"r{i}": run_events(f"r{i}", 24) for i in range(4)}
    bad = poison(rng)
    rng.shuffle(bad)
    items: list[tuple[bytes | None, bytes | None]] = []
    good_events: list[dict] = []
    good_index: list[int] = []
    queues = {r: list(evs) for r, evs in runs.items()}
    while any(queues.values()) or bad:
        for run, queue in queues.items():
            if queue:
                event = queue.pop(0)
                good_index.append(len(items))
                good_events.append(event)
                items.append((run.encode(), json.dumps(event).encode()))
            if bad and rng.random() < 0.6:
                items.append((run.encode(), bad.pop()[0]))  # on the same key as the run
        if not any(queues.values()):
            items += [(b"r0", value) for value, _why in bad]
            bad = []

    async def produce_all():
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=tansu, max_request_size=4_000_000, linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(names.events, value, key=key) for key, value in items]
            return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
        finally:
            await producer.stop()

    positions = asyncio.run(produce_all())
    n_bad = len(items) - len(good_events)
    expected = expected_verdicts(
        good_events, [positions[i] for i in good_index], names.events, FleetConfig.from_document(CONFIG)
    )

    letters = collect(tansu, names.dead_letter, until=lambda rs: len(rs) >= n_bad, timeout=120)
    assert worker.alive(), "the worker died on a poison record"
    assert len(letters) == n_bad
    sent = {positions[i]: items[i] for i in range(len(items)) if i not in set(good_index)}
    seen = set()
    for record in letters:
        letter = json.loads(record.value)
        where = (letter["partition"], letter["offset"])
        assert where not in seen, f"dead-lettered twice: {where}"
        seen.add(where)
        key, value = sent[where]
        assert record.key == key
        value = value or b""  # the letter keeps a bounded prefix, and the size and digest of the whole
        assert base64.b64decode(letter["raw"]) == value[:MAX_DEAD_LETTER_RAW], letter["reason"]
        assert (letter["size"], letter["sha256"]) == (len(value), hashlib.sha256(value).hexdigest())
    assert seen == set(sent)

    control = collect(tansu, names.control, until=lambda rs: len(rs) >= len(expected), timeout=60)
    check_against_replay(control, expected)
    m = worker.metrics()
    assert m["loopwarden_dead_letters_total"] == n_bad
    assert m.get("loopwarden_publish_dropped_total", 0) == 0
