"""A record aiokafka cannot parse becomes a mark in its place, not an exception (parse guard, unit).

The live half (every reader on Tansu) is tests/internals/test_unreadable_live.py.
"""

from __future__ import annotations

import pytest
from aiokafka.record.memory_records import MemoryRecords

from loopwarden.devtools.rawrecords import codecs, encode_batch
from loopwarden.internals.aiokafka_records import GuardedRecords
from loopwarden.kafka.records import unreadable

BAD_KEY = b"\xff\xfe"
RECORDS = [(b"k1", b"v1", [(b"ok", b"x")]), (b"k2", b"v2", [(BAD_KEY, b"x")]), (b"k3", b"v3", [])]


def read(data: bytes) -> list:
    records = GuardedRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out += list(batch)
    return out


@pytest.mark.parametrize("compression", codecs())
def test_aiokafka_alone_raises_on_a_header_key_that_is_not_utf8(compression):
    batch = MemoryRecords(encode_batch(RECORDS, compression)).next_batch()
    with pytest.raises(UnicodeDecodeError):
        list(batch)


@pytest.mark.parametrize("compression", codecs())
def test_the_bad_record_becomes_a_mark_and_the_records_around_it_are_kept(compression):
    got = read(encode_batch(RECORDS, compression))
    assert [r.offset for r in got] == [0, 1, 2]
    assert [(r.key, r.value) for r in (got[0], got[2])] == [(b"k1", b"v1"), (b"k3", b"v3")]
    why = unreadable(got[1].key, got[1].value, got[1].headers)
    assert why is not None and "UnicodeDecodeError" in why and "sha256" in why


def test_a_batch_with_a_bad_crc_is_one_mark_and_the_next_batch_is_read():
    bad = bytearray(encode_batch(RECORDS))
    bad[-1] ^= 0xFF  # a byte of the last record: the CRC no longer matches
    good = encode_batch([(b"k", b"v", [])])
    good = (3).to_bytes(8, "big") + good[8:]  # the next batch, at offset 3
    got = read(bytes(bad) + good)
    assert [r.offset for r in got] == [0, 3]
    assert "CRC" in unreadable(got[0].key, got[0].value, got[0].headers)
    assert got[1].value == b"v"


def test_a_batch_whose_compression_is_broken_is_one_mark():
    data = bytearray(encode_batch([(b"k", b"v" * 100, [])], 1))
    data[61:70] = b"\x00" * 9  # the gzip header: not gzip any more
    from aiokafka.record.util import calc_crc32c

    data[17:21] = calc_crc32c(memoryview(data)[21:]).to_bytes(4, "big")  # a valid CRC over broken bytes
    (mark,) = read(bytes(data))
    assert mark.offset == 0 and "batch unreadable" in unreadable(mark.key, mark.value, mark.headers)


def test_a_forged_mark_header_on_a_real_record_is_no_mark():
    assert unreadable(b"k", b"v", [("lw-unreadable", b"x")]) is None
    assert unreadable(None, b"v", [("lw-unreadable", b"x")]) is None
    assert unreadable(None, None, [("other", b"x")]) is None


@pytest.mark.parametrize("raw", [None, b"[" * 1000, b'{"kind": ' + b"[" * 5000, b"\xff\xfe"])
def test_fleet_agents_skip_a_record_that_is_no_signal(raw):
    """A repartition record that is not a signal (the mark of an unreadable one, nesting past
    msgspec's bound, garbage) is counted and skipped: raised out of the agent, it stopped the worker."""
    from loopwarden.worker.fleet_agent import read_signal
    from loopwarden.worker.metrics import Metrics

    metrics = Metrics()
    assert read_signal(metrics, 0, raw) is None
    assert metrics.fleet_skipped._value.get() == 1


def test_a_compressed_batch_past_the_decompression_bound_is_one_mark(monkeypatch):
    """A gzip bomb (a small batch that expands past MAX_DECOMPRESSED) is cut off while it inflates:
    one mark for the batch, read by the C parser and again by the Python one, and the next batch is
    read; a batch under the bound, in one or several gzip members, reads as before."""
    from loopwarden.internals import aiokafka_records

    aiokafka_records.install()
    monkeypatch.setattr(aiokafka_records, "MAX_DECOMPRESSED", 1 << 20)
    bomb = encode_batch([(b"k", b"\0" * (3 << 20), [])], 1)
    assert len(bomb) < 8 << 10
    good = encode_batch([(b"k", b"v" * 1000, [])], 1)
    good = (1).to_bytes(8, "big") + good[8:]
    got = read(bomb + good)
    assert [r.offset for r in got] == [0, 1] and got[1].value == b"v" * 1000
    why = unreadable(got[0].key, got[0].value, got[0].headers)
    assert why is not None and "expands past 1048576 bytes" in why
    import gzip

    two = gzip.compress(b"a" * 100) + gzip.compress(b"b" * 100)
    assert aiokafka_records.bounded_gzip_decode(two) == b"a" * 100 + b"b" * 100
    with pytest.raises(EOFError):
        aiokafka_records.bounded_gzip_decode(gzip.compress(b"a" * 100)[:-9])


def test_a_batch_past_the_bound_peaks_near_the_bound(monkeypatch):
    """F13: a small gzip batch of bad records that inflates past the bound is one mark, and reading it
    holds about the bound, not three times it (zlib's blocks and their join, a traceback keeping the
    first inflation alive while the Python parser inflated the batch again). Scaled: the bound is
    8 MiB, the batch 100 bad records of 128 KiB (`loopwarden`'s 64 MiB and 1 MiB: +192 -> +66 MiB of
    RSS, measured)."""
    import tracemalloc

    from loopwarden.internals import aiokafka_records

    aiokafka_records.install()
    bound = 8 << 20
    monkeypatch.setattr(aiokafka_records, "MAX_DECOMPRESSED", bound)
    batch = encode_batch([(b"k%d" % i, b"\x01" * (128 << 10), [(BAD_KEY, b"x")]) for i in range(100)], 1)
    assert len(batch) < 64 << 10
    tracemalloc.start()
    try:
        (mark,) = read(batch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "expands past 8388608 bytes" in unreadable(mark.key, mark.value, mark.headers)
    assert peak < bound * 1.25, peak / bound
