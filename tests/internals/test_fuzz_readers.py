"""Fuzz stage: random record batches through aiokafka's parsing (guarded) and each reader's handler.

Random header keys and values (bytes that are not UTF-8 among them), random compression (every
codec this install has), random corruption of the batch bytes, values nested up to 100,000 deep
and up to 8 MB. Every record must come out as a record or as the mark of an unreadable one, and
every reader must take it without raising: the worker's batch step, the config feed (worker and
runner), the span bridge (both encodings). Seeded; the suite runs a few seconds per reader;
``LOOPWARDEN_FUZZ_SECONDS=300`` (and ``LOOPWARDEN_FUZZ_SEED``) runs longer.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from loopwarden.devtools.rawrecords import codecs, encode_batch
from loopwarden.internals.aiokafka_records import GuardedRecords
from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.otel.ingest import SpanSettings, translate
from loopwarden.schemas.config import FleetConfig
from loopwarden.worker.batch import Limits, apply_batch

SECONDS = float(os.environ.get("LOOPWARDEN_FUZZ_SECONDS", "2"))
SEED = int(os.environ.get("LOOPWARDEN_FUZZ_SEED", "33"))
FLEET = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})
CALL = {"type": "tool_call", "agent_id": "a", "session_id": "s", "run_id": "r", "tool_name": "t", "params": {}}


def size(rng: random.Random) -> int:
    return int(2 ** rng.uniform(0, 23))  # log-uniform up to 8 MB: mostly small, some huge


def value(rng: random.Random) -> bytes | None:
    kind = rng.randrange(9)
    if kind == 0:
        return None
    if kind == 1:
        return rng.randbytes(size(rng))
    if kind == 2:
        depth = rng.choice([10, 65, 1000, 10_000, 100_000])
        return rng.choice([b"[", b"{", b'{"a":']) * depth
    if kind == 3:
        depth = rng.choice([63, 65, 1000, 100_000])
        return json.dumps({**CALL, "params": {"x": json.loads("[" * min(depth, 500) + "]" * min(depth, 500))}}).encode()
    if kind == 4:
        return json.dumps({**CALL, "params": {"blob": "x" * size(rng)}}).encode()
    if kind == 5:
        return b'{"resourceSpans": [' + b"{}," * rng.randrange(1, 700_000) + b"{}]}"
    if kind == 6:
        return b"\x0a" + bytes([rng.randrange(256) for _ in range(rng.randrange(1, 64))])
    if kind == 7:
        return json.dumps({"tools": {"loopDetection": {"enabled": rng.random() < 0.5}}}).encode()
    return json.dumps(CALL).encode()


def headers(rng: random.Random) -> list[tuple[bytes, bytes | None]]:
    out = []
    for _ in range(rng.randrange(4)):
        name = rng.choice([b"\xff\xfe", b"lw-sig", b"lw-unreadable", rng.randbytes(rng.randrange(8)), b"ok"])
        out.append((name, rng.choice([None, b"", rng.randbytes(rng.randrange(64))])))
    return out


def batch(rng: random.Random) -> bytes:
    records = [
        (rng.choice([None, b"a|s|r", b"*", rng.randbytes(rng.randrange(1, 40))]), value(rng), headers(rng))
        for _ in range(rng.randrange(1, 6))
    ]
    data = bytearray(encode_batch(records, rng.choice(codecs())))
    if rng.random() < 0.3:  # corrupt a few bytes past the length field: CRC, attributes, records
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(12, len(data))
            data[i] = rng.randrange(256)
    return bytes(data)


class Record:
    """What a consumer hands a reader, from one parsed record (or mark)."""

    def __init__(self, offset: int, parsed) -> None:
        self.topic, self.partition, self.offset = "t", 0, offset
        self.key, self.value, self.headers = parsed.key, parsed.value, list(parsed.headers)


def records(rng: random.Random) -> list[Record]:
    data = batch(rng)
    parsed = GuardedRecords(data)
    out = []
    while parsed.has_next():
        b = parsed.next_batch()
        b.validate_crc()
        out += [Record(len(out), r) for r in b]
    return out


def fuzz(reader, seed: int) -> int:
    rng = random.Random(seed)
    deadline = time.monotonic() + SECONDS
    n = 0
    while time.monotonic() < deadline:
        reader(records(rng))
        n += 1
    return n


def test_guarded_parsing_hands_out_records_or_marks():
    assert fuzz(lambda recs: None, SEED) > 0


def test_worker_batch_step():
    store: dict = {}

    def read(recs: list[Record]) -> None:
        result = apply_batch(recs, lambda p, k: store.get((p, k)), FLEET, Limits(), now=1.0)
        store.update(result.writes)
        assert len(result.positions) <= 1

    assert fuzz(read, SEED + 1) > 0


def test_config_feed():
    feed = ConfigFeed(FleetConfig(), "127.0.0.1:1", "cfg")

    def read(recs: list[Record]) -> None:
        for r in recs:
            feed.apply(r.key, r.value, r.headers)

    assert fuzz(read, SEED + 2) > 0


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_span_bridge(encoding):
    settings = SpanSettings(encoding=encoding, events_topic="ev", dead_letter_topic="dlq")

    def read(recs: list[Record]) -> None:
        for r in recs:
            translate(r, settings)

    assert fuzz(read, SEED + 3) > 0
