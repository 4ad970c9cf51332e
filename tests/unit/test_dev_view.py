"""The demo's view (``loopwarden dev``) on an 80×24 terminal and in a log: nothing cut, wrapped or stalled-looking."""

from __future__ import annotations

import io
import time

import pytest

from streams.devtools.dev import DEV_CONFIG, LEGEND, View, config_notes

KINDS = [("warn", "generic_repeat", "read"), ("warn", "known_poll_no_progress", "process"),
         ("warn", "ping_pong", "list"), ("block", "generic_repeat", "read"),
         ("block", "global_circuit_breaker", "command_status"), ("block", "known_poll_no_progress", "process"),
         ("block", "ping_pong", "list"), ("block", "unknown_tool_repeat", "browser_navigate"),
         ("abort", "compaction_loop_persisted", "exec"), ("allow", None, "web_search")]


class FakeWorker:
    port = 65535

    def metrics(self):
        return {"loopwarden_events_total": 123456.0, "loopwarden_active_runs": 1234.0,
                "loopwarden_dead_letters_total": 12.0, "loopwarden_ready": 1.0}


def full_view(duration=60.0):
    view = View(duration, FakeWorker(), "127.0.0.1:54321", config_notes(DEV_CONFIG))
    for i in range(3000):
        action, detector, tool = KINDS[i % len(KINDS)]
        view.on_verdict({"action": action, "detector": detector, "level": "critical", "count": 1234,
                         "tool_name": tool, "agent_id": "agent-0001" if i % 2 else "ops-poller",
                         "run_id": "agent-0001-run1.12", "event_ts": time.time() - 0.01})
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
    header = next(line for line in lines if "action" in line and "detector" in line)
    for column in ("action", "detector", "n", "count", "tool", "agent"):
        assert column in header.split(), header
    for _action, detector, tool in KINDS:
        assert (detector or "-") in text and tool in text
    assert "agent-0001" in text and "ops-poller" in text
    for line in LEGEND + tuple(config_notes(DEV_CONFIG)):  # the legend is on screen, unwrapped
        assert line.strip() in text, line
    # the panel's lines do not wrap: every metric keeps its label and value on one line
    for label in ("sent 99999", "processed 123456", "active runs 1234", "dead letters 12", "p99"):
        assert any(label in line for line in lines), label


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
    assert "sent 99999" in line and "warn 900" in line and "block 1500" in line and "abort 300" in line


def test_config_notes_explain_the_unusual_agents():
    notes = "\n".join(config_notes(DEV_CONFIG))
    assert "agent-0001" in notes and "critical 8" in notes
    assert "ops-poller" in notes and "global breaker at 30" in notes
