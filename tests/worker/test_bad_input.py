"""Malformed events go to the dead-letter topic with reason and position; the stream goes on."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json

import pytest

from loopwarden.schemas.verdicts import MAX_DEAD_LETTER_RAW
from tests.support.live import collect, decode_verdicts, produce

pytestmark = pytest.mark.integration

LOOP = {
    "type": "tool_call",
    "agent_id": "a1",
    "session_id": "s1",
    "run_id": "r1",
    "tool_name": "read",
    "params": {"path": "/x"},
}

BAD = {
    "bad_json": b'{"type": "tool_call", "agent_id": ',
    "wrong_type": json.dumps({**LOOP, "await_decision": "yes"}).encode(),
    "missing_field": json.dumps({"type": "tool_call", "tool_name": "read"}).encode(),
    "unknown_type": json.dumps({**LOOP, "type": "tool_dance"}).encode(),
    "blank_agent_id": json.dumps({**LOOP, "agent_id": "  "}).encode(),
    "too_large": json.dumps({**LOOP, "params": {"blob": "x" * 5000}}).encode(),  # over the 4 KB kept in its letter
    "too_deep": json.dumps({**LOOP, "params": json.loads("[" * 40 + "]" * 40)}).encode(),
    "id_too_long": json.dumps({**LOOP, "tool_call_id": "c" * 513}).encode(),
}


def test_dead_letters_and_the_stream_goes_on(tansu, names, workers, tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    worker = workers(names, config=config, extra=["--max-event-bytes", "4096", "--max-depth", "32"])
    worker.wait_ready()

    good = json.dumps(LOOP).encode()
    items: list[tuple[bytes | None, bytes | None]] = []
    for i in range(12):  # a looping run; bad messages between its calls on the same key
        items.append((b"r1", good))
        reason = list(BAD)[i % len(BAD)] if i < len(BAD) else None
        if reason:
            items.append((b"r1", BAD[reason]))
    items.append((b"not-the-run-key", json.dumps({**LOOP, "run_id": "r2"}).encode()))  # misrouted
    positions = asyncio.run(produce(tansu, names.events, items))

    letters = collect(tansu, names.dead_letter, until=lambda rs: len(rs) >= len(BAD) + 1)
    assert len(letters) == len(BAD) + 1
    (misrouted,) = [r for r in letters if r.key == b"not-the-run-key"]  # its run's events may sit elsewhere
    assert json.loads(misrouted.value)["reason"] == "misrouted"
    letters.remove(misrouted)
    by_reason = {}
    for record in letters:
        letter = json.loads(record.value)
        assert set(letter) == {"reason", "detail", "topic", "partition", "offset", "raw", "size", "sha256"}
        assert record.key == b"r1"
        assert letter["topic"] == names.events
        _, raw = items[positions.index((letter["partition"], letter["offset"]))]
        assert base64.b64decode(letter["raw"]) == raw[:MAX_DEAD_LETTER_RAW]  # a bounded prefix...
        assert (letter["size"], letter["sha256"]) == (len(raw), hashlib.sha256(raw).hexdigest())  # ...of this record
        by_reason[letter["reason"]] = raw
    assert by_reason == BAD

    # The run's good events were all processed: its 10th identical call is a warning.
    verdicts = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 1))
    assert [v["detector"] for _k, v in verdicts] == ["generic_repeat"]
    assert verdicts[0][1]["count"] == 10

    m = worker.metrics()
    for reason in BAD:
        assert m[f'loopwarden_dead_letters_total{{reason="{reason}"}}'] == 1
    assert m["loopwarden_misrouted_events_total"] == 1
    assert m['loopwarden_dead_letters_total{reason="misrouted"}'] == 1
    assert m['loopwarden_events_total{type="tool_call"}'] == 13
