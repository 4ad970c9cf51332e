"""Publishing a client's events: the outbox, its producer, and what each outcome counts.

Every event of every run leaves through :meth:`Publisher.put`: it first tells
the run which call it made (a verdict must name one of the run's own calls,
:meth:`~loopwarden.runner.state.RunState.owns`), then queues the encoded
event, keyed by run key, in the :class:`~loopwarden.runner.outbox.Outbox`,
which never waits for the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from loopwarden.kafka.connection import kafka_auth
from loopwarden.runner.outbox import Outbox, OutboxEvents, OutboxLimits
from loopwarden.runner.registry import RunRegistry
from loopwarden.runner.settings import ClientSettings
from loopwarden.runner.state import ClientStats
from loopwarden.runner.wire import Ident
from loopwarden.schemas.events import Event, encode_event

log = logging.getLogger(__name__)


class CountedSends(OutboxEvents):
    """The outbox's reports, counted in the client's :class:`ClientStats`."""

    def __init__(self, stats: ClientStats, on_down: Callable[[], None]) -> None:
        self.stats = stats
        self.on_down = on_down

    def sent(self) -> None:
        self.stats.events_sent += 1

    def dropped(self) -> None:
        self.stats.events_dropped += 1

    def failed(self) -> None:
        self.stats.send_errors += 1

    def too_large(self) -> None:
        self.stats.events_too_large += 1

    def refused(self) -> None:
        self.stats.events_refused += 1

    def down(self) -> None:
        self.stats.disconnects += 1
        self.on_down()


class Publisher:
    """The client's one outbox (None before ``start`` and after ``close``)."""

    def __init__(self, settings: ClientSettings, stats: ClientStats, registry: RunRegistry) -> None:
        self.settings = settings
        self.stats = stats
        self.registry = registry
        self.outbox: Outbox | None = None

    def make_producer(self) -> AIOKafkaProducer:
        s = self.settings
        return AIOKafkaProducer(
            bootstrap_servers=s.servers,
            linger_ms=0,  # the outbox lingers (``linger_ms``) and hands a whole batch over in one step
            acks=1,
            enable_idempotence=False,
            request_timeout_ms=s.request_timeout_ms,
            max_request_size=max(1 << 20, s.max_event_bytes + 65536),  # the event, its key and the batch framing
            client_id=f"{s.client_id}-events",
            **kafka_auth(s),
        )

    def start(self, on_down: Callable[[], None]) -> Outbox:
        """Make the outbox and start it connecting; ``on_down``: the producer lost the broker."""
        s = self.settings
        limits = OutboxLimits(
            max_buffered=s.max_buffered,
            send_timeout=s.request_timeout_ms / 1000,
            close_timeout=s.close_timeout,
            backoff_max=s.reconnect_backoff_max,
            log_interval=s.outage_log_interval,
            max_buffered_bytes=s.max_buffered_bytes,
            max_event_bytes=s.max_event_bytes,
            linger=(s.linger_ms or 0) / 1000,
        )
        self.outbox = Outbox(self.make_producer, limits, CountedSends(self.stats, on_down))
        self.outbox.start()
        return self.outbox

    async def close(self) -> None:
        """Flush what is buffered, bounded by the request timeout plus ``close_timeout``."""
        outbox, self.outbox = self.outbox, None
        if outbox is not None:
            limit = self.settings.request_timeout_ms / 1000 + self.settings.close_timeout
            left = await outbox.close(limit)
            if left:
                log.warning("%d loopwarden events not delivered at close", left)

    def put(self, event: Event, key: Ident) -> bool:
        """Queue one event; False when not queued (not started: ``send_errors``; buffer full)."""
        call_id = getattr(event, "tool_call_id", None)
        if call_id:
            entry = self.registry.runs.get(key)
            if entry is not None:  # a verdict must name one of the run's own calls (RunState.owns)
                entry.state.made(call_id, event.tool_name)
        outbox = self.outbox
        if outbox is None:
            self.stats.send_errors += 1
            return False
        return outbox.put(self.settings.events_topic, key[0].encode(), encode_event(event))

    @property
    def connected(self) -> bool:
        return self.outbox is not None and self.outbox.connected.is_set()

    @property
    def buffered(self) -> int:
        return len(self.outbox) if self.outbox is not None else 0
