"""Live config overrides from the compacted config topic, on every worker.

Each worker reads the whole topic with its own group-less consumer (a
consumer group would give each record to one worker only), from the start,
and folds every record into its :class:`FleetConfig`: key = agent id or
``*`` (global block), value = a ``loopDetection`` block as JSON/JSON5, or a
document-shaped record ``{"tools": {"loopDetection": ...}, "loopwarden": ...}``
(either part may be absent; a record without ``loopwarden`` leaves the
extension settings as they were), null = delete.
``loaded`` is set once the topic has been read up to the high watermarks
of the first fetch (Fetch high watermarks are right on Tansu, end offsets
are not), so processing starts with the overrides already in force.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from loopwarden.kafka.topics import assign_from_start
from loopwarden.schemas.config import ConfigError, FleetConfig, parse_config_text
from loopwarden.schemas.config_check import record_warnings

log = logging.getLogger(__name__)


def block_of(value: bytes | None) -> tuple[dict | None, dict | None]:
    """(``loopDetection`` block, ``loopwarden`` block) of a config record; ``(None, None)`` deletes.

    Raises ConfigError for a record that is not an object or null.
    """
    if value is None:
        return None, None
    doc = parse_config_text(value.decode("utf-8"))
    if doc is None:
        return None, None
    if not isinstance(doc, dict):
        raise ConfigError("config record must be a JSON object or null")
    if "tools" not in doc and "loopwarden" not in doc:
        return doc, None  # a bare loopDetection block
    tools = doc.get("tools")
    block = tools.get("loopDetection") if isinstance(tools, dict) else None
    ext = doc.get("loopwarden")
    return (block if isinstance(block, dict) else None), (ext if isinstance(ext, dict) else None)


class ConfigFeed:
    def __init__(
        self,
        base: FleetConfig,
        bootstrap: str,
        topic: str,
        on_update: Callable[[], Any] | None = None,
        client_kwargs: dict | None = None,
    ) -> None:
        self.fleet = base
        self.client_kwargs = client_kwargs or {}  # TLS/SASL (loopwarden.kafka.connection.kafka_auth)
        self.bootstrap = bootstrap
        self.topic = topic
        self.on_update = on_update
        self.loaded = asyncio.Event()
        self.applied = 0

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        if key is None:
            log.warning("config record without key ignored")
            return False
        try:
            block, ext = block_of(value)
        except (ConfigError, UnicodeDecodeError) as exc:
            log.warning("config record for %r ignored: %s", key, exc)
            return False
        name = key.decode("utf-8", "replace")
        for text in record_warnings(block, ext, name):  # as `loopwarden config check` words them
            log.warning("config topic: %s", text)
        self.fleet = self.fleet.with_override(name, block, ext)
        self.applied += 1
        if self.on_update is not None:
            self.on_update()
        return True

    async def run(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            client_id="loopwarden-config",
            **self.client_kwargs,
        )
        await consumer.start()
        try:
            tps = await assign_from_start(consumer, self.topic)
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=1000)
                for records in batches.values():
                    for record in records:
                        self.apply(record.key, record.value)
                if not self.loaded.is_set() and await self._caught_up(consumer, tps):
                    self.loaded.set()
        finally:
            await consumer.stop()

    @staticmethod
    async def _caught_up(consumer: Any, tps: list) -> bool:
        for tp in tps:
            high = consumer.highwater(tp)
            if high is None or await consumer.position(tp) < high:
                return False
        return True
