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
