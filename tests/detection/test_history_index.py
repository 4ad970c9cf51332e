"""The per-signature count index beside a run's history: derived, never stored, always equal to a recount."""

from __future__ import annotations

import random

from loopwarden.detection.history import record_call, record_outcome
from loopwarden.detection.state import History, RunState, decode_state, encode_state


def _recount(h: History, sig: str) -> int:
    return h.args.count(sig)


def test_count_matches_a_recount_through_pushes_trims_and_shrinking_sizes():
    rng = random.Random(3)
    h = History()
    sigs = [f"t:{i}" for i in range(6)]
    for step in range(2000):
        size = rng.choice((30, 30, 30, 7, 3))  # §1.8: a smaller size trims at the next record
        sig = rng.choice(sigs)
        if rng.random() < 0.5:
            record_call(h, "t", sig, None, size)
        else:
            record_outcome(h, "t", sig, None, f"r{rng.randint(0, 2)}", None, size)
        probe = rng.choice(sigs)
        assert h.count(probe) == _recount(h, probe), step
    assert sum(h.count(s) for s in sigs) == len(h)


def test_index_is_not_stored_and_is_rebuilt_after_decode():
    state = RunState()
    for i in range(40):
        record_call(state.history, "t", f"t:{i % 3}", None, 30)
    assert state.history.count("t:0") == 10
    raw = encode_state(state)
    fresh = RunState()
    for i in range(40):
        fresh.history.push("t", f"t:{i % 3}", None, None, None, 30)  # same records, index never built
    assert raw == encode_state(fresh)  # the index adds no bytes
    back = decode_state(raw)
    assert back.history.count("t:0") == 10 and back.history.count("t:9") == 0
    record_call(back.history, "t", "t:0", None, 30)  # drops the oldest ("t:1")
    assert back.history.count("t:0") == 11 and back.history.count("t:1") == _recount(back.history, "t:1")
