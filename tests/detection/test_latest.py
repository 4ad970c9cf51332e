"""The ``openclaw-latest`` profile, one test or more per numbered behaviour of RULES.md §14
(``test_l5_3_...`` pins L5.3 there).

Every expected digest is the SHA-256 of a canonical string written out here by hand (``sha``/``sig``
in helpers); events go through ``step()`` with the profile on, and record fields are read back from
the run's history where no verdict shows them.
"""

from __future__ import annotations

import json

from loopwarden.detection import latest, step
from loopwarden.detection.latest_hashing import (
    KIND_EXEC_FAILURE,
    KIND_NONE,
    KIND_VETO,
    KIND_WRITE_MUTATION,
    LATEST_HASHER,
    Outcome,
    call_digest,
    mask_volatile,
    outcome_digest,
)
from loopwarden.detection.state import RunState
from loopwarden.schemas.events import decode_event
from loopwarden.schemas.extensions import Extensions
from tests.support.helpers import (
    LOW,
    MISSING,
    Run,
    cfg,
    msg_churn,
    msg_compaction,
    msg_generic_critical_latest,
    msg_generic_warning,
    msg_global_latest,
    msg_pp_warning,
    msg_unknown,
    msg_write_churn,
    sha,
    sig,
    text_hash,
    text_result,
)

PROFILE = Extensions(profile="openclaw-latest")
WRITE_CHURN = Extensions(profile="openclaw-latest", write_churn=True)  # upstream's write churn, opted in
ON = {"enabled": True}
E = "Tool execution failed: timeout"  # an ordinary error (no unknown-tool name)
E_HASH = "error:" + sha(json.dumps(E))
UNCHANGED = sha('{"status":"unchanged"}')


class LRun(Run):
    """A run driven through ``step()`` with the profile on."""

    ext = PROFILE

    def feed(self, ev, block=MISSING):
        config = self.config if block is MISSING else cfg(block)
        res = step(self.state, ev, config, ext=self.ext)
        self.state = res.state
        return list(res.detections)

    def text(self, text: str):
        """An event given as JSON text (lone surrogate escapes survive)."""
        return self.feed(decode_event(text.encode("utf-8")))

    def records(self) -> list[dict]:
        h = self.state.history
        x = latest.extras(self.state)
        return [
            {
                "tool": h.tools[i],
                "sig": h.args[i],
                "result": h.results[i],
                "unknown": h.unknowns[i],
                "target": x.targets[i],
                "kind": x.kinds[i],
                "identity": x.identities[i],
                "no_progress": x.no_progress[i],
            }
            for i in range(len(h))
        ]


class WRun(LRun):
    """The profile with upstream's write-mutation churn opted in (``writeChurn: true``)."""

    ext = WRITE_CHURN


def brief(dets) -> list[tuple]:
    return [(d.detector, d.level, d.count) for d in dets]


def wrapper(id_: str, middle: str = "page text", bs: str = "", end_id: str | None = None) -> str:
    end = id_ if end_id is None else end_id
    return (
        f'<<<EXTERNAL_UNTRUSTED_CONTENT id={bs}"{id_}{bs}">>>{middle}'
        f'<<<END_EXTERNAL_UNTRUSTED_CONTENT id={bs}"{end}{bs}">>>'
    )


ID1, ID2 = "0123456789abcdef", "fedcba9876543210"
ZERO = "0" * 16


def fail(output: str, code=1, status="failed", **details) -> dict:
    return {"details": {"status": status, "exitCode": code, "aggregated": output, **details}}


# ================================================================ L1 configuration


def test_l1_1_without_enabled_calls_are_not_recorded_but_outcomes_are():
    """As the release: a call is recorded only when ``enabled`` is true; its outcome is recorded anyway
    (appended), so the streak is the same once detection is switched on."""
    run = LRun({})  # enabled missing: nothing detected
    for _ in range(25):
        assert run.pair("read", {"p": 1}, result="same") == []
    run.call("read", {"p": 2})  # no outcome ever comes: leaves no record
    assert [r["sig"] for r in run.records()].count(sig("read", '{"p":2}')) == 0
    assert len(run.records()) == 25
    dets = run.call("read", {"p": 1}, block=ON)
    assert brief(dets) == [("generic_repeat", "critical", 25)]
    assert dets[0].message == msg_generic_critical_latest("read", 25)


def test_l1_4_a_blank_name_is_judged_as_tool_and_recorded_blank():
    """The release normalizes a blank name twice: judged as ``tool`` (it meets a real ``tool``'s history,
    keys and messages say ``tool``), recorded as ``""``; its block records no veto, so it stays blocked."""
    run = LRun(ON)
    for _ in range(20):
        run.pair("tool", {}, result="same")
    dets = run.call(" ", {})
    assert brief(dets) == [("generic_repeat", "critical", 20)]
    assert dets[0].tool_name == "tool" and dets[0].warning_key.startswith(f"generic:tool:{sig('tool', '{}')}:")
    assert len(run.records()) == 20  # no veto recorded for the blank call
    assert brief(run.call("\t", {})) == [("generic_repeat", "critical", 20)]
    fresh = LRun(ON)
    for _ in range(12):
        fresh.pair(" ", {}, result="same")  # never meets its own records: no verdict
    assert [r["tool"] for r in fresh.records()] == [""] * 12


def test_l1_2_numeric_knobs_and_detector_switches_are_ignored():
    block = {
        **LOW,
        "historySize": 5,
        "unknownToolThreshold": 2,
        "detectors": {"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False},
    }
    run = LRun(block)
    seen = {}
    for i in range(1, 22):
        dets = run.pair("read", {"p": 1}, result="same")
        if dets:
            seen[i] = brief(dets)[0]
    assert min(seen) == 11 and seen[11] == ("generic_repeat", "warning", 10)  # warning 10, not 2
    assert seen[21] == ("generic_repeat", "critical", 20)  # critical 20, window 30 (not 5), switch ignored
    assert len(run.state.history) == 21  # 20 calls and the blocked call's veto


def test_l1_2_unknown_tool_threshold_is_ten():
    run = LRun({"enabled": True, "unknownToolThreshold": 2})
    first = None
    for i in range(1, 12):
        dets = run.pair("browser", {"u": i}, error="Unknown tool: browser")
        if dets and first is None:
            first = (i, brief(dets)[0], dets[0].warning_key, dets[0].message)
    assert first == (
        11,
        ("unknown_tool_repeat", "critical", 10),
        "unknown-tool:browser:browser",
        msg_unknown("browser", 10),
    )


def test_l1_2_window_is_thirty_whatever_history_size_says():
    run = LRun({"enabled": True, "historySize": 5})
    for i in range(40):
        run.pair("read", {"i": i}, result="x")
    assert len(run.state.history) == 30


# ================================================================ L2 canonical serialization


def test_l2_1_lone_surrogates_are_escaped_in_signatures_not_dropped():
    call = '{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":"read","params":{"q":"\\ud800"}}'
    run = LRun(ON)
    for _ in range(10):
        run.text(call)
    (det,) = run.text(call)
    # the canonical form holds the six characters \ud800
    assert det.warning_key == "generic:read:" + sig("read", '{"q":"\\ud800"}')
    off = Run(ON)
    for _ in range(10):
        off.feed(decode_event(call))
    (det,) = off.feed(decode_event(call))
    assert det.warning_key == "generic:read:" + sig("read", '{"q":""}')  # the docs revision drops it


def test_l2_1_lone_surrogates_in_keys_and_results_are_escaped():
    assert call_digest({"k\udc00": 1}) == sha('{"k\\udc00":1}')
    run = LRun(ON)
    run.call("read", {}, id="c1")
    run.text(
        '{"type":"tool_result","agent_id":"a","run_id":"run-1","tool_name":"read","tool_call_id":"c1",'
        '"params":{},"result":["a\\udbff"]}'
    )
    assert run.records()[-1]["result"] == sha('["a\\udbff"]')


def test_l2_1_outcome_keys_sort_by_normalized_form_then_raw_key():
    a, b = wrapper(ID1), wrapper(ID2)  # normalize to the same key; raw ID1 < ID2
    value = {b: "second", a: "first", "zz": 0}
    zero = json.dumps(wrapper(ZERO))
    assert outcome_digest(value) == sha("{" + f'{zero}:"first",{zero}:"second","zz":0' + "}")
    # call digests do not normalize
    assert call_digest(value) == sha("{" + f'{json.dumps(a)}:"first",{json.dumps(b)}:"second","zz":0' + "}")


def test_l2_1_without_surrogates_or_wrappers_digests_are_the_docs_revisions():
    value = {"b": [1, 2.5, None, "é😀"], "a": {"y": True}}
    expected = sha('{"a":{"y":true},"b":[1,2.5,null,"é😀"]}')
    assert call_digest(value) == outcome_digest(value) == expected


# ================================================================ L3 outcome hashing


def test_l3_1_error_comes_before_every_result_rule():
    run = LRun(ON)
    run.pair("write", {"path": "a"}, result={"details": {"changed": False}}, error=E)
    rec = run.records()[-1]
    assert (rec["result"], rec["kind"], rec["no_progress"]) == (E_HASH, KIND_NONE, True)


def test_l3_1_veto_comes_before_the_write_rules():
    run = LRun(ON)
    veto = {"details": {"status": "blocked", "deniedReason": "tool-loop", "changed": True}}
    run.pair("write", {"path": "a"}, result=veto)
    rec = run.records()[-1]
    assert (rec["result"], rec["kind"]) == (None, KIND_VETO)


def test_l3_1_non_object_result_is_digested_whole():
    run = LRun(ON)
    run.pair("write", {"path": "a"}, result=[wrapper(ID1)])
    assert run.records()[-1]["result"] == sha("[" + json.dumps(wrapper(ZERO)) + "]")


def _result_of(text: str) -> str:
    run = LRun(ON)
    run.pair("web_fetch", {"url": "u"}, result=text_result(text))
    return run.records()[-1]["result"]


def test_l3_2_wrapper_ids_are_normalized_in_outcomes():
    assert _result_of(wrapper(ID1)) == _result_of(wrapper(ID2)) == text_hash(wrapper(ZERO))
    assert _result_of("before " + wrapper(ID1) + " between " + wrapper(ID2, "b")) == text_hash(
        "before " + wrapper(ZERO) + " between " + wrapper(ZERO, "b")
    )


def test_l3_2_what_is_not_normalized():
    for text in (
        wrapper(ID1, end_id=ID2),  # start and end ids differ
        wrapper(ID1.upper()),  # uppercase hex
        wrapper("0123456789abcde"),  # 15 characters
        wrapper(ID1, "x<<<EXTERNAL_UNTRUSTED_CONTENT y"),  # a marker inside
        wrapper(ID1, bs="\\\\"),  # two backslashes: not 2**k - 1
        wrapper(ID1, 'say "hi"', bs="\\"),  # a bare quote inside a once-escaped wrapper
    ):
        assert _result_of(text) == text_hash(text), text


def test_l3_2_a_json_encoded_wrapper_inside_a_string_is_normalized():
    inner = 'say \\"hi\\"'  # quotes escaped like the wrapper's own (one backslash)
    assert _result_of(wrapper(ID1, inner, bs="\\")) == text_hash(wrapper(ZERO, inner, bs="\\"))
    # three backslashes (2**2 - 1) and quotes at that depth: normalized too
    assert _result_of(wrapper(ID1, 'x\\\\\\"y', bs="\\\\\\")) == text_hash(wrapper(ZERO, 'x\\\\\\"y', bs="\\\\\\"))


def test_l3_2_params_are_never_normalized():
    run = LRun(ON)
    for id_ in (ID1, ID2):
        run.pair("web_fetch", {"q": wrapper(id_)}, result="x")
    sigs = [r["sig"] for r in run.records()]
    assert sigs == [sig("web_fetch", '{"q":' + json.dumps(wrapper(i)) + "}") for i in (ID1, ID2)]


def test_l3_3_write_unchanged_write_mutation_and_other_changed_values():
    run = LRun(ON)
    run.pair("write", {"path": "a", "content": "x"}, result=text_result("no change", changed=False, path="a"))
    run.pair("write", {"path": "a", "content": "y"}, result=text_result("wrote", changed=True, path="a"))
    run.pair("write", {"path": "a", "content": "z"}, result=text_result("wrote", changed="yes"))
    run.pair("write", {"path": "a", "content": "w"}, result=text_result("wrote"))
    run.pair("edit", {"path": "a"}, result=text_result("same", changed=False))  # only the write tool
    got = [(r["result"], r["kind"], r["no_progress"]) for r in run.records()]
    assert got == [
        (UNCHANGED, KIND_NONE, True),
        (text_hash("wrote", '{"changed":true,"path":"a"}'), KIND_WRITE_MUTATION, False),
        (text_hash("wrote", '{"changed":"yes"}'), KIND_NONE, False),
        (text_hash("wrote"), KIND_NONE, False),
        (text_hash("same", '{"changed":false}'), KIND_NONE, False),
    ]


def test_l3_4_a_veto_result_is_recorded_and_other_blocked_results_are_hashed():
    run = LRun(ON)
    run.call("read", {"p": 1}, id="c1")
    run.result("read", {"p": 1}, id="c1", result={"details": {"status": "blocked", "deniedReason": "tool-loop"}})
    run.pair("read", {"p": 2}, result={"details": {"status": "blocked", "deniedReason": "plugin"}})
    recs = run.records()
    assert (recs[0]["result"], recs[0]["kind"]) == (None, KIND_VETO)  # filled the pending call
    assert recs[1]["result"] == sha('{"details":{"deniedReason":"plugin","status":"blocked"},"text":""}')
    assert len(recs) == 2


def test_l3_5_errors_are_no_progress_and_keep_unknown_tool_names():
    run = LRun(ON)
    run.pair("read", {}, error=E)
    run.pair("jira", {}, error="Tool jira not found")
    a, b = run.records()
    assert (a["result"], a["no_progress"], a["unknown"]) == (E_HASH, True, None)
    assert (b["no_progress"], b["unknown"]) == (True, "jira")


def test_l3_6_exec_terminal_failures():
    cases = [
        (fail("boom"), True),
        (fail("boom", status="completed", code=2), True),
        (fail("boom", code=1.5), True),
        (fail("boom", code=0), False),
        (fail("boom", code="1"), False),
        (fail("boom", timedOut=True), False),
        (fail(""), False),  # no aggregated and no text: empty output
        (fail("  (Command exited with code 1) "), False),  # the footer alone
        (fail("(Command exited with code 1.5)", code=1.5), False),
        (fail("(Command exited with code 2)"), True),  # another code's footer is real output
        (fail("boom", status="running"), False),
        ({"details": {"exitCode": 1, "aggregated": "boom"}}, False),  # no status: generic rule
    ]
    for result, terminal in cases:
        run = LRun(ON)
        run.pair("exec", {"command": "c"}, result=result)
        rec = run.records()[-1]
        assert (rec["kind"] == KIND_EXEC_FAILURE) is terminal, result
        assert (rec["identity"] is not None) is terminal
    # the resultHash stays the docs revision's exec projection; the text is used when aggregated is blank
    run = LRun(ON)
    run.pair("exec", {"command": "c"}, result={**text_result("from text"), **fail("   ")})
    rec = run.records()[-1]
    expected = sha('{"exitCode":1,"output":"from text","status":"failed","timedOut":false}')
    assert (rec["result"], rec["identity"], rec["kind"]) == (expected, expected, KIND_EXEC_FAILURE)


# ================================================================ L4 records


def test_l4_2_mutation_target_of_a_write_call():
    run = WRun(ON)
    run.call("write", {"path": "/w/a.txt", "content": "x"})
    run.call("write", {"path": "a.txt"}, cwd="/w")
    run.call("write", {"path": "../b/./a.txt"}, cwd="/w/sub")
    run.call("write", {"path": "a.txt"})  # no cwd: the path as sent
    run.call("write", {"path": ""})
    run.call("write", {"path": 5})
    run.call("read", {"path": "/w/a.txt"})
    targets = [r["target"] for r in run.records()]
    absolute = sha('{"path":"/w/a.txt"}')
    assert targets == [absolute, absolute, sha('{"path":"/w/b/a.txt"}'), sha('{"path":"a.txt"}'), None, None, None]


def test_l4_2_mutation_target_on_an_appended_outcome_record():
    run = WRun(ON)
    run.result("write", {"path": "p"}, result=text_result("ok", changed=True), id="orphan")
    (rec,) = run.records()
    assert (rec["target"], rec["kind"]) == (sha('{"path":"p"}'), KIND_WRITE_MUTATION)


def test_l4_3_failure_identity_masks_times_attempts_durations_and_pids():
    out = "2024-05-01T10:00:00.123Z attempt 3 took 1.5s pid 4242 at 10:00:01 errno 111"
    assert mask_volatile(out) == "# # took # # at # errno 111"
    assert mask_volatile("retry#7 ppid=12 2024-05-01 10:00:00+02:00 waited 30 ms, 2 minutes") == ("# # # waited #, #")
    run = LRun(ON)
    run.pair("exec", {"command": "c"}, result=fail(out))
    rec = run.records()[-1]
    assert rec["identity"] == sha(
        '{"exitCode":1,"output":"# # took # # at # errno 111","status":"failed","timedOut":false}'
    )
    assert rec["result"] == sha('{"exitCode":1,"output":' + json.dumps(out) + ',"status":"failed","timedOut":false}')


def test_l4_3_other_numbers_are_kept():
    run = LRun(ON)
    run.pair("exec", {"command": "c"}, result=fail("connect failed: errno 111"))
    run.pair("exec", {"command": "c"}, result=fail("connect failed: errno 113"))
    a, b = run.records()
    assert a["identity"] != b["identity"]


def test_l4_4_pending_means_neither_hash_nor_kind_and_fields_are_copied():
    run = LRun(ON)
    run.call("exec", {"command": "c"}, id=None)
    run.result("exec", {"command": "c"}, result={"details": {"status": "blocked", "deniedReason": "tool-loop"}})
    run.result("exec", {"command": "c"}, result=fail("boom"))  # the veto record is not pending: appended
    a, b = run.records()
    assert (a["kind"], a["result"]) == (KIND_VETO, None)
    assert (b["kind"], b["result"] is not None, b["identity"] is not None) == (KIND_EXEC_FAILURE, True, True)
    run.call("read", {}, id="c9")
    run.result("read", {}, id="c9", error=E)
    assert run.records()[-1]["no_progress"] is True and len(run.records()) == 3


# ================================================================ L5 argument churn


def test_l5_2_no_progress_churn_warns_with_its_liveness_signal():
    run = LRun(ON)
    for q in ("a", "b"):
        for _ in range(5):
            run.pair("search", {"q": q}, error=E)
    (det,) = run.call("search", {"q": "a"})
    assert (det.detector, det.level, det.count, det.action, det.emitted) == (
        "argument_churn",
        "warning",
        10,
        "warn",
        True,
    )
    assert det.warning_key == "argument-churn:search"
    assert det.message == msg_churn("search", 2, 10)
    assert det.liveness_signal == "argument_churn"


def test_l5_2_pending_calls_and_vetoes_do_not_break_the_walk():
    run = LRun(ON)
    for q in ("a", "b"):
        for _ in range(5):
            run.pair("search", {"q": q}, error=E)
        run.call("search", {"q": "in flight"})
    assert brief(run.call("search", {"q": "b"})) == [("argument_churn", "warning", 10)]


def test_l5_2_what_gives_no_churn():
    def churn_after(build) -> list:
        run = LRun(ON)
        build(run)
        return [d for d in run.call("search", {"q": "a"}) if d.detector == "argument_churn"]

    def variants(run, spec, error=E):
        for q, n in spec:
            for _ in range(n):
                run.pair("search", {"q": q}, error=error)

    assert churn_after(lambda r: variants(r, [("a", 5), ("b", 5)]))  # the control: churn
    assert not churn_after(lambda r: variants(r, [("b", 5), ("c", 5)]))  # a novel argument
    assert not churn_after(lambda r: variants(r, [("a", 9), ("b", 2)]))  # a variant with 2 calls
    assert not churn_after(lambda r: variants(r, [("a", 10)]))  # one variant
    assert not churn_after(lambda r: (variants(r, [("a", 5)]), variants(r, [("b", 5)], "other error")))
    # a success, or another tool, ends the walk: only the newest 3 + 3 count (without the stop: 16)
    ten = [("a", 5), ("b", 5)]
    six = [("a", 3), ("b", 3)]
    assert churn_after(lambda r: (variants(r, ten), variants(r, six)))  # the control: 16
    assert not churn_after(lambda r: (variants(r, ten), r.pair("search", {"q": "z"}, result="hit"), variants(r, six)))
    assert not churn_after(lambda r: (variants(r, ten), r.pair("read", {}, error=E), variants(r, six)))


def test_l5_2_write_unchanged_is_no_progress_churn():
    run = LRun(ON)
    for body in ("x", "y"):
        for _ in range(5):
            run.pair("write", {"path": "p", "content": body}, result=text_result("same", changed=False))
    (det,) = run.call("write", {"path": "p", "content": "x"})
    assert (det.detector, det.count, det.warning_key) == ("argument_churn", 10, "argument-churn:write")


def _write(run, body, path="p", **kw):
    return run.pair("write", {"path": path, "content": body}, result=text_result("wrote", changed=True), **kw)


def test_l5_3_write_mutation_churn():
    run = WRun(ON)
    for i in range(10):
        assert _write(run, f"v{i}") == []
    (det,) = run.call("write", {"path": "p", "content": "v10"})
    target = sha('{"path":"p"}')
    assert (det.detector, det.level, det.count) == ("argument_churn", "warning", 10)
    assert det.warning_key == f"argument-churn:write:write-mutation:{target}"
    assert det.message == msg_write_churn("write", 10)
    assert det.liveness_signal == "argument_churn"


def test_l5_3_the_release_has_no_write_churn_unless_opted_in():
    """openclaw@2026.9.6 has no write-mutation churn: ten distinct rewrites and an eleventh give nothing
    under the profile alone, and no record gets a write target."""
    run = LRun(ON)
    for i in range(10):
        assert _write(run, f"v{i}") == []
    assert run.call("write", {"path": "p", "content": "v10"}) == []
    assert {r["target"] for r in run.records()} == {None}
    opted = WRun(ON)
    for i in range(10):
        _write(opted, f"v{i}")
    assert brief(opted.call("write", {"path": "p", "content": "v10"})) == [("argument_churn", "warning", 10)]


def test_l5_3_what_ends_the_walk():
    def after(build, body="v10", **kw):
        run = WRun(ON)
        build(run)
        return run.call("write", {"path": "p", "content": body}, **kw)

    tens = lambda r: [_write(r, f"v{i}") for i in range(10)]  # noqa: E731
    assert brief(after(tens)) == [("argument_churn", "warning", 10)]
    assert after(lambda r: (tens(r), r.pair("read", {"path": "p"}, result="ok"))) == []  # a read-back
    assert after(lambda r: (tens(r), _write(r, "q", path="other"))) == []  # another file
    assert after(lambda r: (tens(r), r.call("write", {"path": "p", "content": "v99"}))) == []  # a pending write
    assert after(tens, body="v3") == []  # the current arguments are in the tail
    # a repeat: the tail is cut after the repeated arguments' newer occurrence (v5 .. v9 = 5 variants)
    assert after(lambda r: [_write(r, f"v{i}") for i in (5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)]) == []
    assert brief(after(lambda r: [_write(r, f"v{i}") for i in (11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)])) == [
        ("argument_churn", "warning", 11)
    ]


def test_l5_3_relative_and_absolute_spellings_are_one_target_only_with_cwd():
    def run_with(cwd):
        run = WRun(ON)
        for i in range(10):
            path = "a.txt" if i % 2 else "/w/a.txt"
            call_id = run.new_id()
            extra = {"cwd": cwd} if cwd else {}
            run.call("write", {"path": path, "content": i}, id=call_id, **extra)
            run.result("write", {"path": path, "content": i}, id=call_id, result=text_result("ok", changed=True))
        return run.call("write", {"path": "/w/a.txt", "content": 99}, **({"cwd": cwd} if cwd else {}))

    assert brief(run_with("/w")) == [("argument_churn", "warning", 10)]
    assert run_with(None) == []


def test_l5_5_liveness_on_a_ping_pong_warning_and_never_on_criticals():
    run = LRun(ON)
    dets = {}
    for i in range(1, 25):
        q = "a" if i % 2 else "b"
        dets[i] = run.pair("search", {"q": q}, error=E)
    # call 10: ping-pong count 10, churn 9 (< 10): no signal; call 11: churn 10, the signal
    assert brief(dets[10]) == [("ping_pong", "warning", 10)] and dets[10][0].liveness_signal is None
    assert brief(dets[11]) == [("ping_pong", "warning", 11)] and dets[11][0].liveness_signal == "argument_churn"
    assert dets[11][0].message == msg_pp_warning(11)
    assert brief(dets[20]) == [("ping_pong", "critical", 20)] and dets[20][0].liveness_signal is None


def test_l5_5_liveness_on_a_known_poll_warning():
    run = LRun(ON)
    for q, n in (("a", 3), ("b", 10)):
        for _ in range(n):
            run.pair("command_status", {"id": q}, error=E)
    (det,) = run.call("command_status", {"id": "b"})
    assert (det.detector, det.count, det.liveness_signal) == ("known_poll_no_progress", 10, "argument_churn")
    plain = LRun(ON)
    for _ in range(10):
        plain.pair("command_status", {"id": "b"}, error=E)
    (det,) = plain.call("command_status", {"id": "b"})
    assert (det.detector, det.liveness_signal) == ("known_poll_no_progress", None)


def test_l5_5_generic_warnings_never_carry_the_signal():
    run = LRun(ON)
    for _ in range(10):
        run.pair("read", {}, result="same")
    (det,) = run.call("read", {})
    assert (det.detector, det.liveness_signal) == ("generic_repeat", None)


# ================================================================ L6 no-progress streak


def _history(*records) -> RunState:
    """A run's state from records given as (sig, outcome): (result, kind, identity), or "pending"."""
    state = RunState()
    h, x = state.history, latest.extras(state)
    for s, rec in records:
        tool = s.split(":")[0]
        if rec == "pending":
            latest.record_call(h, x, tool, s, None, None)
            continue
        result, kind, identity = rec
        latest.record_outcome(h, x, tool, s, None, Outcome(result, kind=kind, identity=identity), None)
    return state


VETO_REC = (None, KIND_VETO, None)


def test_l6_2_a_veto_extends_the_streak_it_sits_on():
    s = "read:s"
    h = _history((s, ("h1", 0, None)), (s, VETO_REC), (s, VETO_REC), (s, ("h1", 0, None)))
    assert latest.repeated_streak(h.history, h.extras, s) == (4, "h1")


def test_l6_2_a_veto_above_a_changed_outcome_is_discarded_and_vetoes_alone_count():
    s = "read:s"
    h = _history((s, ("h1", 0, None)), (s, ("h1", 0, None)), (s, VETO_REC), (s, ("h2", 0, None)))
    assert latest.repeated_streak(h.history, h.extras, s) == (1, "h2")
    h = _history((s, ("h1", 0, None)), (s, ("h2", 0, None)), (s, VETO_REC))  # the veto sits on h2
    assert latest.repeated_streak(h.history, h.extras, s) == (2, "h2")
    h = _history((s, VETO_REC), ("read:t", ("h", 0, None)), (s, VETO_REC), (s, "pending"))
    assert latest.repeated_streak(h.history, h.extras, s) == (2, None)


def test_l6_2_blocked_retries_escalate_to_the_global_breaker():
    run = LRun(ON)
    got = [brief(run.pair("read", {"p": 1}, result="same")) for _ in range(35)]
    assert got[20:30] == [[("generic_repeat", "critical", n)] for n in range(20, 30)]
    assert got[30:] == [[("global_circuit_breaker", "critical", 30)]] * 5
    run2 = LRun(ON)
    for _ in range(30):
        dets = run2.pair("read", {"p": 1}, result="same")
    assert dets[0].message == msg_generic_critical_latest("read", 29)
    (det,) = run2.call("read", {"p": 1})
    assert det.message == msg_global_latest("read", 30)
    s = sig("read", '{"p":1}')
    assert det.warning_key == f"global:read:{s}:" + sha('"same"')


def test_l6_3_one_command_failing_the_same_way_with_drifting_timestamps():
    run = LRun(ON)
    for i in range(20):  # each resultHash differs; the failure identity does not
        dets = run.pair("exec", {"command": "curl h"}, result=fail(f"refused at 10:00:{i:02d}"))
        assert not [d for d in dets if d.level == "critical"]
    (det,) = run.call("exec", {"command": "curl h"})
    latest_hash = sha('{"exitCode":1,"output":"refused at 10:00:19","status":"failed","timedOut":false}')
    assert (det.detector, det.level, det.count) == ("generic_repeat", "critical", 20)
    s = sig("exec", '{"command":"curl h"}')
    assert det.warning_key == f"generic:exec:{s}:{latest_hash}"


def test_l6_3_many_commands_failing_alike_count_together_and_escalate():
    run = LRun(ON)
    for i in range(20):
        assert run.pair("exec", {"command": f"curl host{i}"}, result=fail(f"refused at 10:00:{i:02d}")) == []
    assert brief(run.call("exec", {"command": "curl host20"})) == [("generic_repeat", "critical", 20)]
    assert brief(run.call("exec", {"command": "curl host21"})) == [("generic_repeat", "critical", 21)]
    off = Run(ON)  # the docs revision: nothing
    for i in range(22):
        assert off.pair("exec", {"command": f"curl host{i}"}, result=fail(f"refused at 10:00:{i:02d}")) == []


def test_l6_3_revisiting_the_current_command_ends_the_tail():
    f = ("h", KIND_EXEC_FAILURE, "id")
    s = "exec:s"
    xs = [(f"exec:x{i}", f) for i in range(5)]
    h = _history((s, f), *xs)
    assert latest.exec_failure_streak(h.history, h.extras, s) == (5, "h")
    h = _history(("exec:x9", f), *xs)
    assert latest.exec_failure_streak(h.history, h.extras, s) == (6, "h")
    # not crossed yet (the newest is the current command): its older failures still count
    h = _history((s, f), ("exec:x1", f), (s, f))
    assert latest.exec_failure_streak(h.history, h.extras, s) == (2, "h")


def test_l6_3_what_ends_or_skips_in_the_failure_walk():
    f = ("h", KIND_EXEC_FAILURE, "id")
    s = "exec:s"
    cases = [
        ([("exec:a", ("ok", 0, None)), ("exec:b", f)], 1),  # a success (timed out, footer-only alike) ends it
        ([("read:a", f), ("exec:b", f)], 1),  # another tool ends it
        ([("exec:a", f), ("exec:b", ("other", KIND_EXEC_FAILURE, "other id"))], 1),  # another failure
        ([("exec:a", f), ("exec:b", ("other", KIND_EXEC_FAILURE, "id"))], 2),  # same identity
        ([("exec:a", f), ("exec:b", ("h", KIND_EXEC_FAILURE, "x"))], 2),  # same hash
        ([("exec:a", f), ("exec:v", VETO_REC), ("exec:p", "pending"), ("exec:b", f)], 3),  # veto counts
        ([("exec:a", VETO_REC)], 0),  # nothing anchors: 0
    ]
    for records, expected in cases:
        h = _history(*records)
        assert latest.exec_failure_streak(h.history, h.extras, s)[0] == expected, records


def test_l6_1_the_repeated_arguments_count_wins_ties():
    s = "exec:s"
    f = KIND_EXEC_FAILURE
    h = _history((s, ("h", f, "i")), (s, ("h", f, "i")))
    assert latest.no_progress_streak(h.history, h.extras, "exec", s) == (2, "h")
    h = _history((s, ("a", f, "i")), ("exec:t", ("b", f, "i")))  # 1 and 1 (the walk meets s again)
    assert latest.no_progress_streak(h.history, h.extras, "exec", s) == (1, "a")  # tie: the repeated count
    h = _history(("exec:u", ("c", f, "i")), ("exec:t", ("b", f, "i")))
    assert latest.no_progress_streak(h.history, h.extras, "exec", s) == (2, "b")  # failures win: the anchor's
    assert latest.no_progress_streak(h.history, h.extras, "read", s) == (0, None)  # exec only


def test_l6_timed_out_and_footer_only_failures_do_not_chain():
    for make in (lambda i: fail(f"refused {i}", timedOut=True), lambda i: fail("(Command exited with code 1)")):
        run = LRun(ON)
        for i in range(22):
            dets = run.pair("exec", {"command": f"c{i}"}, result=make(i))
            assert not [d for d in dets if d.level == "critical"]


# ================================================================ L7 decision


def test_l7_1_churn_comes_before_the_generic_warning():
    run = LRun(ON)
    for q, n in (("a", 10), ("b", 3)):
        for _ in range(n):
            run.pair("search", {"q": q}, error=E)
    (det,) = run.call("search", {"q": "a"})  # recent count 10 as well
    assert (det.detector, det.count, det.message) == ("argument_churn", 13, msg_churn("search", 2, 13))


def test_l7_1_the_generic_block_comes_before_churn():
    run = LRun(ON)
    for q, n in (("a", 20), ("b", 3)):
        for _ in range(n):
            run.pair("search", {"q": q}, error=E)
    assert brief(run.call("search", {"q": "a"})) == [("generic_repeat", "critical", 20)]


def test_l7_2_poll_blocks_escalate_to_the_global_breaker():
    run = LRun(ON)
    got = [brief(run.pair("command_status", {"id": 1}, result="running")) for _ in range(33)]
    assert got[10] == [("known_poll_no_progress", "warning", 10)]
    assert got[20:30] == [[("known_poll_no_progress", "critical", n)] for n in range(20, 30)]
    assert got[30:] == [[("global_circuit_breaker", "critical", 30)]] * 3


def test_l7_3_an_unknown_tool_block_is_not_sticky():
    run = LRun(ON)
    for _ in range(10):
        run.pair("browser", {"u": 1}, error="Unknown tool: browser")
    assert brief(run.call("browser", {"u": 1})) == [("unknown_tool_repeat", "critical", 10)]
    (det,) = run.call("browser", {"u": 1})  # the veto record breaks the streak; the recent count holds it
    assert (det.detector, det.level, det.count, det.emitted) == ("generic_repeat", "warning", 11, True)
    assert det.message == msg_generic_warning("browser", 11)


def test_l7_3_a_ping_pong_block_degrades_to_warnings():
    run = LRun(ON)
    for i in range(19):
        q = "a" if i % 2 == 0 else "b"
        run.pair("read", {"q": q}, result=f"page {q}")
    assert brief(run.call("read", {"q": "b"})) == [("ping_pong", "critical", 20)]
    dets = run.pair("read", {"q": "a"}, result="page a")
    assert brief(dets) == [("ping_pong", "warning", 21)] and dets[0].emitted
    dets = run.pair("read", {"q": "b"}, result="page b")
    assert brief(dets) == [("ping_pong", "warning", 22)] and not dets[0].emitted


def test_l7_4_counts_are_taken_before_the_call_is_recorded():
    run = LRun(ON)
    got = [brief(run.pair("read", {}, result="same")) for _ in range(11)]
    assert got[:10] == [[]] * 10 and got[10] == [("generic_repeat", "warning", 10)]


def test_l7_5_known_polls_never_get_generic_verdicts_but_do_get_churn():
    run = LRun(ON)
    for i in range(15):
        dets = run.pair("command_status", {"id": 1}, result=f"progress {i}")
        assert dets == []
    for q in ("a", "b"):
        for _ in range(5):
            run.pair("command_status", {"id": q}, error=E)
    (det,) = run.call("command_status", {"id": "a"})
    assert (det.detector, det.count) == ("argument_churn", 10)


# ================================================================ L8 the caller


def test_l8_1_a_blocked_call_is_recorded_once_as_a_veto_and_its_result_ignored():
    run = LRun(ON)
    for _ in range(20):
        run.pair("read", {"p": 1}, result="same")
    run.call("read", {"p": 1}, id="blocked")
    recs = run.records()
    assert (recs[-1]["kind"], recs[-1]["result"], len(recs)) == (KIND_VETO, None, 21)
    assert run.state.history.call_ids[-1] is None  # complete (the veto): no call id kept
    # the runner's veto (any payload) for that call changes nothing
    assert run.result("read", {"p": 1}, id="blocked", result="ran anyway") == []
    assert run.records() == recs
    # an id-less blocked call: the run's next id-less result is its veto
    run.call("read", {"p": 1}, id=None)
    n = len(run.records())
    run.result("read", {"p": 1}, result="same")
    assert len(run.records()) == n and run.records()[-1]["kind"] == KIND_VETO


def test_l8_1_the_veto_fills_a_pending_record_of_the_same_call():
    run = LRun(ON)
    for _ in range(20):
        run.pair("read", {"p": 1}, result="same")
    run.call("read", {"p": 1}, id=None, block={})  # recorded, not detected: a pending record
    assert brief(run.call("read", {"p": 1}, id=None)) == [("generic_repeat", "critical", 20)]
    recs = run.records()
    assert recs[-1]["kind"] == KIND_VETO and len(recs) == 21  # the veto went through outcome matching


def test_l8_1_recording_needs_enabled_not_false_and_outcomes_are_always_recorded():
    run = LRun({"enabled": False})
    run.pair("read", {}, result="x")
    (rec,) = run.records()  # the call was not recorded; its result was appended whole
    assert rec["result"] == sha('"x"')


def test_shadowed_criticals_record_no_veto():
    ext = Extensions(profile="openclaw-latest", shadow=True)
    config = cfg(ON)
    state = None
    for i in range(21):
        for ev in (
            decode_event(json.dumps({"type": "tool_call", "agent_id": "a", "tool_name": "r", "tool_call_id": f"{i}"})),
            decode_event(
                json.dumps(
                    {"type": "tool_result", "agent_id": "a", "tool_name": "r", "tool_call_id": f"{i}", "result": 1}
                )
            ),
        ):
            res = step(state, ev, config, ext=ext)
            state = res.state
    assert res.state.extras.kinds.count(KIND_VETO) == 0


# ================================================================ L10 the post-compaction guard


def test_l10_1_the_guard_window_is_three_whatever_the_config_says():
    block = {"enabled": True, "postCompactionGuard": {"windowSize": 5}}
    run = LRun(block)
    run.arm()
    got = [run.pair("read", {}, result="same") for _ in range(3)]
    (abort,) = got[2]
    assert (abort.detector, abort.count, abort.action) == ("compaction_loop_persisted", 3, "abort")
    assert abort.message == msg_compaction("read", 3, 3)
    off = Run(block)
    off.arm()
    assert [off.pair("read", {}, result="same") for _ in range(3)] == [[], [], []]


def test_l10_1_the_window_closes_after_three_observations():
    run = LRun({"enabled": True, "postCompactionGuard": {"windowSize": 5}})
    run.arm()
    assert run.state.guard.remaining == 3
    got = [run.pair("read", {}, result=r) for r in ("x", "y", "z", "x", "x")]
    assert got == [[]] * 5 and run.state.guard.remaining == 0  # the 4th and 5th fall outside the window


def test_l10_2_vetoes_never_reach_the_guard():
    run = LRun(ON)
    run.arm()
    veto = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
    for _ in range(3):
        assert run.pair("read", {}, result=veto) == []
    assert run.state.guard.remaining == 3


# ================================================================ L11 messages (also above)


def test_l11_changed_templates_and_unchanged_ones():
    from loopwarden.detection import messages

    assert messages.generic_critical_latest("read", 20) == msg_generic_critical_latest("read", 20)
    assert messages.global_breaker_latest("read", 30) == msg_global_latest("read", 30)
    assert messages.argument_churn("t", 2, 10) == msg_churn("t", 2, 10)
    assert messages.write_churn("write", 10) == msg_write_churn("write", 10)


# ================================================================ the profile's plumbing


def test_memo_keys_outcomes_by_the_tools_with_rules_of_their_own():
    raw = json.dumps({"details": {"changed": False}}).encode()
    assert LATEST_HASHER.outcome("write", "", raw, None).result_hash == UNCHANGED
    assert LATEST_HASHER.outcome("edit", "", raw, None).result_hash == text_hash("", '{"changed":false}')


def test_loop_cost_charges_a_churn_its_tools_calls():
    config = cfg(ON)
    state = None
    dets = []
    for i in range(11):
        q = "a" if i < 5 or i == 10 else "b"
        base = {"agent_id": "x", "tool_name": "search", "tool_call_id": f"c{i}", "params": {"q": q}}
        call = {"type": "tool_call", **base, "usage": {"input_tokens": 10, "output_tokens": 1}}
        res = step(state, decode_event(json.dumps(call)), config, ext=PROFILE)
        state, dets = res.state, list(res.detections)
        if i < 10:
            state = step(
                state, decode_event(json.dumps({"type": "tool_result", **base, "error": E})), config, ext=PROFILE
            ).state
    (det,) = dets
    assert (det.detector, det.count, det.loop_tokens) == ("argument_churn", 10, 11 * 11)  # ten calls and this one
