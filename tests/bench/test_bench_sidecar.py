"""``bench sidecar`` reports percentiles in ms, the late count, and the service's added time (no timing asserted)."""

import asyncio
import threading

from loopwarden.bench.sidecar import RawClient, _http_calls, summary, table


def test_summary_is_in_milliseconds_with_the_rate():
    s = summary([0.001 * i for i in range(1, 101)], seconds=2.0, late=3)
    assert (s["checks"], s["p50_ms"], s["p99_ms"], s["max_ms"], s["checks_per_s"], s["late"]) == (
        100,
        50.0,
        99.0,
        100.0,
        50.0,
        3,
    )


def test_table_names_every_way_and_the_added_time():
    level = summary([0.0002, 0.0004], 1.0)
    report = {
        "load_before": (0.5, 0, 0),
        "load_after": (0.7, 0, 0),
        "cpus": 2,
        "stalls": {"gaps_over_0.2ms_per_s": 12.5, "gaps_over_1ms_per_s": 1.0, "longest_gap_ms": 3.2},
        **{way: {"sequential": level, "paced": level} for way in ("in_process", "tcp", "unix")},
        "added_ms": {"tcp_sequential": {"p50_ms": 0.1, "p99_ms": 0.2}},
    }
    text = table(report)
    assert "load average before 0.50, after 0.70" in text and "service adds (tcp_sequential): p50 0.100" in text
    assert all(way in text for way in ("in_process", "tcp", "unix"))
    assert "stalls: 12.5/s over 0.2 ms, 1.0/s over 1 ms, longest 3.2 ms" in text


def test_the_lean_client_drives_real_runs_through_the_service(tmp_path):
    """The bench's client against the service's own HTTP server (a local decision, an outbox stand-in):
    every check answered and paired with its result, runs of 40 calls, over TCP and the Unix socket."""
    from loopwarden.runner import LoopClient
    from loopwarden.sidecar.app import make_app, start_listeners
    from loopwarden.sidecar.service import Service
    from tests.runner.test_runner_local import CONFIG, Captured

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state = {}

    async def serve():
        client = LoopClient(bootstrap="127.0.0.1:1", config=CONFIG)
        client._outbox = state["out"] = Captured()
        svc = state["svc"] = Service(client)
        state["server"], state["urls"] = await start_listeners(
            svc, make_app(svc), "127.0.0.1", 0, str(tmp_path / "s.sock")
        )
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        for url in state["urls"]:
            client = RawClient(url)
            report = _http_calls(client, 90, None)
            client.close()
            assert report["checks"] == 90 and report["p50_ms"] > 0
    finally:
        asyncio.run_coroutine_threadsafe(state["server"].close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    svc, out = state["svc"], state["out"]
    assert svc.stats.results_unpaired == 0 and svc.client.stats.checks == 180
    names = [type(e).__name__ for e in out.events]
    assert names.count("ToolCall") == 180 and names.count("ToolResult") == 180 and names.count("RunEnd") == 4
