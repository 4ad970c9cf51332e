"""Live config overrides from the compacted config topic, on every worker.

Each worker reads the whole topic with its own group-less consumer (a
consumer group would give each record to one worker only), from the start,
and folds every record into its :class:`FleetConfig`: key = agent id or
``*`` (global block), value = a ``loopDetection`` block as JSON/JSON5, or a
document-shaped record ``{"tools": {"loopDetection": ...}, "loopwarden": ...}``
(either part may be absent; a record without ``loopwarden`` leaves the
extension settings as they were), null = delete: the config file's blocks
for that key are in force again (for ``*`` too).
Each record is applied in place in O(1) (:meth:`FleetConfig.set_override`),
with a turn of the event loop every ``YIELD_EVERY`` records: 100k per-agent
records load in seconds (``loopwarden bench config``). Beyond
``MAX_AGENT_OVERRIDES`` agents with overrides a record for one more is
ignored, logged and counted.
``loaded`` is set once the topic has been read up to the high watermarks
of the first fetch (Fetch high watermarks are right on Tansu, end offsets
are not), so processing starts with the overrides already in force.
With a :class:`~loopwarden.kafka.signing.Verifier` (``config_keys``), a
record that is not signed by an operator's key is ignored and counted.
A record that cannot be applied is skipped and counted by reason in ``refused``
(``on_refused(reason)``), and the feed goes on: ``unreadable`` (the mark of a record
aiokafka could not parse, :mod:`loopwarden.kafka.records`), ``key_too_long`` (a key longer
than an agent id may be, ``MAX_ID_CHARS``: each key is kept in every worker's and runner's
memory), ``bad_record`` (not JSON/JSON5, not an object, nested deeper than ``MAX_DEPTH``).
The owner installs the parse guard (:func:`loopwarden.internals.aiokafka_records.install`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from loopwarden.kafka.records import unreadable
from loopwarden.kafka.signing import Headers, Verifier
from loopwarden.kafka.topics import assign_from_start
from loopwarden.schemas.config import MAX_AGENT_OVERRIDES, ConfigError, FleetConfig, parse_config_text
from loopwarden.schemas.config_check import record_warnings
from loopwarden.schemas.events import MAX_ID_CHARS

log = logging.getLogger(__name__)

YIELD_EVERY = 100  # records applied between turns of the event loop


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
        on_ignored: Callable[[], Any] | None = None,
        verifier: Verifier | None = None,
        on_rejected: Callable[[], Any] | None = None,
        on_refused: Callable[[str], Any] | None = None,
    ) -> None:
        self.fleet = base.copy()  # updated in place, record by record; the caller's object stays as it was
        self.on_ignored = on_ignored
        self.ignored = 0
        self.verifier = verifier
        self.on_rejected = on_rejected
        self.rejected = 0
        self.on_refused = on_refused
        self.refused: Counter[str] = Counter()  # reason -> records skipped (see the module docstring)
        self.client_kwargs = client_kwargs or {}  # TLS/SASL (loopwarden.kafka.connection.kafka_auth)
        self.bootstrap = bootstrap
        self.topic = topic
        self.on_update = on_update
        self.loaded = asyncio.Event()
        self.applied = 0

    def refuse(self, reason: str, key: bytes | None, why: object) -> bool:
        """Skip a record that cannot be applied: counted by ``reason``, logged (the first and every 1000th)."""
        self.refused[reason] += 1
        if self.on_refused is not None:
            self.on_refused(reason)
        if self.refused[reason] == 1 or self.refused[reason] % 1000 == 0:
            log.warning(
                "config record for %r skipped (%s, %d so far): %s",
                (key or b"")[:200],
                reason,
                self.refused[reason],
                str(why)[:300],
            )
        return False

    def apply(self, key: bytes | None, value: bytes | None, headers: Headers = None) -> bool:
        if (why := unreadable(key, value, headers)) is not None:
            return self.refuse("unreadable", key, why)
        if key is not None and (len(key) > 4 * MAX_ID_CHARS or len(key.decode("utf-8", "replace")) > MAX_ID_CHARS):
            return self.refuse("key_too_long", key[:200], f"{len(key)} bytes")
        if self.verifier is not None and not self.verifier.verify(self.topic, key, value, headers):
            self.rejected += 1
            if self.on_rejected is not None:
                self.on_rejected()
            if self.rejected == 1 or self.rejected % 1000 == 0:  # a flood of forgeries must not flood the log
                log.warning(
                    "config record for %r ignored: not signed by a config key (%d so far)",
                    (key or b"")[:200],
                    self.rejected,
                )
            return False
        if key is None:
            log.warning("config record without key ignored")
            return False
        try:
            block, ext = block_of(value)
        except (ConfigError, UnicodeDecodeError) as exc:
            return self.refuse("bad_record", key, exc)
        name = key.decode("utf-8", "replace")
        for text in record_warnings(block, ext, name):  # as `loopwarden config check` words them
            log.warning("config topic: %s", text)
        if not self.fleet.set_override(name, block, ext, delete=block is None and ext is None):
            self.ignored += 1
            if self.ignored == 1 or self.ignored % 1000 == 0:
                log.warning(
                    "config record for %r ignored: more than %d agents have overrides (%d records ignored so far)",
                    name[:200],
                    MAX_AGENT_OVERRIDES,
                    self.ignored,
                )
            if self.on_ignored is not None:
                self.on_ignored()
            return False
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
        try:
            await consumer.start()
            tps = await assign_from_start(consumer, self.topic)
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=1000)
                applied = 0
                for records in batches.values():
                    for record in records:
                        self.apply(record.key, record.value, record.headers)
                        applied += 1
                        if applied % YIELD_EVERY == 0:
                            await asyncio.sleep(0)  # a fetch of 1,000 records must not hold up the loop
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
