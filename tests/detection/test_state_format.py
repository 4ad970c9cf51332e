"""The stored run format (streams/detection/STATE.md), pinned by golden bytes in tests/data/state/.

``vN-*.bin`` were written by the code of format version N from :func:`representative` (every
slot away from its default, so each one is pinned). Files of older versions are never
rewritten: they must decode, to the very run they were written from in today's layout, for as
long as STATE.md says that version is read (versions 1-2 stored event ids and complete records'
call ids, which version 3 holds as digests and drops: their files decode to ``representative()``).
The current version's files must also be exactly what the encoders write today: a change that
moves a byte is a new format version (STATE.md's policy).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import msgspec
import pytest

from loopwarden.detection.state import (
    FORMAT_VERSION,
    Awaited,
    Enforcement,
    Guard,
    History,
    RunState,
    RunUsage,
    UnknownFormatVersion,
    decode_state,
    encode_state,
    event_digest,
    stored_version,
)
from loopwarden.schemas.config import FleetConfig
from loopwarden.worker.batch import Limits, apply_batch
from loopwarden.worker.metrics import Metrics
from loopwarden.worker.processor import RunProcessor
from loopwarden.worker.runcodec import RunValue, decode_value, encode_value
from loopwarden.worker.settings import Settings
from tests.support.helpers import MemRunTable, Rec

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "state"


def representative(tool: str = "web_search") -> RunState:
    """A run state with every slot set away from its default, so each one is pinned by the bytes."""
    history = History(
        tools=[tool, "exec", "process"],
        args=[f"{tool}:aa11", "exec:bb22", "process:cc33"],
        call_ids=[None, None, "call-3"],  # complete records keep no call id (v1-2 files hold "call-1")
        results=["r:dd44", None, None],
        unknowns=[None, "exec", None],
    )
    return RunState(
        history=history,
        buckets={"generic:web_search:aa11": 2, "global:exec:bb22": 1},
        guard=Guard(remaining=3, window=[("exec", "exec:bb22", "r:ee55")], aborted=True),
        blocked=["call-9"],
        seen=bytearray(event_digest("ev-1") + event_digest("ev-2")),
        blocked_without_id=1,
        blocked_overflow=2,
        joined=["sig:ff66"],
        enforcement=Enforcement(
            awaited=[Awaited(verdict_id="ev:0:6:0", action="block", ts=1764547200.25)],
            awaited_overflow=1,
            block_ids={"call-9": "ev:0:6:0"},
            abort_id="ev:0:9:0",
            violations=2,
            blocks=3,
            escalated=True,
        ),
        usage=RunUsage(
            tokens=[120, 0, 35],
            costs=[0.5, 0.0, 0.125],
            loops={"generic:web_search:aa11": [120, 0.5]},
            blocked={"web_search:aa11": ("generic_repeat", "generic:web_search:aa11", False)},
        ),
        prints={"r:dd44": "n1:0123456789abcdef0123456789abcdef"},
    )


def without_usage() -> RunState:
    state = representative()
    state.usage = None
    return state


# file stem (after "vN-") -> (codec, the value the file was written from)
CASES = {
    "state": ("state", representative),
    "state-no-usage": ("state", without_usage),
    "value": ("value", lambda: RunValue(offset=41, touched=1764547201.5, state=representative())),
    "value-ended": ("value", lambda: RunValue(offset=42, touched=1764547202.5, state=None)),
    "value-escaped": ("value", lambda: RunValue(offset=43, touched=1764547203.5, state=representative("we\udc00b"))),
}
CODECS = {"state": (encode_state, decode_state), "value": (encode_value, decode_value)}
VERSIONS = (1, 2, 3, 4)  # every version that has golden files and is still read


def as_of(version: int, value):
    """The value a file of ``version`` decodes to: versions before 4 have no ``prints`` slot."""
    state = value if isinstance(value, RunState) or value is None else value.state
    if version < 4 and state is not None:
        state.prints = None
    return value


def golden(version: int, stem: str) -> bytes:
    return (GOLDEN / f"v{version}-{stem}.bin").read_bytes()


def test_every_read_version_has_golden_files_of_every_case():
    assert VERSIONS[-1] == FORMAT_VERSION
    assert sorted(p.name for p in GOLDEN.glob("*.bin")) == sorted(f"v{v}-{s}.bin" for v in VERSIONS for s in CASES)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("stem", CASES)
def test_golden_bytes_decode_to_the_state_they_were_written_from(version, stem):
    codec, build = CASES[stem]
    raw = golden(version, stem)
    assert stored_version(raw) == version
    decoded = CODECS[codec][1](raw)
    assert decoded == as_of(version, build())
    state = decoded if codec == "state" else decoded.state
    if state is not None:  # bytes would compare equal, but a run must be able to remember more ids in place
        assert type(state.seen) is bytearray


@pytest.mark.parametrize("stem", CASES)
def test_the_current_version_writes_its_golden_bytes(stem):
    codec, build = CASES[stem]
    assert CODECS[codec][0](build()) == golden(FORMAT_VERSION, stem)


def test_version_2_is_version_1_behind_a_version_byte_with_every_slot_written():
    # v2 kept v1's slots in their order and added the profile's `extras` at the end; v1's
    # encode_state left a None usage out, v2 writes every slot, None ones too
    def body(version: int, stem: str) -> list:
        raw = golden(version, stem)
        raw = raw[1:] if version == 2 else raw
        return msgspec.msgpack.decode(raw[1:] if raw[:1] == b"\x00" else raw)  # past the escape byte

    # and Enforcement gained `after_abort` (a list, empty here) at its end
    enf = RunState.__struct_fields__.index("enforcement")

    def v1_as_v2(v1: list, tail: list) -> list:
        out = [*v1, *tail]
        out[enf] = [*out[enf], []]
        return out

    assert body(2, "state") == v1_as_v2(body(1, "state"), [None])
    assert body(2, "state-no-usage") == v1_as_v2(body(1, "state-no-usage"), [None, None])
    for stem in ("value", "value-escaped"):
        v1, v2 = body(1, stem), body(2, stem)
        assert v2[:2] == v1[:2] and v2[2] == v1_as_v2(v1[2], [None])


@pytest.mark.parametrize("slots", [5, 7, 8, 9])
def test_version_1_states_stored_before_later_slots_existed_decode_with_their_defaults(slots):
    # v1 grew at its end: before blocked_without_id/blocked_overflow (5), joined (7), enforcement (8), usage (9)
    old = msgspec.msgpack.encode(msgspec.msgpack.decode(golden(1, "state"))[:slots])
    back = decode_state(old)
    fresh = RunState()
    for name in RunState.__struct_fields__[slots:]:
        assert getattr(back, name) == getattr(fresh, name)
    for name in RunState.__struct_fields__[:slots]:
        assert getattr(back, name) == getattr(representative(), name)


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0x7F])
def test_a_newer_version_is_refused_by_name_not_misread(version):
    newer = bytes([version]) + golden(FORMAT_VERSION, "value")[1:]
    with pytest.raises(UnknownFormatVersion) as err:
        decode_value(newer)
    assert err.value.version == version and isinstance(err.value, msgspec.DecodeError)
    with pytest.raises(UnknownFormatVersion):
        decode_state(bytes([version]) + golden(FORMAT_VERSION, "state")[1:])


def test_a_version_1_worker_reads_version_2_as_undecodable():
    # what the worker before versions ran: a plain decode (no 0x00 escape at the front), whose
    # DecodeError it already answered by starting that run afresh, not by stopping the stream
    for stem in ("value", "value-escaped", "value-ended"):
        raw = golden(2, stem)
        assert raw[:1] != b"\x00"
        with pytest.raises(msgspec.DecodeError):
            msgspec.msgpack.decode(raw, type=RunValue)


# -- a newer value in the batch path: that run starts afresh, counted; the stream goes on ----------

ENABLED = FleetConfig.from_document(
    {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}
)


def call(i: int, run: str) -> bytes:
    body = {"type": "tool_call", "agent_id": "a", "run_id": run, "tool_name": "read", "tool_call_id": f"{run}-{i}"}
    return json.dumps({**body, "params": {"p": 1}}).encode()


async def _no_send(topic, key, value):
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(None)
    return fut


def test_a_run_stored_in_a_newer_version_starts_afresh_with_a_log_line_and_a_count(caplog):
    limits = Limits(control_topic="ctl", dead_letter_topic="dlq")
    seeded = apply_batch(
        [Rec("ev", 0, i, run.encode(), call(i, run)) for i, run in enumerate(["new", "old"])],
        lambda p, k: None,
        ENABLED,
        limits,
    )
    table = MemRunTable({})
    for (p, k), value in seeded.writes.items():
        raw = encode_value(value)
        table.data[(p, k)] = bytes([FORMAT_VERSION + 1]) + raw[1:] if b"new" in k else raw
    metrics = Metrics()
    processor = RunProcessor(Settings(), metrics, table, _no_send, lambda: ENABLED)

    async def go():
        records = [Rec("ev", 0, 10 + i, run.encode(), call(10 + i, run)) for i, run in enumerate(["new", "old"] * 2)]
        done = await processor.process(records)
        await asyncio.wait_for(done, 5)

    with caplog.at_level(logging.ERROR, logger="loopwarden.worker.committer"):
        asyncio.run(go())
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"stored format version {FORMAT_VERSION + 1}" in line and "starting the run afresh" in line
    assert metrics.unreadable_runs.labels("unknown_version")._value.get() == 1
    by_run = {json.loads(k)[-1]: decode_value(v) for (_p, k), v in table.data.items()}
    assert len(by_run["new"].state.history) == 2  # its two new calls only: started afresh
    assert len(by_run["old"].state.history) == 3  # the other run kept its state
    assert all(stored_version(v) == FORMAT_VERSION for v in table.data.values())  # rewritten in this version


def test_the_expiry_sweep_drops_newer_values_counted_apart_from_idle_runs():
    live = encode_value(RunValue(offset=1, touched=100.0, state=RunState()))
    newer = bytes([FORMAT_VERSION + 1]) + live[1:]
    table = MemRunTable({(0, b"a"): live, (0, b"b"): newer, (0, b"c"): b"\x93\xff"})
    metrics = Metrics()
    processor = RunProcessor(Settings(), metrics, table, _no_send, lambda: ENABLED)
    expired, active = asyncio.run(processor.expire({0}, now=101.0))
    assert (expired, active) == (0, 1) and list(table.data) == [(0, b"a")]
    assert metrics.unreadable_runs.labels("unknown_version")._value.get() == 1
    assert metrics.unreadable_runs.labels("undecodable")._value.get() == 1


def test_version_3_is_version_2_with_id_digests_and_no_call_ids_on_complete_records():
    v2, v3 = (msgspec.msgpack.decode(golden(v, "state")[1:]) for v in (2, 3))
    seen = RunState.__struct_fields__.index("seen")
    assert v3[seen] == b"".join(event_digest(i) for i in v2[seen])  # 8 bytes an id, one bytes object
    tools, args, call_ids, results, unknowns = v2[0]
    assert v3[0] == [tools, args, [c if r is None else None for c, r in zip(call_ids, results)], results, unknowns]
    assert v3[1:seen] == v2[1:seen] and v3[seen + 1 :] == v2[seen + 1 :]


def test_version_4_is_version_3_with_the_fleet_fingerprints_at_the_end():
    for stem in ("state", "state-no-usage"):
        v3, v4 = (msgspec.msgpack.decode(golden(v, stem)[1:]) for v in (3, 4))
        assert v4[:-1] == v3 and v4[-1] == {"r:dd44": "n1:0123456789abcdef0123456789abcdef"}


# -- a worker upgraded in place: runs stored by a version-2 worker go on where they were -----------


def test_a_worker_upgraded_in_place_keeps_a_run_stored_in_version_2():
    from loopwarden.detection.payloads import HASHER
    from loopwarden.detection.state import RunStateV2
    from loopwarden.schemas.events import decode_event
    from loopwarden.worker.runcodec import RunValueV2, state_key

    def call_with_id(i: int, event_id: str) -> bytes:
        return json.dumps({**json.loads(call(i, "old")), "event_id": event_id}).encode()

    sig = HASHER.call_info("read", b'{"p": 1}').sig
    # what a version-2 worker stored after three calls of the run, each with the same result:
    # event ids as strings, complete records with their call ids
    v2_state = RunStateV2(
        history=History(["read"] * 3, [sig] * 3, ["old-0", "old-1", "old-2"], ["same"] * 3, [None] * 3),
        seen=["e0", "e1"],
    )
    slot = (0, state_key(decode_event(call_with_id(0, "e0"))))
    table = MemRunTable({slot: b"\x02" + msgspec.msgpack.encode(RunValueV2(offset=1, touched=1.0, state=v2_state))})
    sent: list[tuple[str, bytes]] = []

    async def send(topic, key, value):
        sent.append((topic, value))
        return await _no_send(topic, key, value)

    processor = RunProcessor(Settings(), Metrics(), table, send, lambda: ENABLED)

    async def go():
        records = [Rec("ev", 0, 10, b"old", call_with_id(10, "e1")), Rec("ev", 0, 11, b"old", call_with_id(11, "e2"))]
        await asyncio.wait_for(await processor.process(records), 5)

    asyncio.run(go())
    verdicts = [json.loads(v) for topic, v in sent if topic == Settings().control_topic]
    # e1 was a duplicate (remembered from version 2); e2 repeats the run's three calls: blocked
    assert [(v["detector"], v["action"], v["count"]) for v in verdicts] == [("generic_repeat", "block", 3)]
    stored = table.data[slot]
    assert stored_version(stored) == FORMAT_VERSION
    state = decode_value(stored).state
    assert state.history.call_ids == [None] * 3 and state.history.results == ["same"] * 3  # not recorded: blocked
    assert all(state.has_seen(e) for e in ("e0", "e1", "e2")) and state.blocked == ["old-11"]
