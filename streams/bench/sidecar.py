"""``loopwarden bench sidecar``: the time a check takes over loopback, beside an in-process LoopClient.

On the embedded broker (no worker: local decisions need none), one
``loopwarden sidecar`` child process with the fleet's config, asked over one
keep-alive connection (TCP on 127.0.0.1, then its Unix socket) by a lean
client (:class:`RawClient`: a socket, requests written whole, answers framed
by ``Content-Length``, as a Go or Node client with keep-alive would be), and,
in this process, a :class:`~loopwarden.runner.LoopClient` deciding locally
with the same config: the floor the service adds its HTTP hop to. Python's
``http.client`` would add about 0.15 ms of its own per request.

Each tool call is a ``check`` (timed: send to answer) and its ``result``
(sent, not timed), in healthy runs of 40 calls with distinct params (every
decision ``allow``, every call published). Two levels per way of asking: one
call at a time, back to back; and an open-loop schedule of ``--rate``
checks/s (default 1,000) for ``--seconds``, where a call starts at its slot
(or at once when the previous one overran it, counted ``late``). Reported:
p50/p90/p99/p99.9/max in ms, the load average before and after (a shared
machine's neighbours show there), and the service's added p50/p99 over the
in-process client.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.bench.stats import CpuMeter, machine_stalls, percentile

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}}}
RUN_LENGTH = 40
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")


def _params(n: int) -> dict:
    return {"path": f"src/file_{n}.py", "offset": n % 7}


def summary(samples: list[float], seconds: float, late: int = 0) -> dict[str, Any]:
    """Percentiles in ms of per-check seconds; the achieved rate."""
    s = sorted(samples)
    ms = {f"p{q:g}_ms": round(percentile(s, q / 100) * 1e3, 4) for q in (50, 90, 99, 99.9)}
    return {
        "checks": len(s),
        **ms,
        "max_ms": round((s[-1] if s else float("nan")) * 1e3, 4),
        "checks_per_s": round(len(s) / seconds, 1) if seconds > 0 else None,
        "late": late,
    }


def _slot(start: float, i: int, rate: float | None) -> tuple[float, bool]:
    """Seconds to wait for call ``i``'s slot on the open-loop schedule, and whether it is late
    (the previous call overran its slot by more than one period)."""
    if rate is None:
        return 0.0, False
    behind = time.perf_counter() - (start + i / rate)
    return max(0.0, -behind), behind > 1 / rate


class RawClient:
    """One kept-alive connection to the service (``http://host:port`` or ``unix:PATH``): a request is
    written in one piece and its answer read by ``Content-Length``. For timing only: no chunked
    answers, no reconnecting."""

    def __init__(self, url: str) -> None:
        if url.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(url[len("unix:") :])
        else:
            host, port = url.split("//", 1)[1].rsplit(":", 1)
            self.sock = socket.create_connection((host.strip("[]"), int(port)))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def post(self, path: str, body: dict) -> dict:
        data = msgspec.json.encode(body)
        self.sock.sendall(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), len(data), data)
        )
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                length = int(_LENGTH.search(self.buf, 0, end).group(1))
                if len(self.buf) >= end + 4 + length:
                    status = self.buf[9:12]
                    answer, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
                    if status != b"200":
                        raise RuntimeError(f"{path}: {status.decode()} {answer[:200]!r}")
                    return msgspec.json.decode(answer)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the service closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def _http_calls(client: RawClient, n: int, rate: float | None) -> dict[str, Any]:
    """``n`` calls through the service (one at a time, or on an open-loop schedule of ``rate``/s)."""
    samples: list[float] = []
    late = 0
    session = f"bench-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    for i in range(n):
        wait, behind = _slot(start, i, rate)
        time.sleep(wait)
        late += behind
        if i % RUN_LENGTH == 0:
            client.post("/v1/run_start", {"agent_id": "bench", "session_id": session})
        check = {"agent_id": "bench", "session_id": session, "tool_name": "read", "params": _params(i)}
        t0 = time.perf_counter()
        answer = client.post("/v1/check", check)
        samples.append(time.perf_counter() - t0)
        result = {"agent_id": "bench", "session_id": session, "tool_call_id": answer["tool_call_id"]}
        client.post("/v1/result", {**result, "result": {"text": f"body {i}"}})
    return summary(samples, time.perf_counter() - start, late)


def _with_cpu(meter: CpuMeter, level: Any, *args: Any) -> dict[str, Any]:
    """Run one level; add the service's CPU µs per call (check and result) and each process's CPU %."""
    before = meter.seconds()
    meter.mark()
    report = level(*args)
    used = meter.seconds()
    report["service_cpu_us_per_call"] = round((used["service"] - before["service"]) / report["checks"] * 1e6, 1)
    report["cpu_percent"] = meter.percent()
    return report


async def _inprocess_calls(client: Any, n: int, rate: float | None) -> dict[str, Any]:
    samples: list[float] = []
    late = 0
    run = None
    start = time.perf_counter()
    for i in range(n):
        wait, behind = _slot(start, i, rate)
        if wait:
            await asyncio.sleep(wait)
        late += behind
        if i % RUN_LENGTH == 0:
            if run is not None:
                await run.end()
            run = client.run("bench", session_id="bench-inproc", run_id=f"run_{uuid.uuid4().hex[:16]}")
        t0 = time.perf_counter()
        decision = await run.check("read", _params(i))
        samples.append(time.perf_counter() - t0)
        await run.tool_result(decision, result={"text": f"body {i}"})
    return summary(samples, time.perf_counter() - start, late)


async def _inprocess(bootstrap: str, names: Any, config: Path, n: int, rate: float, seconds: float) -> dict:
    from loopwarden.runner import LoopClient

    client = LoopClient(
        bootstrap=bootstrap,
        events_topic=names.events,
        control_topic=names.control,
        config_topic=names.config,
        config=str(config),
    )
    async with client:
        await _inprocess_calls(client, 200, None)  # warm-up
        sequential = await _inprocess_calls(client, n, None)
        paced = await _inprocess_calls(client, int(rate * seconds), rate)
    return {"sequential": sequential, "paced": paced}


async def _topics(broker_url: str, names: Any) -> None:
    import msgspec

    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.worker.settings import settings_from_flags

    await ensure_topics(
        msgspec.structs.replace(
            settings_from_flags(broker_url, ()),
            events_topic=names.events,
            control_topic=names.control,
            config_topic=names.config,
            dead_letter_topic=names.dead_letter,
        )
    )


def bench(n: int, rate: float, seconds: float) -> dict[str, Any]:
    from loopwarden.devtools.broker import EmbeddedBroker
    from loopwarden.devtools.processes import TopicNames
    from loopwarden.sidecar.client import SidecarClient
    from loopwarden.sidecar.process import SidecarProcess

    names = TopicNames(f"bench-sidecar-{uuid.uuid4().hex[:6]}")
    report: dict[str, Any] = {"load_before": os.getloadavg(), "cpus": os.cpu_count(), "stalls": machine_stalls()}
    with tempfile.TemporaryDirectory(prefix="lw-bench-sidecar-") as tmp, EmbeddedBroker() as broker:
        asyncio.run(_topics(broker.url, names))
        config = Path(tmp) / "loopwarden.json"
        config.write_text(json.dumps(CONFIG))
        report["in_process"] = asyncio.run(_inprocess(broker.bootstrap, names, config, n, rate, seconds))
        args = ["--config", str(config), "--bootstrap", broker.bootstrap, "--socket", str(Path(tmp) / "lw.sock")]
        args += ["--events-topic", names.events, "--control-topic", names.control, "--config-topic", names.config]
        service = SidecarProcess(args, log_path=Path(tmp) / "sidecar.log").start()
        try:
            assert service.proc is not None and broker.process is not None
            meter = CpuMeter({"service": service.proc.pid, "broker": broker.process.pid})
            for name, url in (("tcp", service.urls[0]), ("unix", service.urls[1])):
                client = RawClient(url)
                try:
                    _http_calls(client, 200, None)  # warm-up: connection, first runs
                    report[name] = {
                        "sequential": _with_cpu(meter, _http_calls, client, n, None),
                        "paced": _with_cpu(meter, _http_calls, client, int(rate * seconds), rate),
                    }
                finally:
                    client.close()
            with SidecarClient(service.urls[0]) as client:
                report["service_stats"] = client.get("/v1/stats")["client"]
        finally:
            service.stop()
    report["load_after"] = os.getloadavg()
    inproc = report["in_process"]
    report["added_ms"] = {
        f"{way}_{level}": {q: round(report[way][level][q] - inproc[level][q], 4) for q in ("p50_ms", "p99_ms")}
        for way in ("tcp", "unix")
        for level in ("sequential", "paced")
    }
    return report


def table(report: dict[str, Any]) -> str:
    stalls = report["stalls"]
    rows = [
        f"load average before {report['load_before'][0]:.2f}, after {report['load_after'][0]:.2f} "
        f"({report['cpus']} CPUs); the machine's own stalls: {stalls['gaps_over_0.2ms_per_s']}/s over "
        f"0.2 ms, {stalls['gaps_over_1ms_per_s']}/s over 1 ms, longest {stalls['longest_gap_ms']} ms",
        f"{'way':<12}{'level':<12}{'checks':>8}{'per s':>9}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'max ms':>9}"
        f"{'late':>6}",
    ]
    for way in ("in_process", "tcp", "unix"):
        for level in ("sequential", "paced"):
            r = report[way][level]
            rows.append(
                f"{way:<12}{level:<12}{r['checks']:>8}{r['checks_per_s']:>9}{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}"
                f"{r['p99.9_ms']:>10.3f}{r['max_ms']:>9.3f}{r['late']:>6}"
            )
    for key, added in report["added_ms"].items():
        rows.append(f"service adds ({key}): p50 {added['p50_ms']:.3f} ms, p99 {added['p99_ms']:.3f} ms")
    for way in ("tcp", "unix"):
        for level in ("sequential", "paced"):
            r = report[way][level]
            if "service_cpu_us_per_call" in r:
                cpu = r["cpu_percent"]
                rows.append(
                    f"service CPU ({way}_{level}): {r['service_cpu_us_per_call']:.0f} µs per call (check and result); "
                    f"CPU % service {cpu['service']}, broker {cpu['broker']}, client {cpu['runners']}"
                )
    return "\n".join(rows)


def add_arguments(p: Any) -> None:
    p.add_argument("--checks", type=int, default=3000, help="checks of the one-at-a-time level")
    p.add_argument("--rate", type=float, default=1000.0, help="checks/s of the paced level")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of the paced level")


def run(args: Any) -> int:
    report = bench(args.checks, args.rate, args.seconds)
    print(json.dumps(report, indent=2))
    print(table(report))
    return 0
