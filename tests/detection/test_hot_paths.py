"""The engine's fast paths give exactly what the plain rules give.

History: a reference model (a list of records, §6.2/§6.3 written out naively)
against ``record_call``/``record_outcome``/``History.push`` with their shortcuts
(the newest pending record checked first, a full window sliding by one).
Config: agents without a block of their own share the fleet-wide config.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwarden.detection.history import record_call, record_outcome
from loopwarden.detection.state import History
from loopwarden.schemas.config import FleetConfig, resolve_block

_TOOLS = ("read", "exec", "a:b")  # a colon in a tool name must not make two signatures collide


def _model_call(records: list, tool: str, sig: str, call_id: str | None, size: int) -> None:
    records.append([tool, sig, call_id, None, None])
    del records[: max(0, len(records) - size)]


def _model_outcome(
    records: list, tool: str, sig: str, call_id: str | None, result: str, unknown: str | None, size: int
) -> None:
    for rec in reversed(records):
        if rec[1] == sig and rec[3] is None and rec[0] == tool and (not call_id or rec[2] == call_id):
            rec[2], rec[3], rec[4] = None, result, unknown  # complete: its call id is not kept
            break
    else:
        records.append([tool, sig, None, result, unknown])
    del records[: max(0, len(records) - size)]


_op = st.tuples(
    st.booleans(),  # call or outcome
    st.sampled_from(_TOOLS),
    st.integers(0, 3),  # params
    st.sampled_from((None, "", "c1", "c2")),
    st.sampled_from(("r1", "r2")),
    st.sampled_from((None, None, "ghost")),
    st.sampled_from((30, 30, 5, 2, 1)),  # §1.8: the size in force may shrink and grow
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=80))
def test_history_matches_the_reference_model(ops):
    h, records = History(), []
    for is_call, tool, p, call_id, result, unknown, size in ops:
        sig = f"{tool}:{p}"
        if is_call:
            record_call(h, tool, sig, call_id, size)
            _model_call(records, tool, sig, call_id, size)
        else:
            record_outcome(h, tool, sig, call_id, result, unknown, size)
            _model_outcome(records, tool, sig, call_id, result, unknown, size)
        assert [list(r) for r in zip(h.tools, h.args, h.call_ids, h.results, h.unknowns)] == records
        assert all(h.count(s) == h.args.count(s) for s in set(h.args) | {"read:0"})


def test_agents_without_a_block_share_the_fleet_wide_config():
    doc = {"tools": {"loopDetection": {"enabled": True, "historySize": 12}}}
    fleet = FleetConfig.from_document(doc)
    assert fleet.resolve("a") is fleet.resolve("b")
    assert fleet.resolve("a") == resolve_block(doc["tools"]["loopDetection"])
    doc["agents"] = {"list": [{"id": "x", "tools": {"loopDetection": {"historySize": 7}}}, {"id": "y"}]}
    fleet = FleetConfig.from_document(doc)
    assert fleet.resolve("x").history_size == 7 and fleet.resolve("X ").history_size == 7
    assert fleet.resolve("y") is fleet.resolve("z") and fleet.resolve("z").history_size == 12


def test_payload_memo_entries_are_invisible_to_the_cyclic_gc():
    """Thousands of memo entries survive between events; as GC-tracked tuples they made the
    collector run several times as often. Keys and values must stay untracked objects."""
    import gc

    from loopwarden.detection import step
    from loopwarden.detection.payloads import HASHER
    from loopwarden.schemas.events import decode_event

    fleet = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})
    HASHER.clear()
    state = None
    for raw in (
        b'{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":"read","tool_call_id":"c1","params":{"path":"x"}}',
        b'{"type":"tool_result","agent_id":"a","run_id":"r","tool_name":"read","tool_call_id":"c1",'
        b'"params":{"path":"x"},"result":{"content":[{"type":"text","text":"hi"}]}}',
        b'{"type":"tool_result","agent_id":"a","run_id":"r","tool_name":"read","params":{"path":"y"},"error":"boom"}',
    ):
        state = step(state, decode_event(raw), fleet.resolve("a")).state
    memos = (HASHER.calls.entries, HASHER.results.entries, HASHER.errors.entries)
    assert all(memos)
    for entries in memos:
        for key, value in entries.items():
            assert not gc.is_tracked(key) and not gc.is_tracked(value), (key, value)
    HASHER.clear()


def test_the_engines_memo_probe_finds_what_the_hasher_stored(monkeypatch):
    """The engine probes the results memo with a key it builds inline (no method call per event);
    it must be the key the hasher stores under, or every repeated result would be hashed again."""
    from loopwarden.detection import step
    from loopwarden.detection.payloads import HASHER, Hasher
    from loopwarden.schemas.events import decode_event

    config = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}}).resolve("a")
    HASHER.clear()

    def pair(tool: str, n: int) -> list:
        head = f'"agent_id":"a","run_id":"r{n}","tool_name":"{tool}","tool_call_id":"c","params":{{"command":"ls"}}'
        return [
            decode_event(f'{{"type":"tool_call",{head}}}'),
            decode_event(f'{{"type":"tool_result",{head},"result":{{"content":[{{"type":"text","text":"x"}}]}}}}'),
        ]

    def run(events) -> None:
        state = None
        for ev in events:
            state = step(state, ev, config).state

    for tool in ("exec", "read"):
        run(pair(tool, 1))  # hashed once, stored
    assert len(HASHER.results.entries) == 2

    def hashed_again(*args):
        raise AssertionError(f"hashed again: {args}")

    monkeypatch.setattr(Hasher, "outcome", hashed_again)
    for tool in ("exec", "read"):
        run(pair(tool, 2))  # the same results: found by the engine's own probe
    HASHER.clear()
