"""The worker's record producer (verdicts, dead letters): its own connection, started on first use."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError

from loopwarden.devtools.broker import free_port
from loopwarden.kafka.producer import RecordProducer
from loopwarden.worker.settings import from_sources


def test_records_go_through_their_own_producer_not_the_changelogs(tmp_path):
    from loopwarden.worker.app import create_app

    app, rt = create_app(from_sources({"data_dir": str(tmp_path)}, environ={}))
    assert isinstance(app.record_producer, RecordProducer)
    assert rt.processor.committer.publisher.send == app.record_producer.send  # verdicts, dead letters, signals
    assert rt.table.send is not app.record_producer.send  # the changelog stays on Faust's producer
    assert app.record_producer.kwargs()["max_request_size"] == rt.settings.producer_max_request_size


def test_a_broker_that_is_down_fails_the_send_and_the_next_send_tries_again():
    settings = from_sources({"broker": f"kafka://127.0.0.1:{free_port('127.0.0.1')}"}, environ={})
    producer = RecordProducer(settings)

    async def go():
        for _ in range(2):  # each send starts afresh: the committer's retry is the reconnect
            with pytest.raises(KafkaConnectionError):
                await producer.send("agent.loop-control", b"k", b"{}")
            assert producer._producer is None
        await producer.stop()

    asyncio.run(go())
