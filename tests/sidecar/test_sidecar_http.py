"""The decision service's HTTP server over real loopback sockets: framing, keep-alive and every bound.

A client here writes raw bytes (what a hostile local process can send), so
each bound is crossed exactly: a head over ``max_head`` in one piece or split
across writes, too many header fields, a body over ``max_body`` by length or
chunked, more connections than allowed, an idle or a slow connection, bytes
that are not HTTP. Pipelined requests are answered in order, and an answer
the client never reads holds back the rest.
"""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from loopwarden.sidecar.http import HTTPServer, Request, ServerLimits


async def echo(request: Request) -> tuple[int, bytes]:
    if request.path == "/slow":
        await asyncio.sleep(0.05)
    body = {"method": request.method, "path": request.path, "n": len(request.body), "unix": request.unix}
    return 200, json.dumps(body).encode()


@pytest.fixture
async def serve():
    servers = []

    async def start(**limits):
        server = HTTPServer(echo, ServerLimits(**limits))
        urls = await server.start("127.0.0.1", 0, None)
        servers.append(server)
        port = int(urls[0].rsplit(":", 1)[1])
        return server, port

    yield start
    for server in servers:
        await server.close()


def post(path: str = "/v1/check", body: bytes = b"{}", extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path.encode(),
        len(body),
        extra,
        body,
    )


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 5) == b""


async def test_keep_alive_and_pipelined_requests_answered_in_order(serve):
    server, port = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(post(f"/p{i}", b"x" * i) for i in range(40)))  # reading pauses past 16, resumes
    answers = [await read_answer(reader) for _ in range(40)]
    assert [json.loads(b)["path"] for _, _, b in answers] == [f"/p{i}" for i in range(40)]
    assert [json.loads(b)["n"] for _, _, b in answers] == list(range(40))
    writer.write(post("/slow") + post("/after"))  # an answer under way holds back the next one
    assert json.loads((await read_answer(reader))[2])["path"] == "/slow"
    assert json.loads((await read_answer(reader))[2])["path"] == "/after"
    writer.close()


async def test_http_1_0_and_connection_close_end_the_connection(serve):
    server, port = await serve()
    for request in (
        b"GET /v1/health HTTP/1.0\r\n\r\n",
        b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        status, headers, _ = await read_answer(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await closed(reader)
        writer.close()


async def test_a_client_that_half_closes_gets_its_answers_then_the_close(serve):
    """``printf ... | nc -N``: the request, then the end of what the client sends. Every request that
    came whole is answered, one that waits included; then the server closes."""
    server, port = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/a") + post("/slow") + post("/b"))
    writer.write_eof()
    paths = [json.loads((await read_answer(reader))[2])["path"] for _ in range(3)]
    assert paths == ["/a", "/slow", "/b"] and await closed(reader)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")  # cut off by the end
    writer.write_eof()
    assert await closed(reader)


async def test_chunked_body_is_joined(serve):
    server, port = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    writer.write(b"5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n")
    status, _, body = await read_answer(reader)
    assert status == 200 and json.loads(body)["n"] == 8
    writer.close()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n",  # the request line alone
        b"GET / HTTP/1.1\r\nX-Big: " + b"v" * 5000 + b"\r\n\r\n",  # one header
        b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(20)) + b"\r\n",  # too many fields
    ],
)
async def test_a_head_over_its_bounds_is_431_and_closed(serve, request_bytes):
    server, port = await serve(max_head=4096, max_headers=10)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes)
    status, headers, body = await read_answer(reader)
    assert status == 431 and headers["connection"] == "close" and b"vvvv" not in body
    assert await closed(reader)
    assert server.counts.too_large == 1
    writer.close()


async def test_a_header_split_across_writes_is_bounded_before_it_completes(serve):
    """httptools holds a header's pieces until its end: a header that never ends is cut off by the
    bytes fed, not by a field count that never arrives."""
    server, port = await serve(max_head=4096)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nX-Endless: ")
    await writer.drain()
    await asyncio.sleep(0.05)
    for _ in range(10):
        try:
            writer.write(b"v" * 1000)
            await writer.drain()
        except ConnectionError:  # the server answered and closed: the rest is never read
            break
        await asyncio.sleep(0.01)
    status, _, _ = await read_answer(reader)
    assert status == 431 and await closed(reader)
    writer.close()


async def test_a_body_over_max_body_is_413_by_length_and_chunked(serve):
    server, port = await serve(max_body=100)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")  # refused unread
    status, headers, _ = await read_answer(reader)
    assert status == 413 and headers["connection"] == "close" and await closed(reader)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(5):
        writer.write(b"32\r\n" + b"z" * 50 + b"\r\n")
    status, _, body = await read_answer(reader)
    assert status == 413 and b"zzz" not in body and await closed(reader)
    assert server.counts.too_large == 2


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,  # a TLS hello
        b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",  # smuggling
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
)
async def test_what_is_not_http_is_400_and_closed(serve, garbage):
    server, port = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(garbage)
    status, headers, _ = await read_answer(reader)
    assert status == 400 and headers["connection"] == "close" and await closed(reader)
    assert server.counts.bad_requests == 1
    writer.close()


async def test_idle_sockets_cannot_lock_clients_out(serve):
    """F4: 1,024 idle sockets (the default bound) and more: a client's request is still answered, the
    oldest idle socket giving up its slot, and every slot is free again once the idle ones are gone."""
    server, port = await serve()
    idle = []
    for _ in range(ServerLimits().max_connections + 100):
        sock = socket.socket()
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        idle.append(sock)
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post())
    assert (await read_answer(reader))[0] == 200
    assert len(server.connections) <= ServerLimits().max_connections
    assert server.counts.connections_refused == 0 and server.counts.connections_evicted >= 100
    writer.close()
    for sock in idle:
        sock.close()


async def test_only_a_slot_answering_a_request_is_kept_and_then_newcomers_are_503(serve):
    gate = asyncio.Event()

    async def hold(request: Request) -> tuple[int, bytes]:
        await gate.wait()
        return 200, b"{}"

    server = HTTPServer(hold, ServerLimits(max_connections=3))
    port = int((await server.start("127.0.0.1", 0, None))[0].rsplit(":", 1)[1])
    try:
        busy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for _, w in busy:
            w.write(post())
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        status, _, _ = await read_answer(reader)
        assert status == 503 and await closed(reader)
        assert server.counts.connections_refused == 1
        gate.set()
        for r, _ in busy:
            assert (await read_answer(r))[0] == 200
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # answered: idle, so it yields its slot
        writer.write(post())
        assert (await read_answer(reader))[0] == 200
        for _, w in busy:
            w.close()
        writer.close()
    finally:
        await server.close()


async def guarded(request: Request) -> tuple[int, bytes]:
    """A handler with a token, as the service's guard: 401 without it."""
    if request.headers.get("authorization") != "Bearer t":
        return 401, b"{}"
    return 200, b"{}"


async def test_unauthenticated_connections_have_a_small_budget_and_a_deadline(serve):
    """F4: slots are not taken before the token is checked. Connections that have not passed the guard
    share a budget of their own (past it, the oldest of them gives way, an authenticated one never) and
    are closed when not authenticated within the deadline; a wrong token does not authenticate."""
    limits = ServerLimits(max_connections=20, max_unauthenticated=4, auth_timeout=1.0)
    server = HTTPServer(guarded, limits)
    port = int((await server.start("127.0.0.1", 0, None))[0].rsplit(":", 1)[1])
    auth = b"Authorization: Bearer t\r\n"
    try:
        good = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for r, w in good:
            w.write(post(extra=auth))
            assert (await read_answer(r))[0] == 200
        wrong = await asyncio.open_connection("127.0.0.1", port)
        wrong[1].write(post(extra=b"Authorization: Bearer nope\r\n"))
        assert (await read_answer(wrong[0]))[0] == 401
        strangers = [await asyncio.open_connection("127.0.0.1", port) for _ in range(30)]
        await asyncio.sleep(0.1)
        assert len(server.unauthenticated) <= 4 and len(server.connections) <= 3 + 4
        for r in (wrong[0], strangers[0][0]):  # the oldest unauthenticated gave way
            assert (await read_answer(r))[0] == 503 and await closed(r)
        for r, w in good:  # the authenticated ones kept theirs
            w.write(post(extra=auth))
            assert (await read_answer(r))[0] == 200
        late = strangers[-1]
        status, _, _ = await read_answer(late[0])  # never authenticated: closed by the deadline
        assert status == 408 and await closed(late[0])
        for _, w in [*good, *strangers, wrong]:
            w.close()
    finally:
        await server.close()


async def test_one_peer_cannot_take_every_slot(serve):
    """F4: a peer (an address on TCP) holds at most ``max_per_peer`` connections: past it its own oldest
    gives way, and another peer still gets a slot."""
    server, port = await serve(max_connections=8, max_per_peer=4)
    loop = asyncio.get_running_loop()
    flood = []
    for _ in range(20):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        sock.sendall(post())  # authenticated (no token here): still only four of them
        flood.append(sock)
    await asyncio.sleep(0.2)
    assert server.per_peer[("ip", "127.0.0.2")] <= 4
    assert server.counts.connections_refused == 0
    other = socket.socket()
    other.bind(("127.0.0.3", 0))
    other.setblocking(False)
    await loop.sock_connect(other, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=other)
    writer.write(post())
    assert (await read_answer(reader))[0] == 200
    writer.close()
    for sock in flood:
        sock.close()


async def test_every_header_field_counts_toward_the_bound_repeated_names_too(serve):
    """F12: 500 repeats of one field are 500 fields, not one."""
    server, port = await serve()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(extra=b"X-A: 1\r\n" * 500))
    status, _, body = await read_answer(reader)
    assert status == 431 and b"too many header fields" in body and await closed(reader)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(extra=b"X-A: 1\r\n" * 60))  # within the bound
    assert (await read_answer(reader))[0] == 200
    writer.close()


async def test_idle_and_slow_connections_are_closed_by_the_sweep(serve):
    server, port = await serve(idle_timeout=0.5, request_timeout=0.5)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    idle_writer.write(post())
    assert (await read_answer(idle_reader))[0] == 200
    slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
    slow_writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")  # never finished
    status, _, _ = await read_answer(slow_reader)  # within the sweep's second
    assert status == 408 and await closed(slow_reader)
    assert await closed(idle_reader)
    for _ in range(300):  # the refused one lingers a moment, reading what else comes
        if not server.connections:
            break
        await asyncio.sleep(0.01)
    assert server.counts.timeouts == 2 and not server.connections
