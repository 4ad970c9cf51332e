"""Every private Faust/mode/aiokafka name that streams/internals relies on still exists.

These fail loudly on an upgrade that renames or removes one, instead of the
worker failing at run time (or silently losing the fix it carried).
"""

from __future__ import annotations

import inspect

import pytest


def test_faust_streams_current_event_is_a_contextvar():
    import contextvars

    from faust.streams import _current_event

    assert isinstance(_current_event, contextvars.ContextVar)


@pytest.mark.parametrize("name", ["_db_for_partition", "_dbs", "_visible_items", "set_persisted_offset"])
def test_rocksdb_store_internals(name):
    from faust.stores.rocksdb import Store

    store_attrs = set(dir(Store))
    if name == "_dbs":  # an instance attribute: set in __init__
        assert "_dbs" in inspect.getsource(Store.__init__)
    else:
        assert name in store_attrs


@pytest.mark.parametrize("name", ["_create_worker_consumer", "_highwaters", "on_thread_stop"])
def test_consumer_thread_internals(name):
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    assert callable(getattr(AIOKafkaConsumerThread, name))


@pytest.mark.parametrize(
    "name",
    [
        "_drain_messages",
        "_add_gap",
        "_new_consumer_thread",
        "ack",
        "crash",
        "_is_changelog_tp",
        "pause_partitions",
        "resume_partitions",
    ],
)
def test_faust_consumer_methods(name):
    from faust.transport.drivers.aiokafka import Consumer

    assert callable(getattr(Consumer, name))


def test_faust_consumer_bookkeeping_attributes_are_set_in_init():
    from faust.transport.consumer import Consumer

    source = inspect.getsource(Consumer.__init__)
    for name in (
        "_read_offset",
        "_unacked_messages",
        "_commit_every",
        "_acked",
        "_acked_index",
        "_committed_offset",
        "_waiting_for_ack",
    ):
        assert f"self.{name}" in source, name
    assert "_n_acked" in Consumer.__annotations__  # a class-level counter, incremented by ack()
    assert "self._n_acked += 1" in inspect.getsource(Consumer.ack)
    # The bulk ack (test_consumer_acks.py compares it with ack()) takes ack()'s lock and wakes its waiters.
    from faust.types.tuples import ack_lock
    from mode.utils.futures import notify

    assert callable(notify) and hasattr(ack_lock, "acquire")
    ack = inspect.getsource(Consumer.ack)
    assert "with ack_lock:" in ack and "notify(self._waiting_for_ack)" in ack


def test_drain_messages_still_takes_the_fetcher():
    from faust.transport.consumer import Consumer

    assert list(inspect.signature(Consumer._drain_messages).parameters) == ["self", "fetcher"]


def test_aiokafka_consumer_fetch_wait_and_client():
    from aiokafka import AIOKafkaConsumer

    source = inspect.getsource(AIOKafkaConsumer.__init__)
    assert "self._fetch_max_wait_ms" in source and "self._client" in source
    start = inspect.getsource(AIOKafkaConsumer.start)
    assert "self._fetch_max_wait_ms" in start  # read when the Fetcher is built
    from aiokafka.client import AIOKafkaClient

    assert callable(AIOKafkaClient.fetch_all_metadata) and callable(AIOKafkaClient.close)


def test_aiokafka_fetcher_pending_tasks():
    from aiokafka.consumer.fetcher import Fetcher

    assert "self._pending_tasks" in inspect.getsource(Fetcher.__init__)


def test_mode_worker_setup_logging():
    import faust

    assert callable(faust.Worker._setup_logging)


def test_our_transport_is_registered_with_faust():
    from faust.transport import by_url

    from loopwarden.internals.faust_consumer import Transport

    assert by_url("loopwarden://127.0.0.1:9092") is Transport


def test_end_offset_probe_uses_the_worker_security_settings():
    from loopwarden.internals.faust_consumer import probe_kwargs
    from loopwarden.worker.settings import Settings

    s = Settings(
        broker="kafka://b1:9093,kafka://b2:9093",
        security_protocol="SASL_PLAINTEXT",
        sasl_username="u",
        sasl_password="p",
    )
    kw = probe_kwargs(s)
    assert kw["bootstrap_servers"] == ["b1:9093", "b2:9093"]
    assert kw["security_protocol"] == "SASL_PLAINTEXT" and kw["sasl_plain_username"] == "u"


def test_per_fetch_hand_over_internals():
    """The batch hand-over reads one fetch at a time through these Faust internals."""
    from faust.transport.consumer import Consumer

    assert callable(Consumer._wait_next_records) and callable(Consumer._to_message)
    assert "_buffered_partitions" in inspect.getsource(Consumer)


def test_unacked_messages_is_only_an_in_flight_test():
    """The batch hand-over puts one message per batch in Faust's unacked set, not every record:
    that holds only while Faust reads the set just as "is anything unacked?" (the rebalance wait),
    drops acked messages itself, and otherwise only adds to it (its stream path, not ours)."""
    import pathlib
    import re

    import faust
    from faust.transport.consumer import Consumer

    def code(path: pathlib.Path) -> str:
        return "\n".join(
            line for line in path.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("#")
        )

    files = list(pathlib.Path(faust.__file__).parent.rglob("*.py"))
    assert [p.name for p in files if "_unacked_messages" in code(p)] == ["consumer.py"]
    # The public accessor is only used to add to the set (Stream, for records of stream topics).
    users = {p.name: re.findall(r"\bunacked\.\w+", code(p)) for p in files if re.search(r"\.unacked\b", code(p))}
    assert users == {"streams.py": ["unacked.add"]}, users
    assert len(re.findall(r"self\._unacked_messages\b", inspect.getsource(Consumer))) == 10
    assert "while not self.should_stop and self._unacked_messages" in inspect.getsource(Consumer.wait_empty)
    assert "message.acked" in inspect.getsource(Consumer._clean_unacked_messages)
    assert "self._unacked_messages.discard(message)" in inspect.getsource(Consumer.ack)


def test_consumer_thread_client_and_loop_for_the_fetch_pause_mirror():
    from faust.transport.consumer import ThreadDelegateConsumer
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    assert "_consumer" in AIOKafkaConsumerThread.__annotations__  # the aiokafka consumer, None until started
    assert "self._thread = " in inspect.getsource(ThreadDelegateConsumer.__init__)
    from mode.threads import ServiceThread

    assert "self.thread_loop = " in inspect.getsource(ServiceThread.__init__)


def test_faust_pause_is_still_only_bookkeeping():
    """Faust's pause touches its own sets only; the mirror into aiokafka exists because of that."""
    from faust.transport.consumer import Consumer

    source = inspect.getsource(Consumer.pause_partitions)
    assert "_paused_partitions" in source and "_thread" not in source


def test_aiokafka_record_parsing_internals_the_parse_guard_uses():
    """aiokafka_records: the fetcher's MemoryRecords name, the Python record set's next slice, the
    Python batch parser's state; aiokafka_client: a producer batch's buffer (dev tools)."""
    from aiokafka.consumer import fetcher
    from aiokafka.producer.message_accumulator import BatchBuilder
    from aiokafka.record.default_records import _DefaultRecordBatchPy
    from aiokafka.record.memory_records import _MemoryRecordsPy

    assert "MemoryRecords(" in inspect.getsource(fetcher.Fetcher._proc_fetch_request)
    assert hasattr(fetcher, "MemoryRecords")
    assert "_next_slice" in inspect.getsource(_MemoryRecordsPy.next_batch)
    for name in ("_maybe_uncompress", "_read_msg"):
        assert callable(getattr(_DefaultRecordBatchPy, name))
    init = inspect.getsource(_DefaultRecordBatchPy.__init__)
    for name in ("_buffer", "_pos", "_next_record_index", "_num_records"):
        assert f"self.{name}" in init
    assert "self._buffer" in inspect.getsource(BatchBuilder._build)
    assert "self._relative_offset" in inspect.getsource(BatchBuilder.record_count)


def test_the_batch_readers_call_codecs_by_module_names_the_guard_can_replace():
    """aiokafka_records.install() bounds decompression by replacing these names in each reader
    module (the C parser looks its globals up at call time: a spy put there is called)."""
    import aiokafka.record._crecords.default_records as c_default
    import aiokafka.record._crecords.legacy_records as c_legacy
    import aiokafka.record.default_records as py_default
    import aiokafka.record.legacy_records as py_legacy

    from loopwarden.devtools.rawrecords import encode_batch

    for module in (c_default, py_default):
        assert {"gzip_decode", "snappy_decode", "lz4_decode", "zstd_decode"} <= set(vars(module))
    for module in (c_legacy, py_legacy):
        assert {"gzip_decode", "snappy_decode", "lz4_decode"} <= set(vars(module))
    calls = []
    original = c_default.gzip_decode
    c_default.gzip_decode = lambda payload: calls.append(len(payload)) or original(payload)
    try:
        batch = c_default.DefaultRecordBatch(encode_batch([(b"k", b"v" * 100, [])], 1))
        assert [r.value for r in batch] == [b"v" * 100] and len(calls) == 1
    finally:
        c_default.gzip_decode = original


def test_the_stall_check_and_what_it_reads():
    """Faust's stall check is the consumer thread's ``verify_event_path``; a stream's progress is the
    monitor's ``stream_inbound_time`` (the batch route stamps it); the timeouts come from
    ``stream_processing_timeout``. Renamed, the check would go back to false alarms (or silence)."""
    from faust.sensors.monitor import Monitor
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    source = inspect.getsource(AIOKafkaConsumerThread.verify_event_path)
    assert "stream_inbound_time" in source and "_verify_aiokafka_event_path" in source
    assert "stream_processing_timeout" in inspect.getsource(AIOKafkaConsumerThread.__post_init__)
    assert "self.stream_inbound_time" in inspect.getsource(Monitor.__init__)


def test_the_fetcher_task_still_takes_a_cancellation_while_rebalancing_for_a_crash():
    """Why a stopping worker's drain swallows its cancellation (streams/internals/faust_consumer.py):
    Faust's fetcher task crashes on it when ``app.rebalancing`` and then wakes a supervisor it lacks."""
    from faust.transport.consumer import Fetcher

    source = inspect.getsource(Fetcher._fetcher.fun)  # a mode ServiceTask around the coroutine function
    assert "_drain_messages(self)" in source and "CancelledError" in source and "rebalancing" in source


def test_the_app_hands_the_consumer_a_typed_batch_route(tmp_path):
    """The worker app and our consumer meet at one named, typed hand-over (BatchRoute), not a tuple."""
    from loopwarden.internals.faust_consumer import BatchRoute, RoutesBatches, batch_route
    from loopwarden.worker.app import create_app
    from loopwarden.worker.settings import from_sources

    app, rt = create_app(from_sources({"data_dir": str(tmp_path / "fast")}, environ={}))
    assert isinstance(app, RoutesBatches)
    route = batch_route(app)
    assert isinstance(route, BatchRoute)
    assert route.topic == rt.settings.events_topic
    assert inspect.iscoroutinefunction(route.handler)
    slow, _ = create_app(from_sources({"data_dir": str(tmp_path / "slow"), "fast_path": False}, environ={}))
    assert batch_route(slow) is None  # Faust's per-record path
    assert batch_route(object()) is None

    class Untyped:
        batch_route = ("agent.events", route.handler)

    with pytest.raises(TypeError):
        batch_route(Untyped())
