"""Topic administration: the worker's topics, created when missing.

The events, control, shadow and dead-letter topics get the configured
partition count; the config topic is compacted with one partition (every
worker reads all of it); the dead-letter topic's ``max.message.bytes`` fits a dead letter
of the largest event record (base64 of the bytes plus the JSON around it).
On an existing cluster an operator creates them the same way
(deploy/OPERATIONS.md, "Running against an existing Kafka cluster").
"""

from __future__ import annotations

from typing import Any

from loopwarden.kafka.connection import kafka_auth


async def ensure_topics(settings: Any) -> list[str]:
    """Create the topics of schemas/WIRE.md when missing (config topic compacted); returns those created."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    s = settings
    wanted = {
        s.events_topic: (s.partitions, {}),
        s.control_topic: (s.partitions, {}),
        s.shadow_topic: (s.partitions, {}),
        s.config_topic: (1, {"cleanup.policy": "compact"}),
        s.dead_letter_topic: (s.partitions, {"max.message.bytes": str(s.dead_letter_max_bytes)}),
        s.incidents_topic: (s.partitions, {}),
        **{name: (s.fleet_partitions, {}) for name in s.fleet_topics},  # repartition topics of loopwarden.fleet
    }
    admin = AIOKafkaAdminClient(bootstrap_servers=s.bootstrap, client_id="loopwarden-admin", **kafka_auth(s))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(name, n, s.replicas, topic_configs=cfg)
            for name, (n, cfg) in wanted.items()
            if name not in existing
        ]
        created = []
        for topic in missing:
            try:
                await admin.create_topics([topic])
                created.append(topic.name)
            except TopicAlreadyExistsError:
                pass
        return created
    finally:
        await admin.close()
