"""Spec §3 (argsHash), §4 (resultHash), §5 (unknown-tool names), §12.4-§12.6, §13.5.

Every outcome expectation is checked twice: through the pure function
``hashing.outcome_hash`` (values decoded with the JS number hook) and end to end
through ``step()`` (the resultHash is read back from a critical verdict's
``warning_key``, which ends with ``:<resultHash>``, rows 3/7 of §8).
"""

from __future__ import annotations

import json

import pytest

from loopwarden.detection.hashing import args_hash, error_text, outcome_hash, strip_volatile, unknown_tool_name
from tests.support.helpers import MISSING, Run, js_loads, sha

# ---------------------------------------------------------------- two ways to get a resultHash


def _loads(value):
    return js_loads(json.dumps(value, ensure_ascii=False))


def outcome_pure(tool, params, result=MISSING, error=MISSING):
    p = _loads(params)
    r = _loads(result) if result is not MISSING else None
    e = _loads(error) if error is not MISSING else None
    return outcome_hash(tool, p, r, e, has_result=result is not MISSING)[0]


# record-only for building (enabled missing), then critical at 2 identical outcomes.
_PROBE = {
    "enabled": True,
    "warningThreshold": 1,
    "criticalThreshold": 2,
    "globalCircuitBreakerThreshold": 3,
    "unknownToolThreshold": 50,
    "detectors": {"pingPong": False},
}


def outcome_engine(tool, params, result=MISSING, error=MISSING):
    run = Run({})
    for _ in range(2):
        run.pair(tool, params, result=result, error=error)
    dets = run.call(tool, params, block=_PROBE)
    s = args_hash(tool, _loads(params))
    crit = [d for d in dets if d.level == "critical"]
    if not crit:
        return None
    (d,) = crit
    prefix = {"generic_repeat": "generic", "known_poll_no_progress": "poll"}[d.detector] + f":{tool}:{s}:"
    assert d.warning_key.startswith(prefix), d.warning_key
    return d.warning_key[len(prefix) :]


@pytest.fixture(params=["pure", "engine"])
def H(request):
    return outcome_pure if request.param == "pure" else outcome_engine


def q(text: str) -> str:
    """JSON.stringify of a string (ASCII-only test inputs)."""
    return json.dumps(text)


# ---------------------------------------------------------------- §3 argsHash


def engine_sig(tool, params):
    """argsHash as the engine reports it inside a generic warning key (`generic:<T>:<S>`)."""
    run = Run({"enabled": True, "warningThreshold": 1})
    run.call(tool, params)
    (d,) = run.call(tool, params)
    assert d.detector == "generic_repeat" and d.warning_key.startswith(f"generic:{tool}:")
    return d.warning_key[len(f"generic:{tool}:") :]


@pytest.mark.parametrize("get", [lambda t, p: args_hash(t, _loads(p)), engine_sig], ids=["pure", "engine"])
def test_rule_3_1_args_hash_is_tool_colon_digest(get):
    assert get("read", {}) == "read:" + sha("{}")
    assert get("grep", {"pattern": "TODO", "path": "src"}) == "grep:" + sha('{"path":"src","pattern":"TODO"}')


@pytest.mark.parametrize("get", [lambda t, p: args_hash(t, _loads(p)), engine_sig], ids=["pure", "engine"])
def test_rule_3_2_params_hashed_exactly(get):
    assert get("read", {"offset": None}) != get("read", {})
    assert get("read", {"offset": None}) == "read:" + sha('{"offset":null}')
    assert get("read", {"limit": 50}) == get("read", {"limit": 50.0}) == "read:" + sha('{"limit":50}')
    assert get("read", {"path": "a"}) != get("read", {"path": "a "})
    assert get("read", {"path": "a", "extra": None}) != get("read", {"path": "a"})


def test_rule_3_2_update_plan_params_not_normalized():
    a = {"plan": [{"step": "Write tests", "status": "in_progress"}]}
    b = {"plan": [{"step": "Write the tests", "status": "in_progress"}]}
    assert args_hash("update_plan", a) != args_hash("update_plan", b)
    assert engine_sig("update_plan", a) == "update_plan:" + sha(
        '{"plan":[{"status":"in_progress","step":"Write tests"}]}'
    )


def test_rule_3_3_signature_carries_tool_name():
    assert args_hash("read", {"path": "x"}) != args_hash("write", {"path": "x"})
    assert args_hash("read", {"path": "x"}).split(":", 1)[1] == args_hash("write", {"path": "x"}).split(":", 1)[1]


# ---------------------------------------------------------------- §4.1 errors


@pytest.mark.parametrize(
    "error, text",
    [
        ("boom", "boom"),
        ("", "Error"),
        ("  spaced  ", "  spaced  "),
        (42, "42"),
        (1.5, "1.5"),
        (50.0, "50"),
        (True, "true"),
        (False, "false"),
        ({"message": "x", "code": "E1"}, '{"code":"E1","message":"x"}'),
        ([1, "a"], '[1,"a"]'),
    ],
)
def test_rule_4_1_error_text(error, text):
    assert error_text(_loads(error)) == text


@pytest.mark.parametrize(
    "error, text",
    [
        ("boom", "boom"),
        ("", "Error"),
        (42, "42"),
        (True, "true"),
        (False, "false"),
        ({"message": "x", "code": "E1"}, '{"code":"E1","message":"x"}'),
    ],
)
def test_rule_4_1_error_hash_prefix_and_quoted_digest(H, error, text):
    assert H("read", {"path": "a"}, error=error) == "error:" + sha(q(text))


def test_rule_4_1_error_wins_over_result(H):
    assert H("read", {}, result={"content": [{"type": "text", "text": "ok"}]}, error="EACCES") == "error:" + sha(
        '"EACCES"'
    )


def test_rule_4_1_error_null_means_no_error(H):
    assert H("read", {}, result="ok", error=None) == sha('"ok"')


def test_rule_4_1_error_beats_loop_veto_payload(H):
    veto = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
    assert H("read", {}, result=veto, error="x") == "error:" + sha('"x"')


def test_rule_4_1_unknown_name_taken_from_error_text():
    assert outcome_hash("browser", {}, None, "Unknown tool: browser_navigate", has_result=False) == (
        "error:" + sha('"Unknown tool: browser_navigate"'),
        "browser_navigate",
    )
    obj = _loads({"message": "Unknown tool: foo_bar"})
    assert outcome_hash("x", {}, None, obj, has_result=False)[1] == "foo_bar"
    assert outcome_hash("x", {}, None, "plain failure", has_result=False)[1] is None


# ---------------------------------------------------------------- §4.2 non-object results


def test_rule_4_2_missing_result_has_no_hash(H):
    assert H("read", {"path": "a"}) is None


@pytest.mark.parametrize(
    "result, canonical",
    [
        (None, "null"),
        ("ok", '"ok"'),
        ("", '""'),
        (5.0, "5"),
        (0, "0"),
        ([1, 2], "[1,2]"),
        (True, "true"),
        ([{"b": 1, "a": 2}], '[{"a":2,"b":1}]'),
    ],
)
def test_rule_4_2_non_object_results_hashed_directly(H, result, canonical):
    assert H("read", {"path": "a"}, result=result) == sha(canonical)


# ---------------------------------------------------------------- §4.3 details and text


def test_rule_4_3_text_joined_with_newline_type_value_not_checked(H):
    result = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "image", "text": "b"},
            {"type": 5, "text": "c"},
            {"text": "d"},
            {"type": "text", "text": 7},
            "e",
            {"type": "text", "text": "f"},
        ]
    }
    assert H("read", {}, result=result) == sha('{"details":{},"text":"a\\nb\\nf"}')


def test_rule_4_3_details_must_be_plain_object(H):
    for details in ("x", [1], None, 3):
        assert H("read", {}, result={"details": details, "content": []}) == sha('{"details":{},"text":""}')
    assert H("read", {}, result={"details": {"z": 1, "a": [True]}}) == sha('{"details":{"a":[true],"z":1},"text":""}')


def test_rule_4_3_content_not_array_gives_empty_text(H):
    assert H("read", {}, result={"content": "hello"}) == sha('{"details":{},"text":""}')
    assert H("read", {}, result={"content": {"type": "text", "text": "hi"}}) == sha('{"details":{},"text":""}')


def test_rule_4_3_js_trim(H):
    # JS trim removes NBSP, BOM, U+2028, U+3000 ... but not U+001F or U+0085 (Python's str.strip() differs).
    res = {"content": [{"type": "text", "text": "\u00a0\ufeff\u3000 hi \u2028\t"}]}
    assert H("read", {}, result=res) == sha('{"details":{},"text":"hi"}')
    res = {"content": [{"type": "text", "text": "\x1fhi\x85"}]}
    assert H("read", {}, result=res) == sha('{"details":{},"text":"\\u001fhi\x85"}')
    res = {"content": [{"type": "text", "text": "  "}, {"type": "text", "text": "x\n"}]}
    assert H("read", {}, result=res) == sha('{"details":{},"text":"x"}')


# ---------------------------------------------------------------- §4.4 loop veto


def test_rule_4_4_loop_veto_not_hashed(H):
    veto = {
        "content": [{"type": "text", "text": "CRITICAL: ..."}],
        "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "CRITICAL: ..."},
    }
    assert H("read", {}, result=veto) is None
    assert H("exec", {"command": "ls"}, result=veto) is None


def test_rule_4_4_other_denials_are_hashed(H):
    res = {"details": {"status": "blocked", "deniedReason": "plugin"}, "content": [{"type": "text", "text": "no"}]}
    assert H("read", {}, result=res) == sha('{"details":{"deniedReason":"plugin","status":"blocked"},"text":"no"}')


# ---------------------------------------------------------------- §4.5 exec


def exec_result(text="", **details):
    return {"content": [{"type": "text", "text": text}], "details": details}


def test_rule_4_5_exec_running_only_status_and_tail(H):
    a = H(
        "exec",
        {"command": "make"},
        result=exec_result("started pid 1", status="running", tail="line 3", pid=1, sessionId="s1", durationMs=5),
    )
    b = H(
        "exec",
        {"command": "make"},
        result=exec_result("other text", status="running", tail="line 3", pid=2, sessionId="s2", durationMs=9),
    )
    assert a == b == sha('{"status":"running","tail":"line 3"}')
    assert H("exec", {"command": "make"}, result=exec_result(status="running", tail="line 4")) != a
    assert H("exec", {"command": "make"}, result=exec_result("x", status="running", tail=5)) == sha(
        '{"status":"running","tail":""}'
    )


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_rule_4_5_exec_completed_failed_projection(H, status):
    base = dict(status=status, exitCode=0, aggregated="  done \n", durationMs=10, pid=3, cwd="/a")
    expected = sha('{"exitCode":0,"output":"done","status":"%s","timedOut":false}' % status)
    assert H("exec", {"command": "make"}, result=exec_result("ignored", **base)) == expected
    varied = dict(base, durationMs=99, pid=4, cwd="/b", sessionId="zz")
    assert H("exec", {"command": "make"}, result=exec_result("also ignored", **varied)) == expected
    # counted fields
    assert H("exec", {"command": "make"}, result=exec_result("ignored", **dict(base, exitCode=1))) != expected
    assert H("exec", {"command": "make"}, result=exec_result("ignored", **dict(base, aggregated="other"))) != expected
    timed = H("exec", {"command": "make"}, result=exec_result("ignored", **dict(base, timedOut=True)))
    assert timed == sha('{"exitCode":0,"output":"done","status":"%s","timedOut":true}' % status)


def test_rule_4_5_exec_completed_field_coercions(H):
    res = exec_result("  from text ", status="completed", exitCode="0", timedOut="true", aggregated="   ")
    assert H("exec", {}, result=res) == sha(
        '{"exitCode":null,"output":"from text","status":"completed","timedOut":false}'
    )
    res = exec_result("txt", status="completed", exitCode=2.0, aggregated=17)
    assert H("exec", {}, result=res) == sha('{"exitCode":2,"output":"txt","status":"completed","timedOut":false}')
    res = exec_result("txt", status="failed", exitCode=True, timedOut=1)
    assert H("exec", {}, result=res) == sha('{"exitCode":null,"output":"txt","status":"failed","timedOut":false}')


@pytest.mark.parametrize("status", ["approval-pending", "approval-unavailable"])
def test_rule_4_5_exec_approval_projection(H, status):
    res = exec_result(
        "please approve",
        status=status,
        command="rm -rf build",
        host="gw-1",
        reason=None,
        expiresAt=123,
        approvalId="ap-1",
    )
    expected = sha('{"command":"rm -rf build","host":"gw-1","reason":null,"status":"%s","warningText":""}' % status)
    assert H("exec", {}, result=res) == expected
    res2 = exec_result("other", status=status, command="rm -rf build", host="gw-1", expiresAt=999, approvalId="ap-2")
    assert H("exec", {}, result=res2) == expected
    res3 = exec_result("", status=status, command=5, host=5, reason="policy", warningText="careful")
    assert H("exec", {}, result=res3) == sha(
        '{"command":"","host":null,"reason":"policy","status":"%s","warningText":"careful"}' % status
    )


@pytest.mark.parametrize("details", [{"status": "queued", "pid": 1}, {"pid": 1}, {"status": 7, "pid": 1}])
def test_rule_4_5_exec_other_status_falls_through_to_full_hash(H, details):
    res = exec_result("out", **details)
    assert H("exec", {}, result=res) == sha(
        '{"details":%s,"text":"out"}' % json.dumps(details, separators=(",", ":"), sort_keys=True)
    )
    changed = exec_result("out", **dict(details, pid=2))
    assert H("exec", {}, result=changed) != H("exec", {}, result=res)  # volatile metadata IS hashed (§12.4)


def test_rule_4_5_only_exec_gets_projection(H):
    res = exec_result("t", status="running", tail="x", pid=1)
    assert H("read", {}, result=res) == sha('{"details":{"pid":1,"status":"running","tail":"x"},"text":"t"}')


# ---------------------------------------------------------------- §4.6 process


def test_rule_4_6_process_poll_projection_status_missing_is_undefined(H):
    params = {"action": "poll", "sessionId": "s1"}
    assert H("process", params, result={"details": {"pid": 1, "updatedAt": 5}}) == sha(
        '{"action":"poll","aggregated":null,"exitCode":null,"exitSignal":null,"status":undefined,"text":""}'
    )
    assert H("process", params, result={"details": {"status": None}}) == sha(
        '{"action":"poll","aggregated":null,"exitCode":null,"exitSignal":null,"status":null,"text":""}'
    )


def test_rule_4_6_process_poll_counted_and_ignored_fields(H):
    params = {"action": "poll", "sessionId": "s1"}
    res = {
        "content": [{"type": "text", "text": " still running "}],
        "details": {
            "status": "running",
            "aggregated": "abc",
            "exitCode": None,
            "pid": 10,
            "updatedAt": 1,
            "name": "n",
            "sessionId": "s1",
        },
    }
    expected = sha(
        '{"action":"poll","aggregated":"abc","exitCode":null,"exitSignal":null,"status":"running","text":"still running"}'  # noqa: E501
    )
    assert H("process", params, result=res) == expected
    res2 = json.loads(json.dumps(res))
    res2["details"].update(pid=11, updatedAt=2, name="m", sessionId="s9")
    assert H("process", params, result=res2) == expected
    for field, value in (("aggregated", "abcd"), ("exitCode", 0), ("exitSignal", "SIGTERM"), ("status", "exited")):
        res3 = json.loads(json.dumps(res))
        res3["details"][field] = value
        assert H("process", params, result=res3) != expected, field
    # other JSON values are kept as they are
    res4 = {"details": {"status": "x", "exitCode": "7", "aggregated": ["a"]}}
    assert H("process", params, result=res4) == sha(
        '{"action":"poll","aggregated":["a"],"exitCode":"7","exitSignal":null,"status":"x","text":""}'
    )


def test_rule_4_6_process_log_projection(H):
    params = {"action": "log", "sessionId": "s1", "offset": 0}
    res = {
        "content": [{"type": "text", "text": "log tail"}],
        "details": {"status": "running", "totalLines": 12, "totalChars": 300, "truncated": False, "pid": 4},
    }
    assert H("process", params, result=res) == sha(
        '{"action":"log","exitCode":null,"exitSignal":null,"status":"running","text":"log tail",'
        '"totalChars":300,"totalLines":12,"truncated":false}'
    )
    assert H("process", params, result={"details": {}}) == sha(
        '{"action":"log","exitCode":null,"exitSignal":null,"status":undefined,"text":"",'
        '"totalChars":null,"totalLines":null,"truncated":null}'
    )


@pytest.mark.parametrize("params", [{"action": "kill"}, {"action": "Poll"}, {"action": "poll "}, {}, ["poll"], "poll"])
def test_rule_4_6_process_other_actions_use_full_hash(H, params):
    res = {"details": {"status": "running", "pid": 1}}
    assert H("process", params, result=res) == sha('{"details":{"pid":1,"status":"running"},"text":""}')


# ---------------------------------------------------------------- §4.7 send-like


def test_rule_4_7_sessions_send_strips_volatile_keys_and_ignores_text(H):
    a = {
        "content": [{"type": "text", "text": "sent at 10:01"}],
        "details": {"status": "sent", "messageId": "m1", "ts": 1, "runId": "r1", "idempotencyKey": "k1"},
    }
    b = {
        "content": [{"type": "text", "text": "sent at 10:02"}],
        "details": {"status": "sent", "messageId": "m2", "ts": 2, "runId": "r2", "idempotencyKey": "k2"},
    }
    assert H("sessions_send", {"to": "x"}, result=a) == H("sessions_send", {}, result=b) == sha('{"status":"sent"}')


def test_rule_4_7_every_volatile_key_at_any_depth():
    keys = [
        "messageId",
        "message_id",
        "messageIds",
        "platformMessageId",
        "platformMessageIds",
        "fileId",
        "file_id",
        "fileKey",
        "pollId",
        "poll_id",
        "receipt",
        "runId",
        "idempotencyKey",
        "ts",
        "timestamp",
        "sentAt",
        "deliveredAt",
        "createdAt",
    ]
    details = {"ok": True, "nested": {k: 1 for k in keys}, "list": [{k: "x" for k in keys} | {"keep": 1}]}
    details.update({k: "v" for k in keys})
    assert strip_volatile(details) == {"ok": True, "nested": {}, "list": [{"keep": 1}]}
    assert strip_volatile({"MessageId": 1, "TS": 2, "id": 3}) == {"MessageId": 1, "TS": 2, "id": 3}  # case-sensitive


@pytest.mark.parametrize(
    "message, expected",
    [
        ({"id": "m1", "text": "hi", "direction": "out"}, '{"direction":"out","text":"hi"}'),
        ({"id": "m1", "text": "hi", "senderId": "u1"}, '{"senderId":"u1","text":"hi"}'),
        ({"id": "m1", "text": "hi", "accountId": "a1"}, '{"accountId":"a1","text":"hi"}'),
        ({"id": "m1", "text": "hi", "conversation": {"id": "c9"}}, '{"conversation":{"id":"c9"},"text":"hi"}'),
        ({"id": "m1", "text": "hi"}, '{"id":"m1","text":"hi"}'),  # no marker field
        ({"id": "m1", "direction": "out"}, '{"direction":"out","id":"m1"}'),  # no text
        ({"id": 7, "text": "hi", "direction": "out"}, '{"direction":"out","id":7,"text":"hi"}'),  # id not a string
        ({"id": "m1", "text": "hi", "conversation": "c9"}, '{"conversation":"c9","id":"m1","text":"hi"}'),
        ({"id": "m1", "text": "hi", "direction": 1}, '{"direction":1,"id":"m1","text":"hi"}'),
    ],
)
def test_rule_4_7_delivered_message_id_rule(H, message, expected):
    assert H("sessions_send", {}, result={"details": {"message": message}}) == sha('{"message":%s}' % expected)


def test_rule_4_7_delivered_messages_inside_arrays():
    d = {"messages": [{"id": "a", "text": "x", "senderId": "u", "ts": 1}, {"id": "b"}]}
    assert strip_volatile(d) == {"messages": [{"text": "x", "senderId": "u"}, {"id": "b"}]}


@pytest.mark.parametrize(
    "action",
    [
        "send",
        "broadcast",
        "reply",
        "thread-reply",
        "sendWithEffect",
        "sendAttachment",
        "upload-file",
        "sticker",
        "poll",
    ],
)
def test_rule_4_7_message_send_actions_are_send_like(H, action):
    a = {"content": [{"type": "text", "text": "one"}], "details": {"ok": True, "messageId": "1"}}
    b = {"content": [{"type": "text", "text": "two"}], "details": {"ok": True, "messageId": "2"}}
    assert H("message", {"action": action, "to": "#c"}, result=a) == sha('{"ok":true}')
    assert H("message", {"action": action, "to": "#c"}, result=b) == sha('{"ok":true}')


@pytest.mark.parametrize(
    "params",
    [{"action": "read"}, {"action": "Send"}, {"action": " send"}, {"action": "send "}, {}, {"action": ["send"]}],
)
def test_rule_4_7_other_message_actions_keep_full_hashing(H, params):
    res = {"content": [{"type": "text", "text": "one"}], "details": {"ok": True, "messageId": "1"}}
    assert H("message", params, result=res) == sha('{"details":{"messageId":"1","ok":true},"text":"one"}')


def test_rule_4_7_send_like_details_not_object(H):
    assert H("sessions_send", {}, result={"details": "x", "content": [{"type": "text", "text": "t"}]}) == sha("{}")


# ---------------------------------------------------------------- §4.8 / §4.9


def test_rule_4_8_update_plan_no_special_case(H):
    a = {"content": [{"type": "text", "text": "Plan updated"}], "details": {"ok": True}}
    b = {"content": [{"type": "text", "text": "Plan updated."}], "details": {"ok": True}}
    assert H("update_plan", {"plan": []}, result=a) == sha('{"details":{"ok":true},"text":"Plan updated"}')
    assert H("update_plan", {"plan": []}, result=a) != H("update_plan", {"plan": []}, result=b)


def test_rule_4_9_everything_else_details_and_text(H):
    res = {
        "content": [{"type": "text", "text": "line1"}, {"type": "text", "text": "line2"}],
        "details": {"path": "/a", "bytes": 10.0},
        "extra": "ignored",
    }
    assert H("read", {"path": "/a"}, result=res) == sha('{"details":{"bytes":10,"path":"/a"},"text":"line1\\nline2"}')
    res2 = dict(res, extra="different", isError=True)
    assert H("read", {"path": "/a"}, result=res2) == H("read", {"path": "/a"}, result=res)


# ---------------------------------------------------------------- §5 unknown-tool names


@pytest.mark.parametrize(
    "text, name",
    [
        ("Unknown tool: browser_navigate", "browser_navigate"),  # §5.3
        ("Tool jira_search not found", "jira_search"),  # §5.3
        ("Tool 'JIRA_Search' is not available in this session", "jira_search"),  # §5.3
        ("Tool execution failed: timeout", None),  # §5.3
        ("", None),
        ("   \n", None),
        ("Unknown tool: Browser_Navigate", "browser_navigate"),
        ('error: UNKNOWN TOOL "Foo.Bar-1" requested', "foo.bar-1"),
        ("Unknown tool:\n\t'web.search'", "web.search"),
        ("unknown tool   x1", "x1"),
        ('Tool "abc"  is not available', "abc"),
        ("TOOL web_fetch NOT FOUND", "web_fetch"),
        ("failed: unknown tool: foo; also Tool bar not found", "foo"),  # first pattern wins
        ("Tool bar not found; Unknown tool: foo", "foo"),  # pattern order, not position
        ("Tool mcp/search not found", None),  # '/' never part of a recognized name
        ("Tool ns:tool is not available", None),
        ("Unknown tool: /bin/sh", None),
        ("Unknown tool: github/search", "github"),  # unanchored pattern 1 stops at '/'
        ("Tool not found", None),
        ("Unknown tool: ", None),
        ("the tool thing is broken", None),
    ],
)
def test_rule_5_unknown_tool_extraction(text, name):
    assert unknown_tool_name(text) == name


def test_rule_5_1_only_error_outcomes_carry_a_name():
    assert outcome_hash("x", {}, "Unknown tool: foo", None, has_result=True)[1] is None
    assert outcome_hash("x", {}, None, "  Unknown tool: foo  ", has_result=False)[1] == "foo"
    assert outcome_hash("x", {}, None, "", has_result=False)[1] is None  # errorText "Error"


def test_rule_5_4_name_need_not_equal_called_tool():
    assert outcome_hash("browser", {}, None, "Tool web_search not found", has_result=False)[1] == "web_search"


# ---------------------------------------------------------------- §13.5 wire conventions


def test_rule_13_5_string_error_is_an_error_message(H):
    assert H("read", {}, error="") == "error:" + sha('"Error"')
    assert H("read", {}, error="ENOENT: no such file") == "error:" + sha('"ENOENT: no such file"')


@pytest.mark.parametrize(
    "text, name",
    [
        ("Unknown tool:\u00a0foo", "foo"),  # JS \s includes NBSP
        ("Tool\u2003bar\u3000not found", "bar"),
        ("Unknown tool:\ufeffbaz", "baz"),
        ("\ufeff Unknown tool: q \u00a0", "q"),
    ],
)
def test_rule_5_2_js_whitespace_class(text, name):
    assert unknown_tool_name(text) == name


@pytest.mark.parametrize(
    "text, name",
    [
        ("Unknown tool: browser_navigate", "browser_navigate"),
        ("Tool jira_search not found", "jira_search"),
        ("Tool 'JIRA_Search' is not available in this session", "jira_search"),
        ("Tool execution failed: timeout", None),
    ],
)
def test_rule_5_3_spec_examples(text, name):
    assert unknown_tool_name(text) == name
    assert outcome_hash("t", {}, None, text, has_result=False)[1] == name


def test_rule_12_4_exec_volatile_metadata_ignored_only_for_known_statuses(H):
    def res(status, pid, ms):
        details = {
            "pid": pid,
            "durationMs": ms,
            "sessionId": f"s{pid}",
            "cwd": f"/tmp/{pid}",
            "exitCode": 0,
            "aggregated": "ok",
            "tail": "t",
        }
        if status is not None:
            details["status"] = status
        return {"content": [{"type": "text", "text": f"pid {pid}"}], "details": details}

    for status in ("running", "completed", "failed", "approval-pending", "approval-unavailable"):
        assert H("exec", {"command": "x"}, result=res(status, 1, 10)) == H(
            "exec", {"command": "x"}, result=res(status, 2, 20)
        ), status
    for status in ("queued", None):
        assert H("exec", {"command": "x"}, result=res(status, 1, 10)) != H(
            "exec", {"command": "x"}, result=res(status, 2, 20)
        ), status
    # running: all the text is ignored, only tail counts
    a = {"content": [{"type": "text", "text": "A"}], "details": {"status": "running", "tail": "same"}}
    b = {"content": [{"type": "text", "text": "B"}], "details": {"status": "running", "tail": "same"}}
    assert H("exec", {}, result=a) == H("exec", {}, result=b)
