"""Health that tells the truth: crashed services and a stalled loop give 503; the watchdog exits."""

from __future__ import annotations

import asyncio
import threading
import time

import mode

from loopwarden.worker.health import EXIT_UNHEALTHY, Health, Watchdog


async def test_a_crashed_service_makes_healthz_503_with_its_reason():
    consumer, producer = mode.Service(), mode.Service()
    health = Health(10.0, lambda: {"consumer": consumer, "producer": producer, "fetcher": None})
    health.beat()
    assert health.report() == (200, {"ok": True})
    await consumer.crash(RuntimeError("fetch loop died"))
    health.beat()
    status, body = health.report()
    assert status == 503 and not body["ok"]
    assert body["reasons"] == ["consumer crashed: RuntimeError('fetch loop died')"]


def test_a_stalled_event_loop_is_reported_and_the_watchdog_exits():
    """A real loop blocked by a synchronous call: the heartbeat stops, the watchdog thread sees it."""
    health = Health(0.2)
    exits: list[int] = []
    exited = threading.Event()

    def fake_exit(code: int) -> None:
        exits.append(code)
        exited.set()

    dog = Watchdog(health, exit_after=0.3, interval=0.05, exit=fake_exit)

    async def main() -> None:
        for _ in range(5):  # healthy: beating
            health.beat()
            await asyncio.sleep(0.05)
        assert health.reasons() == []
        time.sleep(1.0)  # the loop is stuck: no beats while this runs

    dog.start()
    asyncio.run(main())
    assert exited.wait(2)
    assert exits == [EXIT_UNHEALTHY]
    assert any("event loop stalled" in r for r in health.reasons())


def test_watchdog_stays_quiet_while_healthy_and_forgets_a_recovered_failure():
    now = [0.0]
    health = Health(5.0, clock=lambda: now[0])
    exits: list[int] = []
    dog = Watchdog(health, exit_after=10.0, interval=0.01, exit=exits.append)
    dog.start()
    try:
        for t in (1, 2, 7, 8, 9, 10, 16):  # stalled 6s at t=7..9 (unhealthy < 10s), then beats again
            now[0] = float(t)
            if t not in (7, 8, 9):
                health.beat()
            time.sleep(0.05)
    finally:
        dog.stop()
    assert exits == []


STALL_IN_C = """
import asyncio, re, sys
from loopwarden.worker.health import Health, StallExit, Watchdog

async def main():
    health, stall = Health(0.5), StallExit(float(sys.argv[1]))
    Watchdog(health, 1.0, interval=0.1).start()  # the GIL-bound thread: it cannot run during the match

    async def heartbeat():
        while True:
            health.beat()
            stall.beat()
            await asyncio.sleep(0.05)

    asyncio.ensure_future(heartbeat())
    await asyncio.sleep(0.3)
    print("stalling", flush=True)
    re.match(r"(a+)+$", "a" * 64 + "b")  # catastrophic backtracking: one C call holding the GIL for ages
    print("never reached", flush=True)

asyncio.run(main())
"""


def test_a_stall_inside_c_code_holding_the_gil_exits_the_process():
    """Issue 23: a regex on a hostile record held the GIL; the watchdog thread could not run, the worker
    never exited and was never restarted. faulthandler's timer thread needs no GIL: the process exits 1
    with every thread's traceback. (The subprocess timeout is only a guard against hanging the suite.)"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", STALL_IN_C, "1.0"], capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == ["stalling"]
    assert out.returncode == 1
    assert "Timeout (0:00:01)!" in out.stderr and "in main" in out.stderr  # where it was stuck


def test_stall_exit_off_and_stopped_does_nothing():
    import subprocess
    import sys

    code = (
        "import time\nfrom loopwarden.worker.health import StallExit\n"
        "off = StallExit(0); off.beat()\n"
        "on = StallExit(0.2); on.beat(); on.stop()\n"
        "time.sleep(0.6); print('alive')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout.strip()) == (0, "alive")
