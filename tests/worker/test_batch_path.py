"""The batch path in-process: apply_batch() and the Committer, with a fake send and an in-memory table.

Each test pins one ordering rule the crash safety rests on (see
streams/worker/committer.py): deliveries before state, state before ack,
pending values across batches, the in-flight bound, the offset guard, and
what happens at each crash point (a delivery that never completes, a
failing write, a record that can never be published).
"""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.verdicts import DeadLetter
from loopwarden.worker.batch import Limits, apply_batch
from loopwarden.worker.committer import CommitEvents, CommitLimits, Committer, Publisher, PublishPolicy
from loopwarden.worker.runcodec import decode_value
from loopwarden.worker.screening import without_raw
from tests.support.helpers import Rec

ENABLED = FleetConfig.from_document(
    {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}
)
LIMITS = Limits(control_topic="ctl", dead_letter_topic="dlq")
FAST = PublishPolicy(backoff_initial=0.001, backoff_max=0.01, permanent_attempts=3)


def call(i: int, run: str = "r1", gated: bool = False) -> bytes:
    return json.dumps(
        {
            "type": "tool_call",
            "agent_id": "a",
            "run_id": run,
            "tool_name": "read",
            "tool_call_id": f"c{i}",
            "params": {"p": 1},
            "await_decision": gated,
        }
    ).encode()


VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


def result(i: int, run: str = "r1", veto: bool = False) -> bytes:
    return json.dumps(
        {
            "type": "tool_result",
            "agent_id": "a",
            "run_id": run,
            "tool_name": "read",
            "tool_call_id": f"c{i}",
            "params": {"p": 1},
            "result": VETO if veto else "same",
        }
    ).encode()


def loop_records(n_pairs: int, start_offset: int = 0, run: str = "r1") -> list[Rec]:
    out, off = [], start_offset
    for i in range(n_pairs):
        out.append(Rec("ev", 0, off, run.encode(), call(i, run)))
        # an obedient runner: from the 4th call on (blocked under ENABLED) the result is the veto
        out.append(Rec("ev", 0, off + 1, run.encode(), result(i, run, veto=off // 2 >= 3)))
        off += 2
    return out


class MemTable:
    """The run table's interface, in memory; records every write in order."""

    def __init__(self) -> None:
        self.data: dict[tuple[int, bytes], bytes] = {}
        self.log: list[str] = []
        self.fail_next_write = False

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.data.get((partition, key))

    async def write(self, items) -> None:
        if self.fail_next_write:
            self.fail_next_write = False
            raise RuntimeError("disk full")
        for partition, key, value in items:
            if value is None:
                self.data.pop((partition, key), None)
            else:
                self.data[(partition, key)] = value
        self.log.append(f"write:{len(items)}")


class FakeSend:
    """Producer stand-in: each send returns a future the test resolves (or fails) when it likes."""

    def __init__(self, log: list[str], auto: bool = True) -> None:
        self.log = log
        self.auto = auto
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.futures: list[asyncio.Future] = []
        self.raise_on_send: list[BaseException] = []
        self.fail_delivery: list[BaseException] = []

    async def __call__(self, topic: str, key: bytes | None, value: bytes):
        if self.raise_on_send:
            raise self.raise_on_send.pop(0)
        fut = asyncio.get_running_loop().create_future()
        self.sent.append((topic, key, value))
        self.futures.append(fut)
        if self.fail_delivery:
            fut.set_exception(self.fail_delivery.pop(0))
        elif self.auto:
            fut.set_result(None)
            self.log.append(f"delivered:{topic}")
        return fut

    def deliver_all(self) -> None:
        for fut in self.futures:
            if not fut.done():
                fut.set_result(None)
                self.log.append("delivered")


def committer(
    table: MemTable,
    send: FakeSend,
    *,
    on_dropped=None,
    on_retry=None,
    shrink_dead_letter=None,
    on_oversized=None,
    **limits,
) -> Committer:
    events = CommitEvents()
    if on_oversized is not None:
        events.oversized = on_oversized
    publisher = Publisher(send, FAST, on_dropped=on_dropped, on_retry=on_retry, shrink_dead_letter=shrink_dead_letter)
    return Committer(table, publisher, CommitLimits(**limits), events)


# -- apply_batch: pure ---------------------------------------------------------------------------


def test_apply_batch_verdicts_dead_letters_and_one_write_per_run():
    records = loop_records(4) + [Rec("ev", 0, 8, b"x", b"{not json"), Rec("ev", 1, 0, b"r2", call(0, "r2"))]
    res = apply_batch(records, lambda p, k: None, ENABLED, LIMITS)
    topics = [o.topic for o in res.outgoing]
    # critical 3 -> the 4th identical call is blocked; warning at count 2 is below the bucket of 10
    verdicts = [json.loads(o.value) for o in res.outgoing if o.topic == "ctl"]
    assert [v["action"] for v in verdicts] == ["block"]
    assert verdicts[0]["verdict_id"] == "ev:0:6:0"
    assert topics.count("dlq") == 1
    dead = msgspec.json.decode(next(o.value for o in res.outgoing if o.topic == "dlq"), type=DeadLetter)
    assert dead.reason == "bad_json" and dead.raw == b"{not json" and dead.offset == 8
    assert len(res.writes) == 2  # one value per touched run, whatever the number of its events
    assert res.positions == {0: 8, 1: 0}
    assert res.counts.types["tool_call"] == 5 and res.counts.dead["bad_json"] == 1


def test_offset_guard_skips_what_the_stored_value_already_applied():
    first = apply_batch(loop_records(2), lambda p, k: None, ENABLED, LIMITS)
    ((slot, value),) = first.writes.items()
    assert value.offset == 3
    replay = apply_batch(loop_records(3), lambda p, k: value if (p, k) == slot else None, ENABLED, LIMITS)
    assert replay.counts.duplicates == 4  # offsets 0..3 were applied before
    assert replay.writes[slot].offset == 5


def test_gated_call_gets_allow_and_engine_error_is_dead_lettered(monkeypatch):
    res = apply_batch([Rec("ev", 0, 0, b"r1", call(0, gated=True))], lambda p, k: None, ENABLED, LIMITS)
    (out,) = res.outgoing
    assert json.loads(out.value)["action"] == "allow" and out.event_ts is None

    import loopwarden.detection.decision as decision

    def boom(*a, **k):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(decision, "step", boom)  # a bug in the engine, inside the event's decision
    res = apply_batch([Rec("ev", 0, 1, b"r1", call(1))], lambda p, k: None, ENABLED, LIMITS)
    (out,) = res.outgoing
    assert out.topic == "dlq" and json.loads(out.value)["reason"] == "engine_error"
    assert not res.writes  # nothing applied: the run's value stays as it was


# -- Committer: the order of effects --------------------------------------------------------------


async def test_deliveries_before_state_and_state_before_ack():
    table = MemTable()
    send = FakeSend(table.log, auto=False)
    c = committer(table, send)
    res = apply_batch(loop_records(4), c.read, ENABLED, LIMITS)
    done = await c.submit(res)
    await asyncio.sleep(0.01)
    assert not done.done() and table.data == {}  # verdict not delivered: no state, no ack
    send.deliver_all()
    await done
    assert table.log == ["delivered", "write:1"]


async def test_pending_values_are_read_by_the_next_batch_before_they_are_durable():
    table = MemTable()
    send = FakeSend(table.log, auto=False)
    c = committer(table, send)
    b1 = await c.submit(apply_batch(loop_records(2), c.read, ENABLED, LIMITS))
    b2 = await c.submit(apply_batch(loop_records(2, start_offset=4), c.read, ENABLED, LIMITS))
    # batch 2 saw batch 1's calls although nothing is in the table yet: the 4th call is blocked
    assert [json.loads(v)["action"] for t, _k, v in send.sent if t == "ctl"] == ["block"]
    assert table.data == {}
    send.deliver_all()
    await b1
    await b2
    (raw,) = table.data.values()
    assert decode_value(raw).offset == 7
    assert c.pending == {}


async def test_batches_complete_in_order_and_a_failed_write_fails_the_later_batch_too():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send)
    table.fail_next_write = True
    b1 = await c.submit(apply_batch(loop_records(1), c.read, ENABLED, LIMITS))
    b2 = await c.submit(apply_batch(loop_records(1, start_offset=2), c.read, ENABLED, LIMITS))
    with pytest.raises(RuntimeError):
        await b1
    with pytest.raises(RuntimeError):
        await b2  # never acked past a batch that is not durable
    assert table.data == {}


async def test_inflight_bound_waits_for_the_oldest_batch():
    table = MemTable()
    send = FakeSend(table.log, auto=False)
    c = committer(table, send, max_inflight=2)
    futures = [
        await c.submit(apply_batch([Rec("ev", 0, i, b"r", call(i, "r", gated=True))], c.read, ENABLED, LIMITS))
        for i in range(2)
    ]
    third = asyncio.ensure_future(
        c.submit(apply_batch([Rec("ev", 0, 2, b"r", call(2, "r", gated=True))], c.read, ENABLED, LIMITS))
    )
    await asyncio.sleep(0.02)
    assert not third.done()  # three in flight > 2: submit blocks until the oldest is durable
    send.deliver_all()
    await asyncio.gather(*futures)
    await asyncio.wait_for(third, 1)
    send.deliver_all()
    await third.result()


async def test_transient_publish_failure_is_retried_and_the_batch_waits():
    table = MemTable()
    send = FakeSend(table.log)
    retries = []
    c = committer(table, send, on_retry=lambda out, exc: retries.append(type(exc).__name__))
    send.fail_delivery = [KafkaConnectionError(), KafkaConnectionError()]
    done = await c.submit(apply_batch(loop_records(4), c.read, ENABLED, LIMITS))
    await asyncio.wait_for(done, 2)
    assert retries == ["KafkaConnectionError", "KafkaConnectionError"]
    assert [t for t, _k, _v in send.sent] == ["ctl", "ctl", "ctl"]  # the same verdict, resent
    assert table.log[-1] == "write:1"


async def test_unpublishable_record_is_reported_and_skipped_not_retried_forever():
    table = MemTable()
    send = FakeSend(table.log)
    dropped = []
    c = committer(table, send, on_dropped=lambda out, exc: dropped.append(out.source))
    send.raise_on_send = [MessageSizeTooLargeError()] * 3
    done = await c.submit(apply_batch(loop_records(4), c.read, ENABLED, LIMITS))
    await asyncio.wait_for(done, 2)
    assert dropped == ["ev:0:6"]
    assert table.log == ["write:1"]  # the stream goes on: state written, batch acked


async def test_dead_letter_too_large_is_resent_without_its_raw_bytes():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, shrink_dead_letter=without_raw)
    send.raise_on_send = [MessageSizeTooLargeError()]
    done = await c.submit(apply_batch([Rec("ev", 0, 0, b"k", b"x" * 5000)], c.read, ENABLED, LIMITS))
    await asyncio.wait_for(done, 2)
    ((topic, key, value),) = send.sent
    letter = msgspec.json.decode(value, type=DeadLetter)
    assert topic == "dlq" and key == b"k" and letter.raw == b"" and "5000 bytes" in letter.detail
    assert letter.reason == "bad_json" and letter.offset == 0


# -- Committer: state flushes that span batches ---------------------------------------------------


async def test_a_flush_writes_each_run_once_for_all_batches_that_touched_it():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, flush_interval=0.05)
    b1 = await c.submit(apply_batch(loop_records(1), c.read, ENABLED, LIMITS))
    b2 = await c.submit(apply_batch(loop_records(1, start_offset=2), c.read, ENABLED, LIMITS))
    await asyncio.gather(b1, b2)
    assert [entry for entry in table.log if entry.startswith("write")] == ["write:1"]  # not one per batch
    (raw,) = table.data.values()
    assert decode_value(raw).offset == 3  # the later batch's value
    assert c.pending == {}


async def test_verdicts_go_out_at_once_and_the_ack_waits_for_the_flush():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, flush_interval=0.2)
    done = await c.submit(apply_batch([Rec("ev", 0, 0, b"r", call(0, "r", gated=True))], c.read, ENABLED, LIMITS))
    await asyncio.sleep(0.05)
    assert [t for t, _k, _v in send.sent] == ["ctl"] and table.log == ["delivered:ctl"]  # the allow is out
    assert not done.done() and table.data == {}  # the state is not written yet: not acked
    await asyncio.wait_for(done, 1)
    assert table.log == ["delivered:ctl", "write:1"]


async def test_flush_now_writes_the_waiting_flush_at_once_and_always_keeps_doing_so():
    # A stopping worker waits until every batch is durable: with a 60 s flush interval it would
    # wait a minute. flush_now() lets the waiting flush go; always=True (the worker's on_stop)
    # lets every later flush go at once too, while a plain flush_now() hurries one flush only.
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, flush_interval=60)
    first = await c.submit(apply_batch([Rec("ev", 0, 0, b"r", call(0, "r"))], c.read, ENABLED, LIMITS))
    await asyncio.sleep(0.05)
    assert not first.done()
    c.flush_now()
    await asyncio.wait_for(first, 2)
    second = await c.submit(apply_batch([Rec("ev", 0, 1, b"r", call(1, "r"))], c.read, ENABLED, LIMITS))
    await asyncio.sleep(0.1)
    assert not second.done()  # hurried once: this flush waits for its interval again
    c.flush_now(always=True)
    await asyncio.wait_for(second, 2)
    third = await c.submit(apply_batch([Rec("ev", 0, 2, b"r", call(2, "r"))], c.read, ENABLED, LIMITS))
    await asyncio.wait_for(third, 2)  # stopping: no more waiting
    assert table.log.count("write:1") == 3


async def test_batches_waiting_for_a_flush_do_not_count_against_the_inflight_bound():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, max_inflight=1, flush_interval=0.5)
    futures = []
    for i in range(4):  # delivered at once: each only waits for the flush, so submit never blocks
        futures.append(
            await asyncio.wait_for(
                c.submit(apply_batch([Rec("ev", 0, i, b"r", call(i, "r"))], c.read, ENABLED, LIMITS)), 0.3
            )
        )
    assert not any(f.done() for f in futures)
    await asyncio.wait_for(asyncio.gather(*futures), 2)
    assert table.log.count("write:1") == 1


async def test_a_failed_flush_fails_its_batches_and_every_later_one():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, flush_interval=0.02)
    table.fail_next_write = True
    b1 = await c.submit(apply_batch(loop_records(1), c.read, ENABLED, LIMITS))
    await asyncio.sleep(0.1)  # the first flush fails
    b2 = await c.submit(apply_batch(loop_records(1, start_offset=2, run="r2"), c.read, ENABLED, LIMITS))
    for fut in (b1, b2):
        with pytest.raises(RuntimeError):
            await fut
    assert table.data == {}  # r2's later flush did not land over r1's lost one


async def test_batches_not_yet_flushed_are_bounded_by_their_records():
    table = MemTable()
    send = FakeSend(table.log)
    c = committer(table, send, flush_interval=0.3, max_unflushed=5)

    def batch(i):
        return apply_batch(
            [Rec("ev", 0, 2 * i, b"r", call(i, "r")), Rec("ev", 0, 2 * i + 1, b"r", result(i, "r"))],
            c.read,
            ENABLED,
            LIMITS,
        )

    first = [await asyncio.wait_for(c.submit(batch(i)), 0.2) for i in range(2)]  # 4 records: room left
    third = asyncio.ensure_future(c.submit(batch(2)))  # 6 > 5: waits for the oldest to be durable
    await asyncio.sleep(0.1)
    assert not third.done() and not any(f.done() for f in first)
    await asyncio.wait_for(third, 2)
    assert all(f.done() for f in first)
    await asyncio.wait_for(third.result(), 2)


def test_step_time_is_sampled_across_batches_of_any_size():
    """One event in 8 is timed, however the events come: one-event batches (low traffic) too."""
    from loopwarden.worker.metrics import Metrics
    from loopwarden.worker.processor import RunProcessor
    from loopwarden.worker.settings import Settings
    from tests.support.helpers import MemRunTable

    metrics = Metrics()

    async def go():
        proc = RunProcessor(Settings(state_flush_interval=0.0), metrics, MemRunTable({}), None, lambda: FleetConfig())
        for i in range(24):  # healthy calls, nothing to publish
            await (await proc.process([Rec("ev", 0, i, b"r1", call(i))]))

    asyncio.run(go())
    count = next(s.value for s in metrics.step_seconds.collect()[0].samples if s.name.endswith("_count"))
    assert count == 3


async def test_a_run_value_larger_than_the_changelog_accepts_resets_that_run_alone():
    """Issue 23: a run whose state outgrew the changelog's record size was sent anyway and the failed
    flush stopped the worker (and every worker replaying it). Now that run's state is reset before it is
    stored, the other runs' states are written as usual, and the reset is reported."""
    table = MemTable()
    send = FakeSend(table.log)
    oversized: list[tuple[tuple[int, bytes], int]] = []
    c = committer(table, send, max_value_bytes=600, on_oversized=lambda slot, size: oversized.append((slot, size)))
    records = loop_records(2, run="big") + loop_records(1, start_offset=10, run="ok")
    res = apply_batch(records, c.read, ENABLED, LIMITS)
    sizes = {slot: len(value) for slot, value in _encoded(res).items()}
    big = next(slot for slot in sizes if b"big" in slot[1])
    ok = next(slot for slot in sizes if b"ok" in slot[1])
    c.max_value_bytes = sizes[ok] + len(ok[1]) + 1  # the small run fits, the bigger one does not
    assert sizes[big] + len(big[1]) > c.max_value_bytes
    await (await c.submit(res))
    assert [slot for slot, _ in oversized] == [big]
    reset = decode_value(table.data[big])
    assert reset.state is None and reset.offset == 3  # the offset stays: its events are not applied twice
    assert decode_value(table.data[ok]).state is not None
    # the run goes on afresh: its next events are applied to an empty state
    nxt = apply_batch(loop_records(1, start_offset=20, run="big"), c.read, ENABLED, LIMITS)
    assert nxt.writes[big].state is not None and len(nxt.writes[big].state.history) == 1


def _encoded(res) -> dict:
    from loopwarden.worker.runcodec import encode_value

    return {slot: encode_value(value) for slot, value in res.writes.items() if value is not None}


def test_the_worker_counts_what_its_committer_reports():
    """The processor hands the committer one events object (CountedCommits): a batch made durable
    counts its events, an oversized run and a stored value that cannot be read are counted."""
    from loopwarden.worker.metrics import Metrics
    from loopwarden.worker.processor import RunProcessor
    from loopwarden.worker.settings import Settings
    from tests.support.helpers import MemRunTable

    metrics = Metrics()
    table = MemRunTable({(0, b"bad"): b"\xffnot a run value"})

    async def send(topic, key, value):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def go():
        proc = RunProcessor(Settings(max_message_bytes=4096 + 64), metrics, table, send, lambda: ENABLED)
        assert proc.committer.read(0, b"bad") is None
        await asyncio.wait_for(await proc.process(loop_records(2)), 5)

    asyncio.run(go())
    assert metrics.unreadable_runs.labels("undecodable")._value.get() == 1
    assert metrics.oversized_runs._value.get() == 1
    assert metrics.events.labels("tool_call")._value.get() == 2
