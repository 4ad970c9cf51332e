"""Runner-client settings: one msgspec Struct, defaults tuned for gate-mode latency.

Why these defaults (measured with ``loopwarden bench latency`` on Tansu):

- ``linger_ms`` and ``fetch_wait_ms`` depend on where checks are decided
  (unset: by mode). Asking the worker (gate round trips): ``linger_ms=0``, a
  gated call is one record and any linger is pure added round-trip time
  (aiokafka still batches whatever queues up while a request is in flight);
  ``fetch_wait_ms=10``, since Tansu sleeps about half the fetch wait after
  every fetch even with data waiting (streams/ARCHITECTURE.md, "Tansu"), so
  this bounds the verdict hop. Deciding locally, no check waits for the
  broker: ``linger_ms=5`` sends events in batches and ``fetch_wait_ms=100``
  polls for verdicts ten times less often, which took the local decision
  service's p99 per check from about 1.2 to 0.6 ms (``loopwarden bench
  sidecar``): the producer and the two consumers share the event loop with
  the checks.
- ``check_timeout=2.0``: a gate never holds a run longer than this; past it
  the call is allowed (fail open) and counted.
- ``require_broker=False``: a broker that cannot be reached at start does not
  stop the agent; the client connects in the background whenever the broker
  comes up (``True`` makes ``start()`` raise instead).
- ``max_buffered=10000``, ``max_buffered_bytes=64 MiB``: events kept while
  the broker is away, by count and by bytes (events of a few hundred KB are
  normal: 10,000 of them would be gigabytes); past either, new ones are
  dropped and counted (never blocking the agent).
- ``max_event_bytes=1 MiB``: the worker's own limit (``max_event_bytes``,
  larger events are dead-lettered there): a larger event is not sent, and
  counted (``ClientStats.events_too_large``).
- ``decisions="auto"``: decide the per-run rules in-process (``local``) when
  the runner has the fleet's config (``config``, a file; or a mapping given to
  :class:`~loopwarden.runner.LoopClient`), else ask the worker (``worker``,
  gate round trips). The config topic's overrides apply on top, live, as on
  the workers. Only a runner holding the workers' config file can decide
  exactly what they would, hence ``auto``.
- ``verdict_keys`` / ``verdict_keys_file``: the workers' Ed25519 public keys
  (base64, comma-separated; or a file of PEM blocks or base64 lines). When
  set, a verdict not signed by one of them is dropped and counted
  (``ClientStats.signature_rejected``); unset, every verdict is read as before.
- ``config_keys`` / ``config_keys_file``: the operators' public keys, as the
  workers' ``config_keys``. When set, a config record not signed by one of
  them is ignored by local decisions and counted
  (``ClientStats.config_rejected``); unset, every record is applied. A runner
  that decides locally should have the same keys as its workers.

Every field can be set by ``LOOPWARDEN_RUNNER_<FIELD>`` (e.g.
``LOOPWARDEN_RUNNER_BOOTSTRAP``, ``LOOPWARDEN_RUNNER_CONFIG``); arguments win
(streams/runner/RUNNER.md, "Settings").
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from loopwarden.kafka.connection import SecuritySettings, servers, settings_from_env

ENV_PREFIX = "LOOPWARDEN_RUNNER_"


class ClientSettings(SecuritySettings, kw_only=True):
    bootstrap: str = "127.0.0.1:19092"  # `loopwarden up`'s broker: a runner with no settings finds it
    events_topic: str = "agent.events"
    control_topic: str = "agent.loop-control"
    linger_ms: int | None = None  # unset: 0 asking the worker, 5 deciding locally
    fetch_wait_ms: int | None = None  # unset: 10 asking the worker, 100 deciding locally
    check_timeout: float = 2.0
    request_timeout_ms: int = 5000
    start_timeout: float = 15.0
    close_timeout: float = 3.0
    require_broker: bool = False
    dedup_size: int = 65536
    client_id: str = "loopwarden-runner"
    verdict_keys: str | None = None
    verdict_keys_file: str | None = None
    max_buffered: int = 10000
    max_buffered_bytes: int = 64 << 20  # key + value bytes kept while the broker is away
    max_event_bytes: int = 1 << 20  # as the worker's max_event_bytes: larger events are not sent
    config_keys: str | None = None  # operators' public keys: unsigned config records are ignored
    config_keys_file: str | None = None
    reconnect_backoff_max: float = 5.0
    outage_log_interval: float = 60.0
    decisions: Literal["auto", "local", "worker"] = "auto"
    config: str | None = None  # the fleet's config file (JSON/JSON5), the fallback of local decisions
    config_topic: str = "agent.loop-config"
    max_local_runs: int = 10000  # runs whose state a local decider keeps (least recently used dropped)

    def for_mode(self, local: bool) -> ClientSettings:
        """These settings with the mode's defaults for what is unset (see the module's notes)."""
        linger, wait = (5, 100) if local else (0, 10)
        return msgspec.structs.replace(
            self,
            linger_ms=linger if self.linger_ms is None else self.linger_ms,
            fetch_wait_ms=wait if self.fetch_wait_ms is None else self.fetch_wait_ms,
        )

    @property
    def servers(self) -> list[str]:
        """``host:port`` list; a ``kafka://`` scheme is accepted and dropped."""
        return servers(self.bootstrap)

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides: Any) -> ClientSettings:
        """``overrides`` > ``LOOPWARDEN_RUNNER_<FIELD>`` env vars > defaults."""
        return settings_from_env(cls, ENV_PREFIX, environ, overrides)


def broker_named(flag: str | None) -> bool:
    """Whether a local service was told of a broker (its ``--bootstrap``, else
    ``LOOPWARDEN_RUNNER_BOOTSTRAP``). The decision service and the MCP proxy contact none otherwise:
    the client's default (``up``'s broker) may be another developer's stack on the machine."""
    import os

    return bool(flag or os.environ.get("LOOPWARDEN_RUNNER_BOOTSTRAP"))
