"""The ten odd-input cases on a live worker: its verdicts equal ``replay``'s for the same trace."""

from __future__ import annotations

import asyncio
import json

import pytest

from loopwarden.replay import replay_lines
from loopwarden.schemas.config import load_config
from loopwarden.schemas.events import decode_event, run_key
from tests.support.live import assert_matches, collect, decode_verdicts, produce

pytestmark = pytest.mark.integration

HUGE = "1" + "0" * 320
# Case 2 (-1e400) and case 7 (a 400-digit threshold) in the worker's own config file;
# case 5: the entry without an id is the agent `main` (low thresholds: blocks at count 3).
CONFIG = (
    '{"tools":{"loopDetection":{"enabled":true}},"agents":{"list":['
    '{"tools":{"loopDetection":{"warningThreshold":2,"criticalThreshold":3,"unknownToolThreshold":-1e400}}},'
    '{"id":"big","tools":{"loopDetection":{"warningThreshold":1' + "0" * 400 + "}}}]}}"
)


def _call(run: str, tool: str, params: str, cid: str | None = None, agent: str = "main") -> str:
    extra = f',"tool_call_id":"{cid}"' if cid else ""
    return f'{{"type":"tool_call","agent_id":"{agent}","run_id":"{run}","tool_name":{tool},"params":{params}{extra}}}'


def _result(run: str, tool: str, params: str, result: str, cid: str | None = None, agent: str = "main") -> str:
    extra = f',"tool_call_id":"{cid}"' if cid else ""
    return (
        f'{{"type":"tool_result","agent_id":"{agent}","run_id":"{run}","tool_name":{tool},'
        f'"params":{params},"result":{result}{extra}}}'
    )


def trace() -> list[str]:
    lines: list[str] = []
    for i in range(5):  # 1: numbers beyond the double range in params and results
        p = '{"bigId":%s}' % (HUGE if i % 2 else "1e400")
        lines += [_call("r1", '"read"', p, f"a{i}"), _result("r1", '"read"', p, "[-%s]" % HUGE, f"a{i}")]
    for i in range(4):  # 3: a lone surrogate makes another tool (ping-pong, not a repeat)
        tool = '"web_fetch"' if i % 2 == 0 else '"we\\udc00b_fetch"'
        lines += [_call("r3", tool, "{}", f"b{i}"), _result("r3", tool, "{}", '"ok"', f"b{i}")]
    for i in range(4):  # 4: a whitespace-only name is ""
        lines += [_call("r4", '"  "', "{}", f"c{i}"), _result("r4", '"  "', "{}", '"same"', f"c{i}")]
    lines.append("\u2028")  # 10: blank only to JavaScript: not an event, not counted
    for i in range(4):  # 6: "po\ud800ll" is not the known poll `poll`
        p = '{"action":"po\\ud800ll"}'
        lines += [
            _call("r6", '"process"', p, f"d{i}"),
            _result("r6", '"process"', p, '{"details":{"status":"running"}}', f"d{i}"),
        ]
    lines.append("\u00a0\ufeff")
    for i in range(22):  # 7: a 400-digit warningThreshold is Infinity: defaults 10/20 apply
        lines += [
            _call("r7", '"read"', "{}", f"e{i}", agent="big"),
            _result("r7", '"read"', "{}", '"same"', f"e{i}", agent="big"),
        ]
    for _ in range(3):  # 8: a blocked call without an id, its id-less result is the veto
        lines += [_call("r8", '"read"', "{}"), _result("r8", '"read"', "{}", '"same"')]
    lines += [_call("r8", '"read"', "{}"), _result("r8", '"read"', "{}", '"same"'), _call("r8", '"read"', "{}")]
    for i in range(3):  # 9: 70 blocked calls before their results: every result is a veto
        lines += [_call("r9", '"read"', "{}", f"f{i}"), _result("r9", '"read"', "{}", '"same"', f"f{i}")]
    lines += [_call("r9", '"read"', "{}", f"g{i}") for i in range(70)]
    lines += [_result("r9", '"read"', "{}", '"same"', f"g{i}") for i in range(70)]
    lines.append(_call("r9", '"read"', "{}", "last"))
    return lines


def test_odd_input_verdicts_equal_replay(tansu, names, workers, tmp_path):
    config = tmp_path / "odd.json"
    config.write_text(CONFIG)
    worker = workers(names, config=config)
    worker.wait_ready()

    lines = trace()
    events = [line for line in lines if line.strip(" \u2028\u00a0\ufeff")]
    items = [(run_key(decode_event(line.encode())).encode(), line.encode()) for line in events]
    positions = asyncio.run(produce(tansu, names.events, items))

    expected: dict[str, dict] = {}
    per_event: dict[int, int] = {}
    for row in replay_lines([line.encode() for line in lines], load_config(config)):
        assert isinstance(row, dict), row  # every line is a valid event
        if row["emitted"]:
            j = per_event.get(row["event_index"], 0)
            per_event[row["event_index"]] = j + 1
            partition, offset = positions[row["event_index"]]
            expected[f"{names.events}:{partition}:{offset}:{j}"] = row
    # the cases show up as OpenClaw would have them
    by_run: dict[str, list[dict]] = {}
    for row in expected.values():
        by_run.setdefault(row["run_id"], []).append(row)
    (pp,) = by_run["r3"]
    assert (pp["detector"], pp["tool_name"], pp["paired_tool_name"]) == ("ping_pong", "web_fetch", "we\udc00b_fetch")
    assert by_run["r4"][0]["tool_name"] == ""
    assert {r["detector"] for r in by_run["r6"]} == {"generic_repeat"}
    assert [r["count"] for r in by_run["r7"]] == [10, 20, 20]  # a warning at 10, then blocks at 20
    assert [r["count"] for r in by_run["r8"]] == [3, 3]
    assert [r["count"] for r in by_run["r9"]] == [3] * 71
    assert "r1" in by_run

    def done(records):
        return set(expected) <= {json.loads(r.value).get("verdict_id") for r in records}

    got = {v["verdict_id"]: v for _, v in decode_verdicts(collect(tansu, names.control, until=done, timeout=90))}
    assert set(got) == set(expected)
    for vid, row in expected.items():
        assert_matches(got[vid], row)
    m = worker.metrics()
    assert m["loopwarden_events_total"] == len(events)
