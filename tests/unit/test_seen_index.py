"""The duplicate check's set index (``RunState.seen_index``) answers exactly as a scan of ``seen`` would.

The index is not stored: a state written and read back between any two events rebuilds it, so
the model below is checked with round trips through the stored form at random points.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwarden.detection import step
from loopwarden.detection.state import MAX_SEEN_EVENT_IDS, RunState, decode_state, encode_state
from loopwarden.schemas.config import FleetConfig
from tests.unit.helpers import event

CONFIG = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}}).resolve("a")


def call(event_id: str):
    return event("tool_call", agent_id="a", run_id="r", tool_name="read", params={"p": event_id}, event_id=event_id)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 180), st.booleans()), min_size=1, max_size=420))
def test_duplicates_match_a_scan_of_the_last_ids(steps):
    state: RunState | None = None
    window: list[str] = []  # the reference: the last MAX_SEEN_EVENT_IDS applied ids, scanned
    for n, round_trip in steps:
        event_id = f"id-{n}"
        if round_trip and state is not None:
            state = decode_state(encode_state(state))
        result = step(state, call(event_id), CONFIG)
        assert result.duplicate == (event_id in window)
        if not result.duplicate:
            window = (window + [event_id])[-MAX_SEEN_EVENT_IDS:]
        state = result.state
        assert state.seen == window


def test_an_id_is_forgotten_exactly_past_the_window():
    state = step(None, call("first"), CONFIG).state
    for i in range(MAX_SEEN_EVENT_IDS - 1):
        state = step(state, call(f"f{i}"), CONFIG).state
    assert step(state, call("first"), CONFIG).duplicate  # still one of the last MAX ids
    state = step(state, call("one-more"), CONFIG).state
    assert not step(state, call("first"), CONFIG).duplicate  # pushed out by one more id


def test_a_stored_list_with_a_repeated_id_is_scanned():
    # Never written by loopwarden; if read, forgetting the oldest copy must not forget the id.
    state = RunState(seen=["x"] + [f"f{i}" for i in range(MAX_SEEN_EVENT_IDS - 2)] + ["x"])
    state = step(state, call("new"), CONFIG).state
    assert "x" in state.seen and len(state.seen) == MAX_SEEN_EVENT_IDS
    assert step(state, call("x"), CONFIG).duplicate


def test_the_index_is_not_stored():
    state = step(None, call("e1"), CONFIG).state
    assert "_seen" in state.__dict__
    assert encode_state(state) == encode_state(decode_state(encode_state(state)))
    assert "_seen" not in decode_state(encode_state(state)).__dict__
