"""The batch hand-over's bookkeeping matches Faust's own, record for record.

The consumer (streams/internals/faust_consumer.py) hands aiokafka records to the batch path
without making a Faust message of each, and acks a durable batch in one step per partition.
Offset commits rest on that bookkeeping, so it is compared here with what Faust's per-message
``ack()`` leaves behind, on real consumers of the worker's app.
"""

from __future__ import annotations

import asyncio

from aiokafka.structs import ConsumerRecord
from faust.types import TP

from loopwarden.worker.app import create_app
from loopwarden.worker.settings import from_sources

TOPIC = "agent.events"


def _record(partition: int, offset: int) -> ConsumerRecord:
    return ConsumerRecord(TOPIC, partition, offset, 0, 0, b"k", b"v", None, 1, 1, ())


def _consumer(tmp_path, name: str, acking: bool = True):
    app, _ = create_app(from_sources({"data_dir": str(tmp_path / name)}, environ={}))
    if acking:  # as the conductor records it once the worker's agent subscribes
        app.topics._acking_topics.add(TOPIC)
    return app.consumer


def _state(consumer, tps):
    return (
        {tp: sorted(consumer._acked[tp]) for tp in tps},
        {tp: set(consumer._acked_index[tp]) for tp in tps},
        consumer._n_acked,
    )


def test_bulk_ack_leaves_what_faust_ack_leaves(tmp_path):
    async def main():
        tp0, tp1 = TP(TOPIC, 0), TP(TOPIC, 1)
        batches = [
            {tp0: list(range(0, 6)), tp1: list(range(3, 8))},
            {tp0: [5, 6, 7, 9], tp1: [8]},
        ]  # 5: acked twice; 8 after a gap in tp0
        faust_way, ours = _consumer(tmp_path, "a"), _consumer(tmp_path, "b")
        for c in (faust_way, ours):
            c._committed_offset[tp1] = 5  # offsets below the committed one are not acked again
        for batch in batches:
            for tp, offsets in batch.items():
                for offset in offsets:
                    faust_way.ack(faust_way._to_message(tp, _record(tp.partition, offset)))
            ours._ack_offsets(batch)
        assert _state(ours, (tp0, tp1)) == _state(faust_way, (tp0, tp1))
        assert ours._n_acked == 9 + 4  # tp0: 0-7 and 9, 5 once; tp1: 5-8 (3 and 4 are below the committed 5)
        # What the next commit takes: tp0 up to the gap before 9, tp1 all of it.
        committable = [faust_way._new_offset(tp) for tp in (tp0, tp1)]
        assert [ours._new_offset(tp) for tp in (tp0, tp1)] == committable == [8, 9]

    asyncio.run(main())


def test_bulk_ack_of_a_topic_without_acks_records_nothing(tmp_path):
    async def main():
        c = _consumer(tmp_path, "c", acking=False)
        c._ack_offsets({TP(TOPIC, 0): [0, 1, 2]})
        assert c._n_acked == 0 and not c._acked

    asyncio.run(main())


def test_unread_records_skip_what_was_read_and_note_gaps(tmp_path):
    async def main():
        c = _consumer(tmp_path, "d")
        tp = TP(TOPIC, 0)
        first = [_record(0, o) for o in range(0, 4)]
        assert await c._unread(tp, first, True) is first  # nothing read before: taken whole
        assert c._read_offset[tp] == 3
        follow = [_record(0, o) for o in range(4, 7)]
        assert await c._unread(tp, follow, True) is follow  # contiguous after the last: taken whole
        mixed = [_record(0, o) for o in (5, 6, 7, 10, 11)]  # 5 was read; 6 is the read offset; 8-9 skipped
        kept = await c._unread(tp, mixed, True)
        assert [r.offset for r in kept] == [6, 7, 10, 11]
        assert c._read_offset[tp] == 11
        assert sorted((i.begin, i.end) for i in c._gap[tp]) == [
            (8, 11)
        ]  # Faust notes [last + 1, offset] (its interval end is exclusive)

    asyncio.run(main())


def test_a_partition_handed_over_in_pieces_keeps_every_offset_to_ack():
    """While flow is paused Faust hands over one message at a time: each piece of a partition adds to
    the batch's offsets to ack instead of replacing them (a lost offset would hold its commits back)."""
    from loopwarden.internals.faust_consumer import collect

    tp0, tp1 = TP(TOPIC, 0), TP(TOPIC, 1)
    batch, offsets = [], {}
    for tp, offs in ((tp0, [4]), (tp1, [9]), (tp0, [5, 6]), (tp0, [])):
        collect(batch, offsets, tp, [_record(tp.partition, o) for o in offs])
    assert offsets == {tp0: [4, 5, 6], tp1: [9]}
    assert [(r.partition, r.offset) for r in batch] == [(0, 4), (1, 9), (0, 5), (0, 6)]
