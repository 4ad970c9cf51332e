"""Duplicate deliveries: a run remembers its last ``MAX_SEEN_EVENT_IDS`` event ids as 64-bit digests
(``RunState.seen``, format v3) and drops an event whose id is among them, exactly as a scan of the
last ids would. The digests are what is stored, so the model below is checked with round trips
through the stored form at random points.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwarden.detection import step
from loopwarden.detection.state import (
    EVENT_DIGEST_SIZE,
    MAX_SEEN_EVENT_IDS,
    RunState,
    RunStateV2,
    decode_state,
    encode_state,
    event_digest,
    find_digest,
)
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import decode_event
from tests.support.helpers import event

CONFIG = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}}).resolve("a")


def call(event_id: str):
    return event("tool_call", agent_id="a", run_id="r", tool_name="read", params={"p": event_id}, event_id=event_id)


def digests(ids: list[str]) -> bytearray:
    return bytearray(b"".join(event_digest(i) for i in ids))


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
        assert state.seen == digests(window)


def test_an_id_is_forgotten_exactly_past_the_window():
    state = step(None, call("first"), CONFIG).state
    for i in range(MAX_SEEN_EVENT_IDS - 1):
        state = step(state, call(f"f{i}"), CONFIG).state
    assert step(state, call("first"), CONFIG).duplicate  # still one of the last MAX ids
    state = step(state, call("one-more"), CONFIG).state
    assert not step(state, call("first"), CONFIG).duplicate  # pushed out by one more id
    assert len(state.seen) == MAX_SEEN_EVENT_IDS * EVENT_DIGEST_SIZE


def test_bytes_straddling_two_digests_are_not_a_remembered_id():
    seen = bytearray(b"AAAAAAAA" + b"BBBBBBBB" + b"AAAABBBB")
    assert find_digest(seen, b"AAAABBBB") == 16  # found at its own boundary, not at byte 4
    assert find_digest(seen[:16], b"AAAABBBB") == -1
    assert find_digest(seen, b"BBBBBBBB") == 8


def test_ids_with_lone_surrogates_are_remembered_and_stored():
    def lone(code: str):  # JSON.parse keeps a lone surrogate escape; so does decode_event
        return decode_event(
            f'{{"type": "tool_call", "agent_id": "a", "tool_name": "read", "event_id": "id-\\u{code}"}}'
        )

    state = step(None, lone("dc00"), CONFIG).state
    assert state.has_seen("id-\udc00")
    assert step(decode_state(encode_state(state)), lone("dc00"), CONFIG).duplicate
    assert not step(state, lone("dc01"), CONFIG).duplicate


def test_a_stored_list_with_a_repeated_id_keeps_the_id_until_its_last_copy_leaves():
    # format v1/v2 stored the ids themselves; a repeated one (never written by loopwarden) is read
    # as two digests, so forgetting the oldest copy does not forget the id
    old = RunStateV2(seen=["x"] + [f"f{i}" for i in range(MAX_SEEN_EVENT_IDS - 2)] + ["x"])
    state = step(old.upgrade(), call("new"), CONFIG).state
    assert state.has_seen("x") and len(state.seen) == MAX_SEEN_EVENT_IDS * EVENT_DIGEST_SIZE
    assert step(state, call("x"), CONFIG).duplicate
