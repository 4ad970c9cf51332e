"""Kafka record batches built byte by byte, for records no well-behaved client would write.

aiokafka's producer encodes header keys as UTF-8 and compresses what it is given, so it cannot
write a header key such as ``b"\\xff\\xfe"`` or a batch whose compression is broken. The
hostile-input tests and ``loopwarden bench fuzz`` need exactly those: :func:`encode_batch` builds a
v2 record batch (the format of every Kafka client since 0.11) from raw keys, values and header
keys, compressed with any codec aiokafka has; :func:`send_batch` hands it to a started producer.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence

from aiokafka import codec
from aiokafka.record.util import calc_crc32c, encode_varint

from loopwarden.internals.aiokafka_client import raw_batch

Header = tuple[bytes, bytes | None]
RawRecord = tuple[bytes | None, bytes | None, Sequence[Header]]  # key, value, headers (keys as bytes)

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_ENCODERS = {GZIP: codec.gzip_encode, SNAPPY: codec.snappy_encode, LZ4: codec.lz4_encode, ZSTD: codec.zstd_encode}
_AVAILABLE = {GZIP: codec.has_gzip, SNAPPY: codec.has_snappy, LZ4: codec.has_lz4, ZSTD: codec.has_zstd}


def codecs() -> list[int]:
    """The compression types this install can write (0: none)."""
    return [0] + [c for c, has in _AVAILABLE.items() if has()]


def _bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        encode_varint(-1, out.append)
    else:
        encode_varint(len(data), out.append)
        out += data


def _record(delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> bytes:
    body = bytearray(b"\x00")  # attributes
    encode_varint(0, body.append)  # timestamp delta
    encode_varint(delta, body.append)
    _bytes(body, key)
    _bytes(body, value)
    encode_varint(len(headers), body.append)
    for name, data in headers:
        _bytes(body, name)
        _bytes(body, data)
    out = bytearray()
    encode_varint(len(body), out.append)
    return bytes(out + body)


def encode_batch(records: Sequence[RawRecord], compression: int = 0) -> bytes:
    """One v2 batch of ``records`` (offsets 0..n-1; the broker assigns the real ones)."""
    payload = b"".join(_record(i, k, v, h) for i, (k, v, h) in enumerate(records))
    if compression:
        payload = _ENCODERS[compression](payload)
    now = int(time.time() * 1000)
    tail = struct.pack(">hiqqqhii", compression, len(records) - 1, now, now, -1, -1, -1, len(records)) + payload
    crc = calc_crc32c(memoryview(tail))
    head = struct.pack(">qiibI", 0, 4 + 1 + 4 + len(tail), 0, 2, crc)
    return head + tail


async def send_batch(producer: object, topic: str, partition: int, batch: bytes) -> None:
    """Publish a batch built by :func:`encode_batch` as it is, through a started aiokafka producer."""
    await (
        await producer.send_batch(
            raw_batch(producer, batch, struct.unpack_from(">i", batch, 57)[0]), topic, partition=partition
        )
    )  # type: ignore[attr-defined]
