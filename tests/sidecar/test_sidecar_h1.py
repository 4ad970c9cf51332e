"""The service's HTTP/1.1 protocol without a socket (``loopwarden.sidecar.h1``): bytes in, requests
or a refusal out, whatever pieces the bytes come in."""

from __future__ import annotations

import pytest

from loopwarden.sidecar.h1 import Refusal, RequestReader


def reader(max_head: int = 1024, max_headers: int = 8, max_body: int = 64) -> tuple[RequestReader, list]:
    got: list = []
    return RequestReader(max_head, max_headers, max_body, lambda r, keep: got.append((r, keep))), got


def post(path: str, body: bytes, close: bool = False) -> bytes:
    connection = b"Connection: close\r\n" if close else b""
    head = b"POST %s?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n%s\r\n" % (path.encode(), len(body), connection)
    return head + body


@pytest.mark.parametrize("piece", [1, 3, 7, 1000])
def test_pipelined_requests_in_any_pieces_come_out_whole_and_in_order(piece: int) -> None:
    r, got = reader()
    data = post("/v1/check", b'{"a":1}') + post("/v1/result", b"x" * 64) + post("/v1/end", b"", close=True)
    for i in range(0, len(data), piece):
        assert r.feed(data[i : i + piece], now=float(i))
    assert [(q.method, q.path, q.body, keep) for q, keep in got] == [
        ("POST", "/v1/check", b'{"a":1}', True),
        ("POST", "/v1/result", b"x" * 64, True),
        ("POST", "/v1/end", b"", False),
    ]
    assert got[0][0].headers["content-length"] == "7" and r.started is None and r.refusal is None


def test_started_is_the_time_of_a_requests_first_bytes_until_it_completes() -> None:
    r, got = reader()
    data = post("/v1/check", b"{}")
    assert r.feed(data[:5], now=10.0) and r.started == 10.0
    assert r.feed(data[5:], now=12.0) and r.started is None and len(got) == 1


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        (post("/v1/check", b"x" * 65), Refusal(413, "body over 64 bytes", True)),
        (
            b"POST /v1/check HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(9)) + b"\r\n",
            Refusal(431, "too many header fields", True),
        ),
        (b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\n\r\n", Refusal(431, "request head too large", True)),
        (
            b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
            Refusal(400, "upgrade not supported", False),
        ),
        (b"\x00\x01 nonsense\r\n\r\n", Refusal(400, "malformed HTTP request", False)),
    ],
)
def test_a_request_past_a_bound_or_unframeable_ends_the_reader_with_its_refusal(data: bytes, refusal) -> None:
    r, got = reader()
    assert r.feed(data, now=0.0) is False
    assert r.refusal == refusal
    assert got == [] and r.feed(post("/v1/check", b"{}"), now=1.0) is False  # nothing more is framed


def test_a_split_head_is_bounded_while_httptools_holds_its_pieces() -> None:
    r, _ = reader(max_head=100)
    assert r.feed(b"GET / HTTP/1.1\r\nX-Long: ", now=0.0)
    for _ in range(5):
        if not r.feed(b"a" * 30, now=0.0):
            break
    assert r.refusal == Refusal(431, "request head too large", True)
