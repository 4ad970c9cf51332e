"""The failover settings reach Faust and aiokafka: standby replicas, static membership, the stall check.

Static membership only works if the id reaches the broker in every JoinGroup; aiokafka drops it
silently below JoinGroup v5, so the request is built here as aiokafka's coordinator builds it.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

from loopwarden.worker.app import create_app
from loopwarden.worker.settings import from_sources


def _app(tmp_path, environ: dict[str, str], **given):
    return create_app(from_sources({"data_dir": str(tmp_path / "data"), **given}, environ=environ))[0]


def test_defaults_one_standby_no_static_membership_faust_stall_timeout(tmp_path):
    app = _app(tmp_path, {})
    assert app.conf.table_standby_replicas == 1
    assert app.conf.consumer_group_instance_id is None
    assert app.conf.stream_processing_timeout == 300.0


def test_variables_reach_faust(tmp_path):
    app = _app(
        tmp_path,
        {
            "LOOPWARDEN_STANDBY_REPLICAS": "0",
            "LOOPWARDEN_GROUP_INSTANCE_ID": "loopwarden-0",
            "LOOPWARDEN_PARTITION_STALL_TIMEOUT": "12.5",
        },
    )
    assert app.conf.table_standby_replicas == 0
    assert app.conf.consumer_group_instance_id == "loopwarden-0"
    assert app.conf.stream_processing_timeout == 12.5


def test_flags_win_over_variables_and_an_empty_id_is_off(tmp_path):
    app = _app(tmp_path, {"LOOPWARDEN_STANDBY_REPLICAS": "0"}, standby_replicas=2, group_instance_id="  ")
    assert app.conf.table_standby_replicas == 2
    assert app.conf.consumer_group_instance_id is None


def test_negative_standbys_are_refused(tmp_path):
    with pytest.raises(ValueError, match="standby_replicas"):
        from_sources({"standby_replicas": -1}, environ={})


def test_the_instance_id_reaches_aiokafkas_join_group_request(tmp_path):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance
    from aiokafka.protocol.group import JoinGroupRequest, JoinGroupRequest_v5

    app = _app(tmp_path, {}, group_instance_id="loopwarden-0")

    async def built():
        consumer = app.consumer._thread._create_worker_consumer(app.transport)  # the client Faust starts
        try:
            return consumer._group_instance_id
        finally:
            await consumer.stop()

    instance_id = asyncio.run(built())
    assert instance_id == "loopwarden-0"
    # aiokafka hands it to its group coordinator at start, which puts it in each JoinGroup it sends.
    assert "group_instance_id=self._group_instance_id" in inspect.getsource(AIOKafkaConsumer.start)
    assert "self._coordinator._group_instance_id" in inspect.getsource(CoordinatorGroupRebalance)
    request = JoinGroupRequest("g", 10_000, 10_000, "", instance_id, "consumer", [])
    assert request.build(JoinGroupRequest_v5).group_instance_id == "loopwarden-0"
