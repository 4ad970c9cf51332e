"""The loopwarden Grafana dashboard, as code (grafana-foundation-sdk).

Regenerate the checked-in JSON after any change here::

    python deploy/grafana/dashboard.py --out deploy/grafana/loopwarden.json

(``python deploy/grafana/dashboard.py > deploy/grafana/loopwarden.json`` does
the same.) ``tests/deploy/test_dashboard.py`` fails when the checked-in file
differs from what this module produces.

Every panel query is a Prometheus expression over the worker's metrics
(``streams`` exports them; the scrape job is ``loopwarden``). Queries use three
dashboard variables: ``$datasource`` (a Prometheus data source), ``$job`` and
``$instance`` (multi-select, "All" = ``.*``). :func:`iter_queries` walks a
rendered dashboard and yields every panel query, and :func:`render_expr`
substitutes the variables the way Grafana does, so a test can run each query
against a real Prometheus.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dash_m

UID = "loopwarden-overview"
TITLE = "loopwarden: tool-call loop detection"
DEFAULT_JOB = "loopwarden"

# Label matchers every query carries: the scrape job and the selected workers.
SEL = 'job="$job", instance=~"$instance"'
RATE = "$__rate_interval"

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")

# The event->verdict latency objective, also used by the LoopwardenLatencySLOBreach alert.
SLO_SECONDS = 0.05


def q(expr: str, legend: str = "__auto", ref: str = "A", *, instant: bool = False) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)
    return query.instant() if instant else query.range()


def _ts(
    title: str,
    description: str,
    unit: str,
    *queries: prometheus.Dataquery,
    height: int = 8,
    width: int = 12,
    stack: bool = False,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .height(height)
        .span(width)
        .fill_opacity(10 if not stack else 40)
        .line_width(1)
        .legend(
            common_b.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "max", "lastNotNull"])
        )
        .tooltip(common_b.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING))
    )
    if stack:
        panel = panel.stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _stat(
    title: str,
    description: str,
    unit: str,
    query: prometheus.Dataquery,
    thresholds: list[tuple[float | None, str]] | None = None,
    width: int = 4,
) -> stat.Panel:
    steps = [dash_m.Threshold(value=v, color=c) for v, c in (thresholds or [(None, "green")])]
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .height(4)
        .span(width)
        .graph_mode(common.BigValueGraphMode.AREA)
        .color_mode(common.BigValueColorMode.VALUE)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps))
        .with_target(query)
    )


def _top_tools(title: str, description: str, unit: str, metric: str, span: int) -> bargauge.Panel:
    """The ten tools with the largest increase of ``metric`` (by its ``tool`` label) in the time range."""
    return (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .height(8)
        .span(span)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(q(f"topk(10, sum by (tool) (increase({metric}{{{SEL}}}[$__range])))", "{{tool}}", instant=True))
    )


def _latency(title: str, description: str, metric: str, slo: float | None = None) -> timeseries.Panel:
    queries = [
        q(f"histogram_quantile({quantile}, sum by (le) (rate({metric}_bucket{{{SEL}}}[{RATE}])))", f"p{label}", ref)
        for quantile, label, ref in ((0.5, "50", "A"), (0.9, "90", "B"), (0.99, "99", "C"))
    ]
    panel = _ts(title, description, "s", *queries)
    if slo is not None:
        panel = panel.thresholds(
            dash_b.ThresholdsConfig()
            .mode(dash_m.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    dash_m.Threshold(value=None, color="green"),
                    dash_m.Threshold(value=slo, color="red"),
                ]
            )
        ).thresholds_style(common_b.GraphThresholdsStyleConfig().mode(common.GraphTresholdsStyleMode.DASHED))
    return panel


def build() -> dash_b.Dashboard:
    """The dashboard builder (call ``.build()`` for the model)."""
    job_var = (
        dash_b.QueryVariable("job")
        .label("Job")
        .datasource(DATASOURCE)
        .query("label_values(loopwarden_ready, job)")
        .current(dash_m.VariableOption(selected=True, text=DEFAULT_JOB, value=DEFAULT_JOB))
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
    )
    instance_var = (
        dash_b.QueryVariable("instance")
        .label("Worker")
        .datasource(DATASOURCE)
        .query('label_values(loopwarden_ready{job="$job"}, instance)')
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dash_m.VariableOption(selected=True, text="All", value="$__all"))
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
    )

    board = (
        dash_b.Dashboard(TITLE)
        .uid(UID)
        .description(
            "Fleet-wide tool-call loop detection (OpenClaw tools.loopDetection): "
            "traffic, detections, verdicts, latency and Kafka consumption of the loopwarden workers."
        )
        .tags(["loopwarden", "kafka", "agents"])
        .editable()
        .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(dash_b.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(job_var)
        .with_variable(instance_var)
    )

    ids = itertools.count(1)

    def _row(title: str) -> dash_b.Row:
        return dash_b.Row(title).id(next(ids))

    def _add(board: dash_b.Dashboard, panel: Any) -> dash_b.Dashboard:
        return board.with_panel(panel.id(next(ids)))

    # --- Overview -------------------------------------------------------
    board = board.with_row(_row("Overview"))
    board = _add(
        board,
        _stat(
            "Workers ready",
            "Workers whose assigned partitions are recovered (loopwarden_ready = 1), of all scraped.",
            "none",
            q(f"sum(loopwarden_ready{{{SEL}}})", "ready", instant=True),
            [(None, "red"), (1, "green")],
        ),
    )
    board = _add(
        board,
        _stat(
            "Assigned partitions",
            "Partitions of agent.events assigned across the selected workers.",
            "none",
            q(f"sum(loopwarden_assigned_partitions{{{SEL}}})", "partitions", instant=True),
        ),
    )
    board = _add(
        board,
        _stat(
            "Events / s",
            "All decoded events, every type.",
            "ops",
            q(f"sum(rate(loopwarden_events_total{{{SEL}}}[{RATE}]))", "events/s"),
        ),
    )
    board = _add(
        board,
        _stat(
            "Active runs",
            "Runs (sessions) with state held in the tables right now.",
            "none",
            q(f"sum(loopwarden_active_runs{{{SEL}}})", "runs"),
        ),
    )
    board = _add(
        board,
        _stat(
            "Blocks + aborts (range)",
            "block and abort verdicts enforced in the dashboard's time range "
            '(shadowed ones are not: see "Detections: shadow vs enforce").',
            "none",
            q(
                f'sum(increase(loopwarden_verdicts_total{{{SEL}, action=~"block|abort", mode="enforce"}}[$__range]))',
                "blocks+aborts",
                instant=True,
            ),
            [(None, "green"), (1, "orange"), (100, "red")],
        ),
    )
    board = _add(
        board,
        _stat(
            "Config updates (range)",
            "Live config changes applied from the config topic in the time range.",
            "none",
            q(f"sum(increase(loopwarden_config_updates_total{{{SEL}}}[$__range]))", "updates", instant=True),
        ),
    )

    # --- Traffic ----------------------------------------------------------
    board = board.with_row(_row("Traffic"))
    board = _add(
        board,
        _ts(
            "Event rate by type",
            "Decoded events per second on agent.events, by event type.",
            "ops",
            q(f"sum by (type) (rate(loopwarden_events_total{{{SEL}}}[{RATE}]))", "{{type}}"),
            stack=True,
        ),
    )
    board = _add(
        board,
        _ts(
            "Dead letters by reason",
            "Events that failed to decode or validate and went to the dead-letter "
            "topic, by reason; duplicates and misrouted events are dropped without a dead letter.",
            "ops",
            q(f"sum by (reason) (rate(loopwarden_dead_letters_total{{{SEL}}}[{RATE}]))", "{{reason}}", "A"),
            q(f"sum(rate(loopwarden_duplicate_events_total{{{SEL}}}[{RATE}]))", "duplicate (dropped)", "B"),
            q(f"sum(rate(loopwarden_misrouted_events_total{{{SEL}}}[{RATE}]))", "misrouted (dropped)", "C"),
        ),
    )
    board = _add(
        board,
        _ts(
            "Active runs / sessions per worker",
            "Runs with state in each worker's tables; expired = idle or ended runs removed per second.",
            "none",
            q(f"sum by (instance) (loopwarden_active_runs{{{SEL}}})", "{{instance}}", "A"),
            q(f"sum(rate(loopwarden_expired_runs_total{{{SEL}}}[{RATE}]))", "expired / s", "B"),
        ),
    )
    board = _add(
        board,
        _ts(
            "Post-compaction guard",
            "Guards armed by compaction_retry events and runs aborted because the loop persisted after compaction.",
            "ops",
            q(f"sum(rate(loopwarden_guard_arms_total{{{SEL}}}[{RATE}]))", "armed / s", "A"),
            q(f"sum(rate(loopwarden_guard_aborts_total{{{SEL}}}[{RATE}]))", "aborted / s", "B"),
        ),
    )

    # --- Detections and verdicts ----------------------------------------
    board = board.with_row(_row("Detections and verdicts"))
    board = _add(
        board,
        _ts(
            "Detections by detector and level",
            "Every detection, emitted or not (warnings are published only when the bucket rule lets them out). "
            "argument_churn (a warning) comes only from agents under loopwarden.profile openclaw-latest, "
            "OpenClaw's newest rules.",
            "ops",
            q(
                f"sum by (detector, level) (rate(loopwarden_detections_total{{{SEL}}}[{RATE}]))",
                "{{detector}} {{level}}",
            ),
        ),
    )
    board = _add(
        board,
        _ts(
            "Verdicts by action and detector",
            "Verdicts published on agent.loop-control (shadowed ones go to "
            "agent.loop-shadow and are not counted here).",
            "ops",
            q(
                f'sum by (action, detector) (rate(loopwarden_verdicts_total{{{SEL}, mode="enforce"}}[{RATE}]))',
                "{{action}} {{detector}}",
            ),
        ),
    )
    board = _add(
        board,
        _ts(
            "Blocks and aborts per minute",
            "block = a rolling detector went critical and the run's next tool "
            "call is refused; abort = compaction_loop_persisted ended the run.",
            "none",
            q(
                f'sum by (action) (rate(loopwarden_verdicts_total{{{SEL}, action=~"block|abort", mode="enforce"}}'
                f"[{RATE}])) * 60",
                "{{action}} / min",
            ),
            stack=True,
        ),
    )
    board = _add(
        board,
        _top_tools(
            "Top tools in loops",
            "Tools with the most detections in the time range (tool names outside the capped set "
            "are counted as 'other').",
            "none",
            "loopwarden_detections_total",
            12,
        ),
    )

    board = _add(
        board,
        _ts(
            "Detections: shadow vs enforce",
            "Detections by mode: shadow = loopwarden.shadow recorded them on "
            "agent.loop-shadow and enforced nothing (the run went on); enforce = warned, blocked or aborted. "
            "Watch shadow before switching a detector to enforce.",
            "ops",
            q(f"sum by (mode) (rate(loopwarden_detections_total{{{SEL}}}[{RATE}]))", "{{mode}}", "A"),
            q(
                f'sum by (mode) (rate(loopwarden_verdicts_total{{{SEL}, action!="allow"}}[{RATE}]))',
                "{{mode}} verdicts",
                "B",
            ),
        ),
    )

    # --- Loop cost -----------------------------------------------------------
    board = board.with_row(_row("Loop cost"))
    board = _add(
        board,
        _ts(
            "Tokens burnt in loops per hour",
            "Tokens (input + output, from the tool_call events' usage) of the "
            "calls charged to loops: each detection's streak from its first call, and calls a run still makes "
            "to a blocked signature; per hour, by mode.",
            "short",
            q(f"sum by (mode) (rate(loopwarden_loop_tokens_total{{{SEL}}}[{RATE}])) * 3600", "{{mode}}"),
        ),
    )
    board = _add(
        board,
        _ts(
            "Loop cost per hour",
            "usage.cost of the calls charged to loops, per hour, by detector (the fleet's "
            "currency; only calls whose usage carries a cost).",
            "short",
            q(f"sum by (detector) (rate(loopwarden_loop_cost_total{{{SEL}}}[{RATE}])) * 3600", "{{detector}}"),
        ),
    )
    board = _add(
        board,
        _top_tools(
            "Top tools by loop tokens",
            "Tools whose loops burnt the most tokens in the time range (tool names outside the "
            "capped set are counted as 'other').",
            "short",
            "loopwarden_loop_tokens_total",
            24,
        ),
    )

    # --- Latency -----------------------------------------------------------
    board = board.with_row(_row("Latency"))
    board = _add(
        board,
        _latency(
            "step() latency",
            "Time spent in the pure detection step per event (p50/p90/p99).",
            "loopwarden_step_seconds",
        ),
    )
    board = _add(
        board,
        _latency(
            "Event -> verdict latency",
            f"From the event's ts to the verdict's publication (p50/p90/p99); "
            f"the dashed line is the {int(SLO_SECONDS * 1000)} ms p99 objective.",
            "loopwarden_event_to_verdict_seconds",
            slo=SLO_SECONDS,
        ),
    )

    # --- Enforcement ---------------------------------------------------------
    board = board.with_row(_row("Enforcement"))
    board = _add(
        board,
        _latency(
            "Verdict -> ack latency",
            "From a warn/block/abort verdict's publication to the runner's verdict_ack (p50/p90/p99, worker clock).",
            "loopwarden_verdict_ack_seconds",
        ),
    )
    board = _add(
        board,
        _ts(
            "Unacknowledged verdicts",
            "Verdicts with no verdict_ack within the worker's ack_timeout (or before "
            "their run ended), by action: the runner did not act on them.",
            "none",
            q(f"sum by (action) (increase(loopwarden_verdicts_unacked_total{{{SEL}}}[{RATE}]))", "{{action}}"),
        ),
    )
    board = _add(
        board,
        _ts(
            "Verdict violations by kind",
            "ran_after_block: a blocked call ran anyway; call_after_abort: a run "
            "called a tool after its abort (verdict_violation records on the control topic).",
            "ops",
            q(f"sum by (kind) (rate(loopwarden_verdict_violations_total{{{SEL}}}[{RATE}]))", "{{kind}}"),
        ),
    )
    board = _add(
        board,
        _ts(
            "Acks by outcome",
            "verdict_ack events: applied = the runner enforced the verdict, failed = it could not.",
            "ops",
            q(f"sum by (outcome) (rate(loopwarden_verdict_acks_total{{{SEL}}}[{RATE}]))", "{{outcome}}"),
        ),
    )

    # --- Runner decisions (runners deciding locally, audited by the workers) -----------------
    board = board.with_row(_row("Runner decisions"))
    board = _add(
        board,
        _ts(
            "Runner decisions by agreement",
            "Tool calls a runner decided itself, audited by the worker: same, runner_laxer (the worker "
            "published a correction: a runner that lost its history, or a drifted config), runner_stricter.",
            "ops",
            q(f"sum by (agreement) (rate(loopwarden_runner_decisions_total{{{SEL}}}[{RATE}]))", "{{agreement}}"),
            width=12,
        ),
    )
    board = _add(
        board,
        _ts(
            "Runner disagreement by agent",
            "Share of each agent's locally decided calls where the worker decided otherwise "
            "(agents the config does not name are 'other').",
            "percentunit",
            q(
                f'sum by (agent) (rate(loopwarden_runner_decisions_total{{{SEL}, agreement!="same"}}[{RATE}])) '
                f"/ sum by (agent) (rate(loopwarden_runner_decisions_total{{{SEL}}}[{RATE}]))",
                "{{agent}}",
            ),
            width=12,
        ),
    )

    # --- Kafka ---------------------------------------------------------------
    board = board.with_row(_row("Kafka"))
    board = _add(
        board,
        _ts(
            "Consumer lag per partition",
            "Messages between the committed/consumed offset and the log end, per topic partition.",
            "none",
            q(f"max by (topic, partition) (loopwarden_consumer_lag{{{SEL}}})", "{{topic}}[{{partition}}]"),
        ),
    )
    board = _add(
        board,
        _ts(
            "Partitions and readiness per worker",
            "Assigned partitions per worker; readiness is 1 once the assigned partitions' tables are recovered.",
            "none",
            q(f"sum by (instance) (loopwarden_assigned_partitions{{{SEL}}})", "{{instance}} partitions", "A"),
            q(f"sum by (instance) (loopwarden_ready{{{SEL}}})", "{{instance}} ready", "B"),
            q('sum by (instance) (up{job="$job", instance=~"$instance"})', "{{instance}} up", "C"),
        ),
    )

    # --- Fleet incidents (loopwarden.incidents / crossRun extensions) -------------------------
    board = board.with_row(_row("Fleet incidents"))
    board = _add(
        board,
        _stat(
            "Open incidents",
            "Failure signatures (one tool, one outcome) that many runs of several agents hit "
            "within the window; each lives on one worker, so the sum is the fleet's count.",
            "none",
            q(f"sum(loopwarden_open_incidents{{{SEL}}})", "open", instant=True),
            [(None, "green"), (1, "red")],
            width=6,
        ),
    )
    board = _add(
        board,
        _ts(
            "Runs per incident",
            "Runs joined to the open incidents, by tool (tools outside the capped set are 'other').",
            "none",
            q(f"sum by (tool) (loopwarden_incident_runs{{{SEL}}})", "{{tool}}"),
            width=9,
        ),
    )
    board = _add(
        board,
        _ts(
            "Incident records and repeating sessions",
            "Incident records published on agent.loop-incidents by "
            "state, and cross_run_repeat warnings (a session's scheduled runs redoing the same work).",
            "ops",
            q(f"sum by (state) (rate(loopwarden_incidents_total{{{SEL}}}[{RATE}]))", "{{state}}", "A"),
            q(
                f'sum(rate(loopwarden_verdicts_total{{{SEL}, detector="cross_run_repeat"}}[{RATE}]))',
                "cross_run_repeat",
                "B",
            ),
            width=9,
        ),
    )
    board = _add(
        board,
        bargauge.Panel()
        .title("Open incidents by fingerprint")
        .description(
            "Runs joined to each open incident, by its failure fingerprint (the outcome with paths, ids, times, "
            "pids and ports taken out; kind normalized-N or exact) and tool. The incident records on "
            "agent.loop-incidents carry the same fingerprint and a normalized example of the outcome."
        )
        .datasource(DATASOURCE)
        .unit("none")
        .min(0)
        .height(8)
        .span(24)
        .orientation(common.VizOrientation.HORIZONTAL)
        .display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(
            q(
                f"topk(20, sum by (fingerprint, kind, tool) (loopwarden_open_incident_fingerprints{{{SEL}}}))",
                "{{tool}} {{fingerprint}} ({{kind}})",
                instant=True,
            )
        ),
    )
    board = _add(
        board,
        _top_tools(
            "Top failure signatures",
            "Tools whose failures most runs joined in the time range (a join = one run with the "
            "same outcome minStreak times, whatever the arguments).",
            "none",
            "loopwarden_fleet_joins_total",
            24,
        ),
    )
    return board


def render() -> str:
    """The dashboard JSON, deterministic (sorted keys, 2-space indent, trailing newline)."""
    model = build().build()
    return json.dumps(json.loads(JSONEncoder().encode(model)), sort_keys=True, indent=2) + "\n"


def iter_panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every non-row panel, including panels nested in collapsed rows."""
    for panel in doc.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def iter_queries(doc: dict[str, Any]) -> Iterator[tuple[str, str, str, bool]]:
    """``(panel title, refId, expr, instant)`` for every Prometheus target of every panel."""
    for panel in iter_panels(doc):
        for target in panel.get("targets", []):
            if "expr" in target:
                yield panel["title"], target.get("refId", ""), target["expr"], bool(target.get("instant"))


def render_expr(
    expr: str, *, job: str = DEFAULT_JOB, instance: str = ".*", rate_interval: str = "1m", range_: str = "5m"
) -> str:
    """Substitute the dashboard variables as Grafana would, for running a query outside Grafana."""
    values = {
        "job": job,
        "instance": instance,
        "__rate_interval": rate_interval,
        "__range": range_,
        "__interval": rate_interval,
    }
    out = re.sub(r"\$\{?(__rate_interval|__range|__interval|job|instance)\}?", lambda m: values[m.group(1)], expr)
    leftover = re.search(r"\$\{?\w+", out)
    if leftover:
        raise ValueError(f"unknown dashboard variable {leftover.group(0)!r} in {expr!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the JSON here instead of stdout")
    args = parser.parse_args(argv)
    text = render()
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
