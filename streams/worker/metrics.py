"""Prometheus metrics of one worker (names are a contract with deploy/ dashboards and alerts).

Labels stay bounded: event type, detector, level, action, mode, reason, topic
and partition; tool names are capped to a configured set (else ``other``),
agent ids to the agents the config names (else ``other``,
:func:`loopwarden.worker.audit.agent_label`); never a run or session id. Each worker owns a registry, so several
apps in one process (tests) do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Open incidents labelled by fingerprint per worker: each is a series, so they are capped (an
# outage opens a handful; a fleet with hundreds open at once is summed under "other").
MAX_FINGERPRINT_SERIES = 50
_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_STEP_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.05)


class Metrics:
    def __init__(self, tool_labels: frozenset[str] = frozenset()) -> None:
        disable_created_metrics()  # no *_created series: they double the scrape for nothing
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.tool_labels = tool_labels
        self.events = Counter("loopwarden_events", "Events decoded, by type", ["type"], registry=r)
        # mode: "shadow" (loopwarden.shadow: recorded on the shadow topic, not enforced) or "enforce"
        self.detections = Counter(
            "loopwarden_detections", "Detections (emitted or not)", ["detector", "level", "tool", "mode"], registry=r
        )
        self.verdicts = Counter(
            "loopwarden_verdicts",
            "Verdicts published: on the control topic, or the shadow topic (mode=shadow)",
            ["action", "detector", "mode"],
            registry=r,
        )
        self.loop_tokens = Counter(
            "loopwarden_loop_tokens",
            "Tokens spent on calls charged to loops (the calls of a detection's streak, "
            "calls to a blocked signature), from the events' usage",
            ["detector", "tool", "mode"],
            registry=r,
        )
        self.loop_cost = Counter(
            "loopwarden_loop_cost",
            "Cost of the calls charged to loops (usage.cost)",
            ["detector", "tool", "mode"],
            registry=r,
        )
        self.dead_letters = Counter(
            "loopwarden_dead_letters", "Messages sent to the dead-letter topic", ["reason"], registry=r
        )
        self.misrouted = Counter(
            "loopwarden_misrouted_events",
            "Events whose message key is not their run key (dead-lettered unless misrouted=process)",
            registry=r,
        )
        self.signature_rejected = Counter(
            "loopwarden_signature_rejected",
            "Records ignored because their signature is missing or does not verify, by topic kind",
            ["kind"],
            registry=r,
        )
        for kind in ("config", "incident"):  # present at 0, so increase() sees the first rejection
            self.signature_rejected.labels(kind)
        self.duplicates = Counter(
            "loopwarden_duplicate_events",
            "Events dropped as repeats: same event_id in a run, or offset already applied",
            registry=r,
        )
        self.publish_retries = Counter(
            "loopwarden_publish_retries", "Publishes retried after a failure, by topic", ["topic"], registry=r
        )
        self.publish_dropped = Counter(
            "loopwarden_publish_dropped",
            "Records that could never be published and were skipped, by topic",
            ["topic"],
            registry=r,
        )
        self.guard_arms = Counter("loopwarden_guard_arms", "Post-compaction guards armed", registry=r)
        self.guard_aborts = Counter("loopwarden_guard_aborts", "Runs aborted by the post-compaction guard", registry=r)
        self.step_seconds = Histogram(
            "loopwarden_step_seconds",
            "Duration of one step() call (sampled: 1 event in 8)",
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.event_to_verdict = Histogram(
            "loopwarden_event_to_verdict_seconds",
            "From the event's ts to the verdict's delivery",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ack_seconds = Histogram(
            "loopwarden_verdict_ack_seconds",
            "From a verdict's publication to its verdict_ack (worker clock)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.acks = Counter("loopwarden_verdict_acks", "verdict_ack events, by outcome", ["outcome"], registry=r)
        self.unacked = Counter(
            "loopwarden_verdicts_unacked",
            "warn/block/abort verdicts not acked within ack_timeout (or before their run ended)",
            ["action"],
            registry=r,
        )
        self.violations = Counter(
            "loopwarden_verdict_violations",
            "Runs going on past a verdict (verdict_violation records), by kind",
            ["kind"],
            registry=r,
        )
        self.active_runs = Gauge("loopwarden_active_runs", "Runs with state in this worker's partitions", registry=r)
        self.expired_runs = Counter("loopwarden_expired_runs", "Idle runs (or ended-run markers) expired", registry=r)
        self.oversized_runs = Counter(
            "loopwarden_oversized_runs",
            "Runs whose state outgrew what the changelog accepts: their state was reset (logged with the key)",
            registry=r,
        )
        self.unreadable_runs = Counter(
            "loopwarden_unreadable_run_values",
            "Stored run values discarded unread (the run starts afresh), by reason: unknown_version"
            " (a newer worker's format) or undecodable",
            ["reason"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "loopwarden_consumer_lag",
            "Messages behind the partition's high watermark",
            ["topic", "partition"],
            registry=r,
        )
        self.config_updates = Counter("loopwarden_config_updates", "Records applied from the config topic", registry=r)
        self.config_ignored = Counter(
            "loopwarden_config_ignored",
            "Config-topic records ignored: a new agent beyond the cap of agents with overrides",
            registry=r,
        )
        self.config_refused = Counter(
            "loopwarden_config_refused",
            "Config-topic records skipped: unreadable, key_too_long or bad_record (the feed goes on)",
            ["reason"],
            registry=r,
        )
        self.unreadable = Counter(
            "loopwarden_unreadable_records",
            "Records aiokafka could not parse (skipped; on the events topic also dead-lettered), by topic",
            ["topic"],
            registry=r,
        )
        self.fleet_skipped = Counter(
            "loopwarden_fleet_records_skipped",
            "Fleet repartition and incident records that are not what their topic holds (skipped)",
            registry=r,
        )
        self.ready = Gauge("loopwarden_ready", "1 when partitions are assigned and recovery is done", registry=r)
        # Fleet extensions (loopwarden.fleet); labels: state, signal kind, capped tool name.
        self.fleet_signals = Counter(
            "loopwarden_fleet_signals", "Signals sent to the fleet side, by kind", ["kind"], registry=r
        )
        self.fleet_joins = Counter(
            "loopwarden_fleet_joins", "Runs that joined a failure signature, by tool", ["tool"], registry=r
        )
        self.incidents = Counter("loopwarden_incidents", "Incident records published, by state", ["state"], registry=r)
        self.open_incidents = Gauge(
            "loopwarden_open_incidents", "Open incidents in this worker's partitions", registry=r
        )
        self.incident_runs = Gauge(
            "loopwarden_incident_runs", "Runs joined to open incidents, by tool", ["tool"], registry=r
        )
        self.incident_fingerprints = Gauge(
            "loopwarden_open_incident_fingerprints",
            "Runs joined to each open incident of this worker's partitions, by its failure fingerprint, "
            f"the fingerprint's kind and the tool (the first {MAX_FINGERPRINT_SERIES} incidents; the rest 'other')",
            ["fingerprint", "kind", "tool"],
            registry=r,
        )
        # Runners that decide locally (loopwarden.worker.audit): the worker's decision against theirs.
        self.runner_decisions = Counter(
            "loopwarden_runner_decisions",
            "Locally decided tool calls audited, by agent (capped to the config's agents) and agreement: "
            "same, runner_laxer (the worker published a correction), runner_stricter",
            ["agent", "agreement"],
            registry=r,
        )
        self.assigned_partitions = Gauge(
            "loopwarden_assigned_partitions", "Input-topic partitions assigned to this worker", registry=r
        )

    def tool(self, name: str | None) -> str:
        return name if name in self.tool_labels else "other"

    def render(self) -> bytes:
        return generate_latest(self.registry)
