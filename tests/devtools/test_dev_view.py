"""The demo's view (``loopwarden dev``) on an 80×24 terminal and in a log: nothing cut, wrapped or stalled-looking."""

from __future__ import annotations

import io
import time

import pytest

from loopwarden.devtools.dev import DEV_CONFIG, LEGEND, View, config_notes
from loopwarden.schemas.fleet import Incident, encode

KINDS = [
    ("warn", "generic_repeat", "read"),
    ("warn", "known_poll_no_progress", "process"),
    ("warn", "ping_pong", "list"),
    ("block", "generic_repeat", "read"),
    ("block", "global_circuit_breaker", "command_status"),
    ("block", "known_poll_no_progress", "process"),
    ("block", "ping_pong", "list"),
    ("block", "unknown_tool_repeat", "browser_navigate"),
    ("abort", "compaction_loop_persisted", "exec"),
    ("allow", None, "web_search"),
    ("warn", "cross_run_repeat", None),  # a whole run's work: its verdict names no tool
    ("block", "fleet_incident", "web_search"),
]
AGENTS = ("agent-0001", "ops-poller", "heartbeat9-agent-000", "[bot]")  # the longest id of a 1-min demo
TOOLS = ("web_search", "read", "exec", "process", "list", "browser_navigate", "command_status")


class FakeWorker:
    port = 65535

    def metrics(self):
        return {
            "loopwarden_events_total": 123456.0,
            "loopwarden_active_runs": 1234.0,
            "loopwarden_dead_letters_total": 12.0,
            "loopwarden_ready": 1.0,
        }


def incident(i, state="open", runs=None):
    now = time.time()
    return encode(
        Incident(
            incident_id=f"inc-{i:020x}",
            state=state,
            signature=f"sig{i}",
            tool_name=TOOLS[i % 7],
            outcome_hash="h",
            unknown_tool=None,
            sample="503",
            run_count=runs or 10 + i,
            agent_count=2 + i,
            run_keys=[],
            agent_ids=[],
            first_seen=now - 60 * i,
            last_seen=now,
            ts=now,
        )
    )


def full_view(duration=60.0, incidents=7):
    view = View(duration, FakeWorker(), "127.0.0.1:54321", config_notes(DEV_CONFIG))
    for i in range(incidents):
        view.on_incident(incident(i))
    for i in range(3000):
        action, detector, tool = KINDS[i % len(KINDS)]
        view.on_verdict(
            {
                "action": action,
                "detector": detector,
                "level": "critical",
                "count": 1234,
                "tool_name": tool,
                "agent_id": AGENTS[i % len(AGENTS)],
                "run_id": "agent-0001-run1.12",
                "event_ts": time.time() - 0.01,
            }
        )
    view.sample()
    return view


def rendered(view, final=False, width=80):
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(view.render(99999, final=final))
    return console.export_text()


@pytest.mark.parametrize("final", [False, True])
def test_fits_80_columns_without_cutting_or_wrapping(final):
    text = rendered(full_view(), final)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "…" not in text and "..." not in text
    header = next(line for line in lines if "detector" in line and "abort" in line)
    for column in ("detector", "warn", "block", "abort", "tool", "agent"):
        assert column in header.split(), header
    for _action, detector, tool in KINDS:
        assert (detector or "allow") in text and (tool or "(whole run)") in text
    assert next(line for line in lines if line.startswith("cross_run_repeat")).split()[2:4] == ["(whole", "run)"]
    row = next(line for line in lines if line.startswith("generic_repeat"))
    assert row.split()[1:3] == ["250", "250"], row  # its warns and its blocks, on one row
    assert all(agent in text for agent in AGENTS)
    for line in LEGEND + tuple(config_notes(DEV_CONFIG)):  # the legend is on screen, unwrapped
        assert line.strip() in text, line
    # the panel's lines do not wrap: every metric keeps its label and value on one line
    for label in (
        "sent 99999",
        "processed 123456",
        "active runs 1234",
        "dead letters 12",
        "p99",
        "tokens spent on looping calls 0 (the usage runners report)",  # what the number is, said on screen
    ):
        assert any(label in line for line in lines), label
    # the metrics address while the worker runs; the closing frame outlives it and names none
    assert ("http://127.0.0.1:65535/metrics" in text) is not final


def test_shows_open_incidents_with_tool_runs_agents_and_since():
    view = full_view(incidents=2)
    view.on_incident(incident(5))
    view.on_incident(incident(5, state="update", runs=40))
    view.on_incident(incident(1, state="resolved"))
    lines = rendered(view).splitlines()
    header = next(line for line in lines if "incident" in line.split() and "since" in line)
    for column in ("incident", "tool", "runs", "agents", "since"):
        assert column in header.split(), header
    rows = [line.split() for line in lines if line.startswith("inc-")]
    assert rows == [[f"inc-{5:020x}", TOOLS[5], "40", "7", "5m00s"], [f"inc-{0:020x}", TOOLS[0], "10", "2", "0s"]]
    assert any("open incidents: 2" in line for line in lines)
    assert "open incidents 2" in view.progress_line(1)


def test_many_incidents_get_the_rows_left_most_runs_first():
    view = full_view(incidents=30)
    text = rendered(view)
    assert len(text.rstrip("\n").splitlines()) <= 24
    shown = [line.split()[0] for line in text.splitlines() if line.startswith("inc-")]
    assert shown and shown == [f"inc-{i:020x}" for i in range(29, 29 - len(shown), -1)]
    assert f"open incidents: 30, the {len(shown)} with most runs" in text


def test_other_records_of_the_control_topic_are_not_verdicts():
    view = full_view(incidents=0)
    before = view.verdicts
    view.on_verdict({"type": "verdict_violation", "violation_id": "v", "kind": "ran_after_block", "agent_id": "a"})
    assert view.verdicts == before


def test_only_a_very_long_agent_id_is_elided():
    view = full_view()
    view.on_verdict(
        {
            "action": "block",
            "detector": "compaction_loop_persisted",
            "count": 5,
            "tool_name": "browser_navigate",
            "agent_id": "a-very-long-agent-id-of-some-other-fleet",
        }
    )
    lines = rendered(view).splitlines()
    assert all(len(line) <= 80 for line in lines)
    row = next(line for line in lines if line.startswith("compaction_loop_persisted "))
    assert "browser_navigate a-very-long" in row and row.rstrip().endswith("…"), row


def test_fits_24_rows():
    assert len(rendered(full_view()).rstrip("\n").splitlines()) <= 24


def test_last_frame_does_not_look_like_a_stall():
    view = full_view(duration=60.0)
    view.started -= 61.6  # the simulator stopped at 60 s; the view drained the last verdicts for 1.6 s
    view.sample()  # a second sample: the instantaneous rate is now 0/s
    text = rendered(view, final=True)
    assert "61.6" not in text and "62s" not in text and "/ 60s" not in text and "0/s" not in text
    assert "done" in text and "avg" in text
    assert "done" in view.progress_line(99999, final=True) and "avg" in view.progress_line(99999, final=True)


def test_progress_line_is_plain_and_short():
    line = full_view().progress_line(99999)
    assert "\x1b" not in line and len(line) <= 120
    assert "sent 99999" in line and "warn 1000" in line and "block 1500" in line and "abort 250" in line
    assert "open incidents 7" in line


def test_config_notes_explain_the_unusual_agents():
    notes = "\n".join(config_notes(DEV_CONFIG))
    # warning 5, critical 8: blocked at 8 before the first warning, which goes out at 10 (no puzzle to read)
    assert "agent-0001: blocked at 8 repeats, unwarned: warnings go at 10, 20, 30" in notes
    assert "no warning below" not in notes
    assert "ops-poller" in notes and "global breaker at 30" in notes
