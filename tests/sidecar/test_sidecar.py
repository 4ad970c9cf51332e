"""The local decision service's request handling, over real HTTP on loopback, without a broker.

Bounds and errors (413 before and while reading, 400 that never echoes the
body, 404, 405, 401 with a token compared as a whole), the tables (run_start
splits a session's prompts, results without call ids pair by tool and
params, every table an LRU with its count in /v1/health), the Unix socket's
mode and the refusal to bind beyond loopback without a token. What the
service publishes is captured where the outbox would send it.
"""

from __future__ import annotations

import argparse
import os
import stat
import time

import aiohttp
import pytest

from loopwarden import cli
from loopwarden.runner import LoopClient
from loopwarden.sidecar.app import make_app, start_listeners
from loopwarden.sidecar.service import Limits, Service
from tests.runner.test_runner_local import CONFIG, Captured

AGENT = {"agent_id": "a", "session_id": "s1"}
SECRET = "x" * 64  # what a hostile body carries; no answer may contain it


def service(
    limits: Limits | None = None, max_local_runs: int = 10_000, outbox: type[Captured] = Captured
) -> tuple[Service, Captured]:
    """A service deciding locally with :data:`CONFIG`; what it publishes lands in the ``outbox`` returned."""
    client = LoopClient(bootstrap="127.0.0.1:1", config=CONFIG, max_local_runs=max_local_runs)
    out = outbox()
    client._outbox = out
    return Service(client, limits), out


@pytest.fixture
async def http():
    clients = []

    async def make(limits: Limits | None = None, token: bytes | None = None, **options):
        """An HTTP session to a new :func:`service` (``options``: its ``max_local_runs``, ``outbox``)."""
        svc, out = service(limits, **options)
        server, urls = await start_listeners(svc, make_app(svc, token), "127.0.0.1", 0, None)
        client = aiohttp.ClientSession(base_url=urls[0])
        clients.append((client, server))
        return client, svc, out

    yield make
    for client, server in clients:
        await client.close()
        await server.close()


def of_type(out: Captured, name: str) -> list:
    return [e for e in out.events if type(e).__name__ == name]


async def loop_calls(client, n: int, body: dict | None = None) -> list[dict]:
    """``n`` identical calls, each followed by its result (the same every time: no progress)."""
    answers = []
    for _ in range(n):
        r = await client.post("/v1/check", json={**AGENT, "tool_name": "read", "params": {"path": "a"}, **(body or {})})
        a = await r.json()
        answers.append(a)
        result = {"run_id": a["run_id"], "tool_call_id": a["tool_call_id"], "result": {"text": "same"}}
        await client.post("/v1/result", json={**AGENT, **result, "blocked": not a["proceed"]})
    return answers


async def test_a_looping_session_is_warned_then_blocked_with_text_from_fields(http):
    client, svc, out = await http()
    answers = await loop_calls(client, 14)
    assert [a["action"] for a in answers] == ["allow"] * 10 + ["warn", "allow", "block", "block"]
    warn, block = answers[10], answers[12]
    assert (warn["detector"], warn["count"], warn["proceed"], warn["source"]) == ("generic_repeat", 10, True, "local")
    assert (block["detector"], block["count"], block["proceed"]) == ("generic_repeat", 12, False)
    assert "read" in block["message"] and block["verdict_id"] and not block["failed_open"]
    assert len({a["run_id"] for a in answers}) == 1  # no run_start: the session's one run
    acks = of_type(out, "VerdictAck")
    assert [a.verdict_id for a in acks] == [answers[12]["verdict_id"], answers[13]["verdict_id"]]
    assert {a.outcome for a in acks} == {"applied"}  # blocked: true, the veto reached the model
    r = await client.post("/v1/ack", json={**AGENT, "verdict_id": warn["verdict_id"]})
    assert (await r.json())["ok"] is True
    assert of_type(out, "VerdictAck")[-1].verdict_id == warn["verdict_id"]


async def test_run_start_separates_two_prompts_of_one_session(http):
    client, svc, out = await http()
    first = await loop_calls(client, 9)
    r = await client.post("/v1/run_start", json=AGENT)
    started = await r.json()
    assert started["ended"] == first[0]["run_id"] and started["run_id"] != first[0]["run_id"]
    second = await loop_calls(client, 9)
    assert {a["action"] for a in first + second} == {"allow"}  # 9 + 9: never pooled into 18
    assert {a["run_id"] for a in second} == {started["run_id"]}
    ends = of_type(out, "RunEnd")
    assert [e.run_id for e in ends] == [first[0]["run_id"]]
    await client.post("/v1/run_end", json=AGENT)
    assert [e.run_id for e in of_type(out, "RunEnd")] == [first[0]["run_id"], started["run_id"]]
    health = await (await client.get("/v1/health")).json()
    assert health["tables"]["sessions"] == 0 and health["tables"]["runs"] == 0


async def test_check_batch_is_the_release_batch_admission_under_the_profile(http, monkeypatch):
    """A model message's calls admitted together, over HTTP, answer exactly as LoopClient.check_batch
    in-process: under openclaw-latest, 19 calls that ran and then a batch of two identical ones
    refuse the batch (the sibling, then the trigger at 20); the next batch ends the run."""
    profile = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}}
    monkeypatch.setitem(globals(), "CONFIG", profile)  # the service() below decides with it
    client, svc, out = await http()
    same = {"text": "same"}
    for i in range(19):
        body = {**AGENT, "run_id": "r1", "calls": [{"tool_name": "read", "params": {"p": 1}, "tool_call_id": f"h{i}"}]}
        (a,) = (await (await client.post("/v1/check_batch", json=body)).json())["decisions"]
        assert a["proceed"]  # warned at 10, never refused before the batch
        await client.post("/v1/result", json={**AGENT, "run_id": "r1", "tool_call_id": f"h{i}", "result": same})
    batches = [["b1", "b2"], ["c1"]]
    served = []
    for ids in batches:
        calls = [{"tool_name": "read", "params": {"p": 1}, "tool_call_id": i} for i in ids]
        answer = await (await client.post("/v1/check_batch", json={**AGENT, "run_id": "r1", "calls": calls})).json()
        served.append([(d["action"], d["recovery"], d["count"], d["detector"]) for d in answer["decisions"]])
        for d in answer["decisions"]:
            result = {"tool_call_id": d["tool_call_id"], "result": same, "blocked": not d["proceed"]}
            await client.post("/v1/result", json={**AGENT, "run_id": "r1", **result})

    inproc = LoopClient(config=profile, decisions="local")
    run = inproc.run("a", "s1", "r1")
    expected = []
    for i in range(19):
        (d,) = await inproc.check_batch([run.call("read", {"p": 1}, f"h{i}")])
        await inproc.tool_result(d, result=same)
    for ids in batches:
        ds = await inproc.check_batch([run.call("read", {"p": 1}, i) for i in ids])
        verdicts = [d.verdict for d in ds]
        expected.append([(d.action, d.recovery, v and v.count, v and v.detector) for d, v in zip(ds, verdicts)])
        for d in ds:
            await inproc.tool_result(d, result=d.blocked_result() if not d.proceed else same)
    assert served == expected
    assert [d[:2] for d in served[0]] == [("block", "sibling"), ("block", "trigger")] and served[0][1][2] == 20
    assert served[1] == [("abort", "trigger", 21, "generic_repeat")]
    r = await client.post("/v1/check_batch", json={**AGENT, "calls": []})
    assert r.status == 400  # at least one call


async def test_a_warning_under_the_profile_carries_the_release_note(http, monkeypatch):
    """Under openclaw-latest a warned call's result gets the release's system note (what the Python adapters
    append), so runners in other languages append the same; outside the profile there is none."""
    monkeypatch.setitem(globals(), "CONFIG", {"tools": {"loopDetection": {"enabled": True}}})
    client, _svc, _out = await http()
    answers = await loop_calls(client, 11)
    assert answers[10]["action"] == "warn" and "note" not in answers[10]
    profile = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}}
    monkeypatch.setitem(globals(), "CONFIG", profile)
    client, _svc, _out = await http()
    answers = await loop_calls(client, 11)
    assert all("note" not in a for a in answers[:10])
    assert answers[10]["action"] == "warn" and answers[10]["note"] == (
        "[System note: Tool-loop warning after 10 repeated calls. "
        "Change your approach or stop if you are not making progress.]"
    )


async def test_an_object_result_is_one_outcome_per_value_not_one_for_all(http):
    """A host's result object that is not OpenClaw's ``{content, details}`` (Claude Code's Bash answer) is an
    outcome per value: a poll whose output changes is never blocked; one whose output stays is (critical at 12
    here: CONFIG's threshold)."""

    async def poll(run_id: str, stdout) -> list[str]:
        actions = []
        for i in range(25):
            body = {**AGENT, "run_id": run_id, "tool_name": "lookup", "params": {"q": "job 42"}}
            a = await (await client.post("/v1/check", json=body)).json()
            actions.append(a["action"])
            result = {"stdout": stdout(i), "stderr": "", "interrupted": False}
            ids = {"run_id": run_id, "tool_call_id": a["tool_call_id"]}
            await client.post("/v1/result", json={**AGENT, **ids, "result": result, "blocked": not a["proceed"]})
        return actions

    client, _svc, _out = await http()
    assert "block" not in await poll("moving", lambda i: f"built {i * 4}%\n")
    assert (await poll("stuck", lambda i: "built 40%\n")).index("block") == 12


async def test_results_without_call_ids_pair_by_tool_and_params(http):
    client, svc, out = await http()
    ids = []
    for params in ({"path": "a", "n": 1}, {"path": "b"}, {"path": "a", "n": 1}):
        r = await client.post("/v1/check", json={**AGENT, "tool_name": "read", "params": params})
        ids.append((await r.json())["tool_call_id"])
    # key order and spacing differ from the check's params: still the same JSON value
    body = b'{"agent_id":"a","session_id":"s1","tool_name":"read","params":{ "n":1, "path":"a" },"result":"x"}'
    r = await client.post("/v1/result", data=body)
    assert (await r.json())["paired"] is True
    r = await client.post("/v1/result", json={**AGENT, "tool_name": "read", "params": {"path": "b"}, "error": "boom"})
    assert (await r.json())["paired"] is True
    r = await client.post("/v1/result", json={**AGENT, "tool_name": "write", "params": {"path": "a"}, "result": 1})
    assert (await r.json())["paired"] is False  # no pending check of that tool
    results = of_type(out, "ToolResult")
    assert [r.tool_call_id for r in results] == [ids[0], ids[1], None]  # the oldest of the two same calls first
    assert bytes(results[1].error) == b'"boom"'
    assert (await (await client.get("/v1/stats")).json())["service"]["results_unpaired"] == 1


async def test_a_result_read_back_late_is_recorded_only_while_its_check_awaits_one(http):
    """pending_only: a hook that reads outcomes back from a host's transcript (Codex) reports every call
    of the turn before; one its post-call hook reported already, or that has no check, is not
    recorded again."""
    client, svc, out = await http()
    for call_id in ("c1", "c2"):
        await client.post("/v1/check", json={**AGENT, "run_id": "r1", "tool_name": "exec", "tool_call_id": call_id})
    await client.post("/v1/result", json={**AGENT, "run_id": "r1", "tool_call_id": "c1", "result": "ok"})
    late = {**AGENT, "run_id": "r1", "pending_only": True}
    answers = []
    for call_id in ("c1", "c2", "c9"):
        r = await client.post("/v1/result", json={**late, "tool_call_id": call_id, "result": f"late {call_id}"})
        answers.append((await r.json())["paired"])
    assert answers == [False, True, False]
    assert [(r.tool_call_id, bytes(r.result)) for r in of_type(out, "ToolResult")] == [
        ("c1", b'"ok"'),
        ("c2", b'"late c2"'),
    ]


async def test_oversize_body_is_413_by_length_and_while_reading(http):
    client, svc, out = await http(Limits(max_body=256))
    r = await client.post("/v1/check", data=b"{" + b" " * 300 + b"}")
    assert r.status == 413 and "256" in (await r.json())["error"]

    async def chunks():
        for _ in range(10):
            yield b" " * 100

    r = await client.post("/v1/check", data=chunks())  # chunked: no Content-Length to refuse early
    assert r.status == 413
    assert svc.stats.too_large == 2 and out.events == []


async def test_bad_bodies_are_400_and_never_echoed(http):
    client, svc, out = await http()
    for body in (
        b"{" + SECRET.encode(),  # not JSON
        b'["' + SECRET.encode() + b'"]',  # not an object
        b'{"agent_id":"a","tool_name":"' + SECRET.encode() + b'"' + b"x" * 300 + b"}",
        b'{"agent_id":"a","session_id":"s","verdict_id":"v","outcome":"' + SECRET.encode() + b'"}',  # bad enum
        b'{"agent_id":"a","tool_name":"read","tool_call_id":"' + b"y" * 600 + b'"}',  # id over its cap
        b'{"tool_name":"read"}',  # no agent_id
    ):
        for path in ("/v1/check", "/v1/ack"):
            r = await client.post(path, data=body)
            text = await r.text()
            assert r.status == 400, (path, body[:40], text)
            assert SECRET not in text and "yyyy" not in text
            assert "error" in await r.json()
    r = await client.post("/v1/check", data=b'{"tool_name":"read"}')
    assert (await r.json())["error"] == "Object missing required field `agent_id`"
    assert out.events == []


async def test_a_body_that_is_not_utf8_inside_a_free_form_value_is_400(http):
    """msgspec takes params and result as Raw without looking inside: invalid UTF-8 there reached the
    engine, whose decision failed open (allowed, counted local_errors) and whose event the worker
    would dead-letter. Found by the HTTP fuzz stage (tests/sidecar/test_fuzz_sidecar_http.py)."""
    client, svc, out = await http()
    for path, body in (
        ("/v1/check", b'{"agent_id":"a","session_id":"s1","tool_name":"read","params":{"p":"\xf1\x80"}}'),
        ("/v1/result", b'{"agent_id":"a","session_id":"s1","tool_name":"read","result":"\xff"}'),
    ):
        r = await client.post(path, data=body)
        assert r.status == 400 and (await r.json())["error"] == "body is not valid UTF-8"
    assert out.events == [] and svc.client.stats.local_errors == 0 and svc.stats.bad_requests == 2


async def test_a_body_nested_past_the_wire_bound_is_400_without_a_trace(http, caplog):
    """100,000-deep params made msgspec raise RecursionError: a 500 and a stack trace in the log per
    request. Bodies deeper than the wire's bound (the worker dead-letters such events) are 400."""
    client, svc, out = await http()
    for depth in (64, 1000, 100_000):
        params = b"[" * depth + b"]" * depth
        for path in ("/v1/check", "/v1/hooks/claude-code"):
            r = await client.post(path, data=b'{"agent_id":"a","tool_name":"t","params":' + params + b"}")
            assert r.status == 400 and "nested deeper than 64" in (await r.json())["error"]
    at_bound = b"[" * 63 + b"]" * 63  # the body around it makes 64
    ok = await client.post("/v1/check", data=b'{"agent_id":"a","tool_name":"t","params":' + at_bound + b"}")
    assert ok.status == 200
    assert svc.stats.internal_errors == 0 and "Traceback" not in caplog.text and len(out.events) == 1


async def test_unknown_path_404_wrong_method_405(http):
    client, svc, out = await http()
    r = await client.get("/v1/nope")
    assert r.status == 404 and "error" in await r.json()
    r = await client.post("/check", json={**AGENT, "tool_name": "read"})
    assert r.status == 404
    r = await client.get("/v1/check")
    assert r.status == 405 and "POST" in (await r.json())["error"]


async def test_token_is_required_when_given(http):
    client, svc, out = await http(token=b"s3cret-token")
    check = {**AGENT, "tool_name": "read"}
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Bearer s3cret-token2"},
        {"Authorization": "s3cret-token"},
    ):
        r = await client.post("/v1/check", json=check, headers=headers)
        assert r.status == 401 and "s3cret" not in await r.text()
        r = await client.get("/v1/nope", headers=headers)
        assert r.status == 401  # before routing: a stranger learns nothing of the paths
    good = {"Authorization": "Bearer s3cret-token"}
    r = await client.post("/v1/check", json=check, headers=good)
    assert r.status == 200 and (await r.json())["action"] == "allow"
    assert (await client.get("/v1/health", headers=good)).status == 200
    assert svc.stats.unauthorized == 8


async def test_every_table_is_a_bounded_lru(http):
    client, svc, out = await http(Limits(max_sessions=3, max_runs=2, max_pending=4))
    for i in range(5):
        await client.post("/v1/check", json={"agent_id": "a", "session_id": f"s{i}", "tool_name": "read"})
    health = await (await client.get("/v1/health")).json()
    tables = health["tables"]
    assert 0 < tables.pop("pending_bytes") < 2000  # two checks' ids, no params
    assert tables == {
        "sessions": 3,
        "runs": 2,
        "pending": 2,  # a dropped run's pending checks go with it
        "max_sessions": 3,
        "max_runs": 2,
        "max_pending": 4,
        "max_body": 1 << 20,
        "live_runs": 0,
        "max_pending_bytes": 32 << 20,
    }
    assert len(svc.client._runs) == 2  # dropped runs are no longer registered with the client
    for _ in range(6):
        await client.post("/v1/check", json={"agent_id": "a", "session_id": "s4", "tool_name": "read"})
    stats = (await (await client.get("/v1/stats")).json())["service"]
    assert (stats["sessions_evicted"], stats["runs_evicted"], stats["pending_evicted"]) == (2, 3, 4)  # 2 + 6 > 4
    assert svc.tables().pending == 4


async def test_a_worker_block_and_warning_answer_the_next_check(http):
    """What the worker sends for a call that already ran (a correction, a fleet block) answers the run's
    next check, its text built from the verdict's fields."""
    from loopwarden.schemas.verdicts import Verdict

    client, svc, out = await http()
    first = await (await client.post("/v1/check", json={**AGENT, "tool_name": "exec"})).json()
    run_id = first["run_id"]
    key = run_id.encode()
    fields = {"agent_id": "a", "session_id": "s1", "run_id": run_id, "tool_name": "exec", "count": 7}
    fields["event_ts"] = time.time()  # as a worker's: the time of the event it answers, during this run
    svc.client._on_verdict(
        key, Verdict(verdict_id="w-1", action="warn", detector="cross_run_repeat", level="warning", **fields)
    )
    a = await (await client.post("/v1/check", json={**AGENT, "tool_name": "exec"})).json()
    assert (a["action"], a["source"], a["verdict_id"], a["proceed"]) == ("warn", "worker_warning", "w-1", True)
    r = await client.post("/v1/result", json={**AGENT, "tool_call_id": a["tool_call_id"], "result": "ok"})
    assert (await r.json())["warning"]["verdict_id"] == "w-1"  # handed back with the result as well
    svc.client._on_verdict(
        key,
        Verdict(
            verdict_id="b-1", action="block", detector="fleet_incident", level="critical", message=SECRET, **fields
        ),
    )
    b = await (await client.post("/v1/check", json={**AGENT, "tool_name": "exec"})).json()
    assert (b["action"], b["source"], b["verdict_id"], b["detector"]) == (
        "block",
        "pending_block",
        "b-1",
        "fleet_incident",
    )
    assert SECRET not in b["message"] and "exec" in b["message"]
    c = await (await client.post("/v1/check", json={**AGENT, "tool_name": "exec"})).json()
    assert c["action"] == "allow"


async def test_unix_socket_is_0600_and_serves(tmp_path):
    svc, out = service()
    path = str(tmp_path / "lw.sock")
    (tmp_path / "lw.sock").touch()
    with pytest.raises(FileExistsError):  # a regular file is never removed
        await start_listeners(svc, make_app(svc), None, 0, path)
    os.unlink(path)
    server, urls = await start_listeners(svc, make_app(svc), "127.0.0.1", 0, path)
    try:
        assert urls[0].startswith("http://127.0.0.1:") and urls[1] == f"unix:{path}"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path)) as session:
            async with session.post("http://sidecar/v1/check", json={**AGENT, "tool_name": "read"}) as r:
                assert (await r.json())["action"] == "allow"
    finally:
        await server.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "example.org"])
def test_refuses_to_bind_beyond_loopback_without_a_token(host, capsys):
    parser = cli.build_parser()
    args = parser.parse_args(["sidecar", "--host", host, "--port", "0", "--config", "x.json"])
    assert args.func(args) == 2
    assert "beyond loopback" in capsys.readouterr().err


def test_empty_token_file_is_refused(tmp_path, capsys):
    token = tmp_path / "token"
    token.write_text("\n")
    args = cli.build_parser().parse_args(["sidecar", "--token-file", str(token)])
    assert args.func(args) == 2 and "empty" in capsys.readouterr().err


def test_loopback_names():
    from loopwarden.sidecar.app import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.5.5.5", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "localhost.example.org"))
    assert isinstance(cli.build_parser().parse_args(["sidecar"]), argparse.Namespace)


async def test_an_abort_answers_every_later_check_and_run_end_acks_it(http):
    """The post-compaction guard aborts on a result (no check to answer): the run's next checks answer
    abort, and run_end acknowledges it once."""
    client, svc, out = await http()
    await client.post("/v1/compaction", json={**AGENT, "reason": "context overflow"})
    answers, results = [], []
    for _ in range(3):
        a = await (await client.post("/v1/check", json={**AGENT, "tool_name": "read", "params": {"path": "a"}})).json()
        answers.append(a)
        result = {"run_id": a["run_id"], "tool_call_id": a["tool_call_id"], "result": {"text": "same"}}
        results.append(await (await client.post("/v1/result", json={**AGENT, **result})).json())
    assert {a["action"] for a in answers} == {"allow"}
    # the third identical outcome after the compaction aborts the run: its result's answer says so
    assert [r["abort"] is not None for r in results] == [False, False, True]
    assert results[2]["abort"]["run_id"] == answers[0]["run_id"] and results[2]["abort"]["message"]
    later = [await (await client.post("/v1/check", json={**AGENT, "tool_name": "read"})).json() for _ in range(2)]
    assert [(a["action"], a["source"], a["proceed"]) for a in later] == [("abort", "aborted", False)] * 2
    assert later[0]["detector"] == "compaction_loop_persisted" and later[0]["verdict_id"] == later[1]["verdict_id"]
    assert later[0]["verdict_id"] == results[2]["abort"]["verdict_id"]
    await client.post("/v1/run_end", json=AGENT)
    acks = of_type(out, "VerdictAck")
    assert [(a.verdict_id, a.outcome) for a in acks] == [(later[0]["verdict_id"], "applied")]
    assert of_type(out, "CompactionRetry")[0].reason == "context overflow"
    assert [e.run_id for e in of_type(out, "RunEnd")] == [answers[0]["run_id"]]


async def test_browser_and_rebound_host_requests_are_refused(http):
    """A page in the developer's browser may send to 127.0.0.1 (with an Origin header) or, after DNS
    rebinding, with its own host name in Host: both are 403, and nothing is decided or published."""
    client, svc, out = await http()
    check = {**AGENT, "tool_name": "read"}
    r = await client.post("/v1/check", json=check, headers={"Origin": "https://evil.example"})
    assert r.status == 403
    r = await client.post("/v1/run_end", json=AGENT, headers={"Host": "evil.example:7766"})
    assert r.status == 403
    for host in ("127.0.0.1:7766", "localhost:7766", "[::1]:7766", "localhost"):
        r = await client.post("/v1/check", json=check, headers={"Host": host})
        assert r.status == 200, host
    assert svc.stats.forbidden == 2 and svc.client.stats.checks == 4
