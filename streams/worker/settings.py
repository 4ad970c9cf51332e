"""Worker settings: one msgspec Struct, filled from CLI flags and ``LOOPWARDEN_*`` env vars.

Precedence: command-line flag, then environment variable, then default.
Every field is one flag (``--fetch-wait-ms``) and one variable
(``LOOPWARDEN_FETCH_WAIT_MS``); ``loopwarden worker --help`` lists both.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import msgspec

from loopwarden.kafka.connection import SecuritySettings, servers

ENV_PREFIX = "LOOPWARDEN_"

MISROUTED = ("dead_letter", "process")  # what the worker does with an event keyed other than by its run key

DEFAULT_TOOL_LABELS = (
    "exec,bash,process,read,write,edit,apply_patch,browser,web_fetch,web_search,"
    "message,sessions_send,sessions_spawn,image,canvas,nodes,cron,gateway,memory_search"
)


class Settings(SecuritySettings, kw_only=True):
    broker: str = "kafka://127.0.0.1:9092"
    app_id: str = "loopwarden"
    events_topic: str = "agent.events"
    control_topic: str = "agent.loop-control"
    shadow_topic: str = "agent.loop-shadow"
    config_topic: str = "agent.loop-config"
    dead_letter_topic: str = "loopwarden.dead-letter"
    incidents_topic: str = "agent.loop-incidents"
    partitions: int = 4
    fleet_partitions: int = 1
    replicas: int = 1
    data_dir: str = "./loopwarden-data"
    store: str = "rocksdb://"
    rocksdb_write_buffer_mb: int = 8
    rocksdb_block_cache_mb: int = 8
    config: str | None = None
    host: str = "127.0.0.1"
    port: int = 6066
    processing_guarantee: str = "at_least_once"
    fetch_wait_ms: int = 10
    linger_ms: int = 2
    batch_max: int = 2000
    batch_within: float = 0.005
    commit_interval: float = 1.0
    state_flush_interval: float = 0.5
    session_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    group_instance_id: str | None = None
    standby_replicas: int = 1
    partition_stall_timeout: float = 300.0
    max_event_bytes: int = 1_048_576
    max_message_bytes: int = 1_048_588
    max_depth: int = 64
    run_ttl: float = 3600.0
    ended_ttl: float = 120.0
    ack_timeout: float = 5.0  # a warn/block/abort verdict not acked within it counts as unacknowledged
    expire_interval: float = 30.0
    tool_labels: str = DEFAULT_TOOL_LABELS
    log_level: str = "info"  # says start, ready and stop; Faust's own lines from debug
    stall_timeout: float = 10.0
    unhealthy_exit_after: float = 30.0
    stall_exit_after: float = 60.0
    correct_end_offsets: bool = True
    fast_path: bool = True
    signing_key: str | None = None
    signing_key_file: str | None = None
    config_keys: str | None = None
    config_keys_file: str | None = None
    incident_keys: str | None = None
    incident_keys_file: str | None = None
    hash_key: str | None = None
    hash_key_file: str | None = None
    misrouted: str = "dead_letter"

    def __post_init__(self) -> None:
        if self.standby_replicas < 0:
            raise ValueError(f"standby_replicas must be 0 or more, not {self.standby_replicas}")
        if self.group_instance_id is not None and not self.group_instance_id.strip():
            self.group_instance_id = None  # an empty variable leaves static membership off
        if self.misrouted not in MISROUTED:
            raise ValueError(f"misrouted must be one of {', '.join(MISROUTED)}, not {self.misrouted!r}")

    @property
    def brokers(self) -> list[str]:
        return [b.strip() for b in self.broker.split(",") if b.strip()]

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` without the ``kafka://`` scheme, for plain aiokafka clients."""
        return ",".join(servers(self.brokers))

    @property
    def fleet_topics(self) -> tuple[str, str]:
        """The repartition topics of loopwarden.fleet, named from the app id (one pair per consumer group)."""
        return f"{self.app_id}-fleet-signatures", f"{self.app_id}-fleet-sessions"

    @property
    def dead_letter_max_bytes(self) -> int:
        """The largest dead letter: base64 of the largest input record plus the JSON around it."""
        return 4 * -(-self.max_message_bytes // 3) + 16_384

    @property
    def max_run_value_bytes(self) -> int:
        """The largest run value (key included) the worker writes: a changelog record must fit the topic
        (``max_message_bytes``, with room for the record's framing); a larger state is reset instead."""
        return self.max_message_bytes - 4096

    @property
    def producer_max_request_size(self) -> int:
        return self.dead_letter_max_bytes + 4096

    @property
    def rocksdb_options(self) -> dict[str, int]:
        """Options of every RocksDB table (Faust's ``Table(options=...)``). Faust's own block cache
        default is 2 GiB per partition: reads and the expiry sweep fill it, so without this bound
        resident memory grows with every wave of runs that comes and goes."""
        return {
            "write_buffer_size": self.rocksdb_write_buffer_mb << 20,
            "block_cache_size": self.rocksdb_block_cache_mb << 20,
        }

    @property
    def tool_label_set(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.tool_labels.split(",") if t.strip())


HELP: dict[str, str] = {
    "broker": "Kafka broker URL(s), comma-separated (kafka://host:port)",
    "app_id": "Faust app id = consumer group id; prefixes changelog topics",
    "events_topic": "input topic of agent events",
    "control_topic": "output topic of verdicts",
    "shadow_topic": "topic of shadowed detections (loopwarden.shadow): verdicts with shadow true, never enforced",
    "config_topic": "compacted topic of live config overrides (key agent id or *)",
    "dead_letter_topic": "topic for events that do not decode",
    "incidents_topic": "topic of fleet incident records (loopwarden.incidents), key = incident id",
    "partitions": "partitions of topics created on start (events topic and table changelog must match)",
    "fleet_partitions": "partitions of the fleet extensions' repartition topics and tables (signals are a few "
    "percent of the events; every partition costs broker fetch work even when idle)",
    "replicas": "replication factor of topics created on start",
    "data_dir": "directory of the RocksDB table files (one per worker)",
    "rocksdb_write_buffer_mb": "RocksDB memtable size per run-table partition, MiB (up to 3 per partition stay in "
    "memory before a flush: the worker's resident memory grows by that much under churn)",
    "rocksdb_block_cache_mb": "RocksDB block cache per table partition, MiB (data blocks read back stay here; "
    "bounds the worker's resident memory under run churn)",
    "store": "table store URL (rocksdb:// via rocksdict, or memory://)",
    "config": "OpenClaw-shaped config file (JSON or JSON5); defaults apply without it",
    "host": "HTTP bind address of /metrics, /healthz, /readyz",
    "port": "HTTP port of /metrics, /healthz, /readyz",
    "processing_guarantee": "at_least_once (exactly_once needs a broker with transactions; not Tansu)",
    "state_flush_interval": "seconds between writes of run states (RocksDB + changelog): a run touched by many "
    "batches is written once per interval; verdicts never wait for it, offsets commit "
    "after it (keep it below the commit interval)",
    "fetch_wait_ms": "consumer fetch_max_wait_ms (Faust hard-codes 1500; lower = less latency)",
    "linger_ms": "producer linger in ms (verdicts and changelog)",
    "batch_max": "max events processed as one batch (one table write per run per batch)",
    "batch_within": "max seconds to wait filling a batch",
    "commit_interval": "seconds between consumer offset commits",
    "session_timeout": "consumer group session timeout, seconds (Tansu holds joins for half of it)",
    "heartbeat_interval": "consumer group heartbeat interval, seconds",
    "group_instance_id": "static group membership (Kafka's group.instance.id): a name unique to this worker that "
    "stays the same across its restarts (a StatefulSet pod name); a worker back within --session-timeout keeps its "
    "partitions and the group does not rebalance. Unset: a new member at every start (deploy/OPERATIONS.md)",
    "standby_replicas": "standby copies of each run-table partition kept by other workers (Faust's "
    "table_standby_replicas): a killed worker's partitions are taken over without replaying their changelog, at "
    "the cost of a full copy of those partitions on each standby's disk and the fetches that keep it current; "
    "0 = none (deploy/OPERATIONS.md has the measured failover times)",
    "partition_stall_timeout": "seconds an assigned events partition may have records waiting without a batch "
    "processing them (or go without a fetch) before the worker logs an error (Faust's stream_processing_timeout)",
    "max_event_bytes": "events larger than this many bytes are dead-lettered (reason too_large)",
    "max_message_bytes": "largest record the events topic accepts (its max.message.bytes); sizes the dead-letter "
    "topic and the producer so every dead letter keeps its original bytes",
    "max_depth": "events nested deeper than this are dead-lettered (reason too_deep)",
    "run_ttl": "seconds a run may stay idle before its state is expired",
    "ended_ttl": "seconds the marker of an ended run is kept (idempotent replays)",
    "ack_timeout": "seconds a warn/block/abort verdict may await its verdict_ack before it counts as unacknowledged",
    "expire_interval": "seconds between expiry sweeps of the run table",
    "tool_labels": "comma-separated tool names used as metric labels; others are counted as 'other'",
    "stall_timeout": "seconds the event loop may miss its heartbeat before /healthz reports it stalled",
    "unhealthy_exit_after": "seconds unhealthy (crashed service or stalled loop) before the worker exits with "
    "code 70 so the orchestrator restarts it",
    "stall_exit_after": "seconds the event loop may stay blocked, even inside C code holding the GIL, before the "
    "worker writes every thread's traceback to stderr and exits with code 1 (a C-level timer; 0 = off)",
    "log_level": "log level (debug, info, warning, error); info: a line at start, when ready and at stop; "
    "debug adds Faust's and aiokafka's",
    "fast_path": "hand each fetch's events to the processor as one batch (--no-fast-path: Faust's "
    "per-message stream, batches of --batch-max within --batch-within; several times "
    "slower, the same verdicts)",
    "security_protocol": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (all Kafka clients of the worker)",
    "ssl_cafile": "CA bundle that signed the brokers' certificates (default: the system's)",
    "ssl_certfile": "client certificate for mutual TLS (with ssl_keyfile)",
    "ssl_keyfile": "client private key for mutual TLS",
    "sasl_mechanism": "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
    "sasl_username": "SASL user name",
    "sasl_password": "SASL password: environment variable only (no flag: a command line is visible to every "
    "user of the host); or sasl_password_file",
    "sasl_password_file": "file holding the SASL password (a mounted Secret); read at each connection",
    "signing_key": "Ed25519 private key (base64 of the 32-byte seed, or PEM) that signs verdicts, shadow "
    "verdicts and incidents (header lw-sig); environment variable only, or signing_key_file",
    "signing_key_file": "file with the Ed25519 private key (PEM from `loopwarden keys generate`)",
    "config_keys": "Ed25519 public key(s), base64 and comma-separated, of the operators allowed to write config "
    "records: when set, unsigned or forged config records are ignored and counted",
    "config_keys_file": "file of config-record public keys (PEM blocks or base64 lines)",
    "incident_keys": "Ed25519 public key(s) accepted on incident records besides this worker's own signing key "
    "(key rotation): with either set, unsigned or forged incidents are ignored and counted",
    "incident_keys_file": "file of incident public keys (PEM blocks or base64 lines)",
    "hash_key": "secret that keys (HMAC-SHA256) the argument and result hashes in published warning keys, so a "
    "reader of the control topic cannot test guesses of a call's arguments; environment variable only, or "
    "hash_key_file",
    "hash_key_file": "file holding the warning-key secret",
    "misrouted": "an event whose Kafka key is not its run key: dead_letter (reason misrouted) or process "
    "(counted either way)",
    "correct_end_offsets": "fix Tansu's wrong end offsets by one fetch from end-1 (a no-op on Kafka; "
    "false only to demonstrate the bug)",
}


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


# Secrets are read from the environment or a file, never from a flag (a command line is visible to every
# user of the host, in /proc and in ps).
ENV_ONLY = ("sasl_password", "signing_key", "hash_key")


def add_arguments(parser: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> None:
    """One flag per setting, ``--broker`` first and TLS/SASL last; the default shown is the built-in one.

    Booleans are ``--x/--no-x`` switches; their variables take true/false, 1/0. Secrets
    (:data:`ENV_ONLY`) have no flag.
    """
    defaults = Settings()
    security = {f.name for f in msgspec.structs.fields(SecuritySettings)}
    fields = msgspec.structs.fields(Settings)
    for field in [f for f in fields if f.name not in security] + [f for f in fields if f.name in security]:
        if field.name in skip or field.name in ENV_ONLY:
            continue
        default = getattr(defaults, field.name)
        help_ = f"{HELP.get(field.name, '')} [env {env_name(field.name)}; default {default!r}]"
        if field.type is bool:
            parser.add_argument(
                flag_name(field.name), dest=field.name, default=None, action=argparse.BooleanOptionalAction, help=help_
            )
        else:
            parser.add_argument(
                flag_name(field.name), dest=field.name, default=None, metavar=field.name.upper(), help=help_
            )


def from_sources(
    args: argparse.Namespace | dict | None = None, environ: dict | None = None, **overrides: Any
) -> Settings:
    """Build settings: ``overrides`` > CLI args > environment > defaults (types converted)."""
    environ = os.environ if environ is None else environ
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args or {})
    raw: dict[str, Any] = {}
    for field in msgspec.structs.fields(Settings):
        name = field.name
        if name in overrides and overrides[name] is not None:
            raw[name] = overrides[name]
        elif given.get(name) is not None:
            raw[name] = given[name]
        elif env_name(name) in environ:
            raw[name] = environ[env_name(name)]
    return msgspec.convert(raw, Settings, strict=False)


def settings_from_flags(broker_url: str, flags: list[str] | tuple[str, ...]) -> Settings:
    """Settings from command-line flags over the defaults, on ``broker_url`` (what benchmarks start)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    known, _ = parser.parse_known_args(list(flags))
    known.broker = broker_url
    return from_sources(known)
