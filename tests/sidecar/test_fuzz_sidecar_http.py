"""Fuzz stage: hostile bytes at the decision service's HTTP server, with the real endpoints behind it.

Each case is a connection that sends valid requests mutated (bytes flipped, inserted, cut; header
counts and sizes past the bounds; lengths that lie; chunked bodies; raw garbage) in random pieces,
then half-closes. What comes back must be whole HTTP/1.1 answers with JSON bodies, none echoing the
marker the requests carry, and then the close; after every case a plain check on a new connection
is answered, no connection is left open, and nothing failed inside (no 500, no local decision
that failed open on a body it took). Bodies nested 100,000 deep and of 8 MB are among them.
Seeded; the suite runs a few seconds; ``LOOPWARDEN_FUZZ_SECONDS=300`` (and ``LOOPWARDEN_FUZZ_SEED``) runs longer.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

from loopwarden.runner import LoopClient
from loopwarden.sidecar.app import make_app
from loopwarden.sidecar.http import HTTPServer, ServerLimits
from loopwarden.sidecar.service import Limits, Service
from tests.runner.test_runner_local import CONFIG, Captured

SECONDS = float(os.environ.get("LOOPWARDEN_FUZZ_SECONDS", "2"))
SEED = int(os.environ.get("LOOPWARDEN_FUZZ_SEED", "34"))
MARK = b"zq-marker-zq"
PATHS = ["/v1/check", "/v1/result", "/v1/ack", "/v1/run_start", "/v1/run_end", "/v1/compaction", "/v1/health"]


def body(rng: random.Random) -> bytes:
    doc = {"agent_id": "a", "session_id": rng.choice(["s1", "s2"]), "tool_name": "read"}
    doc["params"] = {"path": MARK.decode(), "n": rng.randrange(5)}
    roll = rng.random()
    if roll < 0.05:  # nested past every decoder's recursion bound
        depth = rng.choice([65, 1000, 100_000])
        return json.dumps(doc).encode()[:-1] + b', "deep": ' + b"[" * depth + b"]" * depth + b"}"
    if roll < 0.07:  # 8 MB
        return json.dumps(doc | {"result": "r" * (8 << 20)}).encode()
    if rng.random() < 0.3:
        doc[rng.choice(["verdict_id", "tool_call_id", "run_id", "reason"])] = MARK.decode() * rng.randrange(1, 80)
    return json.dumps(doc).encode()


def request(rng: random.Random) -> bytes:
    path = rng.choice(PATHS + ["/nope", "/v1/check?x=" + "y" * rng.randrange(50)])
    method = rng.choice([b"POST"] * 6 + [b"GET", b"PUT", b"HEAD", b"POST "])
    data = body(rng)
    headers = [b"Host: " + rng.choice([b"127.0.0.1:7766", b"localhost", b"evil.example", MARK])]
    if rng.random() < 0.1:
        headers.append(b"Origin: https://" + MARK)
    chunked = rng.random() < 0.15
    if chunked:
        headers.append(b"Transfer-Encoding: chunked")
        pieces = [data[i : i + rng.randrange(1, 40)] for i in range(0, len(data), 40)]
        data = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"
    else:
        length = len(data) + rng.choice([0] * 8 + [-3, 5, 10**9])
        headers.append(b"Content-Length: %d" % max(0, length))
    for _ in range(rng.choice([0] * 6 + [3, 70])):
        headers.append(b"X-%d: %s" % (rng.randrange(10**6), MARK * rng.randrange(1, 4)))
    if rng.random() < 0.05:
        headers.append(b"X-Big: " + b"v" * rng.randrange(10_000, 40_000))
    return method + b" " + path.encode() + b" HTTP/1.1\r\n" + b"\r\n".join(headers) + b"\r\n\r\n" + data


def mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.choice([0, 0, 0, 1, 3, 20])):
        at = rng.randrange(len(data) + 1)
        kind = rng.randrange(4)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            data[at:at] = rng.randbytes(rng.randrange(1, 8))
        elif kind == 2:
            del data[at : at + rng.randrange(1, 20)]
        else:
            data[at:at] = rng.choice([b"\r\n", b"\r\n\r\n", b"\x00", b":", b" "])
    return bytes(data)


def case(rng: random.Random) -> bytes:
    if rng.random() < 0.05:
        return rng.randbytes(rng.randrange(1, 3000))
    return b"".join(mutate(rng, request(rng)) for _ in range(rng.randrange(1, 5)))


def answers(raw: bytes) -> list[tuple[int, bytes]]:
    """The whole answers in ``raw``; fails the test on anything that is not one."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:200]
        lines = head.decode("latin-1").split("\r\n")
        assert lines[0].startswith("HTTP/1.1 "), lines[0]
        fields = dict(line.split(": ", 1) for line in lines[1:])
        length = int(fields["Content-Length"])
        assert fields["Content-Type"] == "application/json" and len(rest) >= length
        payload, raw = rest[:length], rest[length:]
        json.loads(payload)
        out.append((int(lines[0].split()[1]), payload))
    return out


async def one(rng: random.Random, port: int) -> list[tuple[int, bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = case(rng)
    try:
        at = 0
        while at < len(data):
            step = rng.choice([1, 7, 100, 5000, len(data)])
            writer.write(data[at : at + step])
            at += step
            await writer.drain()
            if rng.random() < 0.05:
                await asyncio.sleep(0.001)
        writer.write_eof()
    except OSError:
        pass  # the server refused and closed while we wrote: what it answered is still read
    try:
        raw = await asyncio.wait_for(reader.read(), 10)
    except OSError:  # our write broke on the server's close: the stream holds that error, not the answer
        raw = b""
    writer.close()
    return answers(raw)


async def test_hostile_bytes_get_whole_answers_or_a_close_and_the_service_goes_on():
    client = LoopClient(bootstrap="127.0.0.1:1", config=CONFIG)
    client._outbox = Captured()
    service = Service(client, Limits(max_body=20_000))
    server = HTTPServer(make_app(service), ServerLimits(max_body=20_000, max_head=8192, request_timeout=2.0))
    port = int((await server.start("127.0.0.1", 0, None))[0].rsplit(":", 1)[1])
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    cases = 0
    try:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline or cases < 30:
            for status, payload in await one(rng, port):
                statuses[status] = statuses.get(status, 0) + 1
                assert MARK not in payload or status == 200, payload[:200]  # only decisions name params
            cases += 1
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert answers(await asyncio.wait_for(reader.read(), 10))[0][0] == 200
            writer.close()
        for _ in range(300):  # refused connections linger a moment, reading what else comes
            if not server.connections:
                break
            await asyncio.sleep(0.01)
        assert not server.connections
    finally:
        await server.close()
    assert statuses.get(200) and statuses.get(400)  # the cases reached the endpoints and the refusals
    assert service.stats.internal_errors == 0 and client.stats.local_errors == 0  # every body decided or refused
