"""aiokafka's record parsing, guarded: a record it cannot parse becomes a mark, not an exception.

aiokafka parses a fetched batch lazily, as the consumer iterates it; any error there (a header key
that is not UTF-8, a bad CRC, a batch whose compression is broken or whose codec is missing, a
truncated record) raises out of ``getmany()`` and the position stays before the record, so every
fetch raises again: one producer stops every reader of the topic, on every restart.
:func:`install` makes the fetcher read record sets through :class:`GuardedRecords`: batches are
parsed by aiokafka's own (C) parser as before; when it fails, the rest of that batch is parsed
again record by record with aiokafka's pure-Python parser, each record that still fails becomes
one mark (:func:`loopwarden.kafka.records.unreadable`: no key, no value, the header
``lw-unreadable`` saying why) at its own offset, and the records after it are kept. A batch that
cannot be read at all (CRC, compression) becomes one mark at its first offset; the consumer's
position moves past the whole batch, as aiokafka moves past every batch it reads.

A compressed batch is decompressed with a bound (:data:`MAX_DECOMPRESSED`): a gzip batch of a
megabyte can expand to a gigabyte, and aiokafka would hold all of it. :func:`install` also puts
bounded decoders in the names aiokafka's batch readers call, so a batch past the bound fails like
a broken one and becomes one mark. gzip (the standard library's, always available) is cut off as
it decompresses; snappy, lz4 and zstd need cramjam, which loopwarden does not install, and its
decoders take no bound, so theirs are checked after decompressing.

Process-wide and idempotent; every reader calls :func:`install` before it starts its consumer.

Private aiokafka names used (aiokafka < 0.15; checked by tests/internals/test_internals_contract.py):
``aiokafka.consumer.fetcher.MemoryRecords`` (the name the fetcher builds record sets with), the
codec names the batch readers call (``gzip_decode``, ``snappy_decode``, ``lz4_decode``,
``zstd_decode`` in ``aiokafka.record.default_records``, ``legacy_records`` and their C twins),
``aiokafka.record.memory_records._MemoryRecordsPy`` (its ``_next_slice``), and
``aiokafka.record.default_records._DefaultRecordBatchPy`` (``_maybe_uncompress``, ``_read_msg``,
``_buffer``, ``_pos``, ``_next_record_index``, ``_num_records``).
"""

from __future__ import annotations

import hashlib
import logging
import struct
import zlib
from collections.abc import Iterator
from typing import Any

from aiokafka import codec
from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import _DefaultRecordBatchPy
from aiokafka.record.memory_records import _MemoryRecordsPy
from aiokafka.record.util import decode_varint

from loopwarden.kafka.records import UNREADABLE

log = logging.getLogger(__name__)

_MAGIC_AT = 16  # base offset (8) + batch length (4) + partition leader epoch (4)
MAX_DECOMPRESSED = 64 << 20  # bytes one compressed batch may expand to (64 records at the 1 MiB event bound)
_PIECE = 1 << 20  # bytes inflated per step


class DecompressionBound(ValueError):
    """A compressed batch expands past :data:`MAX_DECOMPRESSED`."""


def bounded_gzip_decode(payload: Any) -> bytearray:
    """gzip members one after another, as ``gzip.GzipFile`` reads them, stopped at the bound.

    Inflated a piece (:data:`_PIECE`) at a time into one buffer: zlib asked for the whole bound at
    once holds its output twice (its blocks, then the joined bytes), and a batch past the bound
    is dropped before the error leaves (a traceback keeps its frame's locals alive)."""
    limit = MAX_DECOMPRESSED
    data, out = bytes(payload), bytearray()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        while data:
            out += inflater.decompress(data, min(_PIECE, limit - len(out) + 1))
            if len(out) > limit:
                out = data = None  # freed now, not when the exception goes
                raise DecompressionBound(f"compressed batch expands past {limit} bytes")
            data = inflater.unconsumed_tail
        if not inflater.eof:
            raise EOFError("gzip data ended before the end-of-stream marker")
        data = inflater.unused_data
    return out


def _checked(decode: Any) -> Any:
    def checked_decode(payload: Any) -> bytes:
        out = decode(payload)
        if len(out) > MAX_DECOMPRESSED:
            raise DecompressionBound(f"compressed batch expands past {MAX_DECOMPRESSED} bytes")
        return out

    return checked_decode


_DECODERS = {
    "gzip_decode": bounded_gzip_decode,
    "snappy_decode": _checked(codec.snappy_decode),
    "lz4_decode": _checked(codec.lz4_decode),
    "zstd_decode": _checked(codec.zstd_decode),
}
_READERS = (
    "aiokafka.record.default_records",
    "aiokafka.record.legacy_records",
    "aiokafka.record._crecords.default_records",
    "aiokafka.record._crecords.legacy_records",
)


class Mark:
    """The stand-in of an unreadable record, in the shape aiokafka turns into a ConsumerRecord."""

    __slots__ = ("offset", "headers")
    timestamp = -1
    timestamp_type = 0
    key = None
    value = None
    checksum = None

    def __init__(self, offset: int, why: str, raw: bytes | memoryview = b"") -> None:
        self.offset = offset
        data = bytes(raw)
        note = f"{why[:300]} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()})" if data else why[:300]
        self.headers = [(UNREADABLE, note.encode("utf-8", "replace"))]


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class GuardedBatch:
    """A v2 batch parsed by aiokafka's C parser until it fails, then record by record (see module)."""

    def __init__(self, batch: Any, data: memoryview) -> None:
        self._batch = batch
        self._data = data
        self._broken: str | None = None

    def __getattr__(self, name: str) -> Any:  # base_offset, next_offset, producer_id, is_control_batch...
        return getattr(self._batch, name)

    def validate_crc(self) -> bool:
        """True: a bad CRC is reported as one mark for the batch (refetching it would fail forever)."""
        try:
            ok = self._batch.validate_crc()
        except Exception as exc:  # noqa: BLE001 - whatever the parser raises, the batch is unreadable
            self._broken = f"batch unreadable: {_why(exc)}"
            return True
        if not ok:
            self._broken = "batch CRC does not match"
        return True

    def __next__(self) -> Any:  # aiokafka reads a control batch's first record this way
        return next(self._batch)

    def __iter__(self) -> Iterator[Any]:
        return self._records()

    def _records(self) -> Iterator[Any]:
        if self._broken is not None:
            yield self._whole(self._broken)
            return
        last = -1
        records = None
        while True:
            try:
                if records is None:
                    records = iter(self._batch)  # decompresses: may raise too
                record = next(records)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - handed to the salvage below, never to the reader
                why, bound = _why(exc), isinstance(exc, DecompressionBound)
                break  # out of the handler: the exception (its frames, their buffers) is freed here
            last = record.offset
            yield record
        records = None
        log.warning("unreadable record in a batch at offset %d: %s", self._batch.base_offset, why)
        if bound:  # the Python parser would inflate the same bytes to the same bound again
            yield self._whole(f"batch unreadable: {why}")
            return
        yield from self._salvage(last)

    def _whole(self, why: str) -> Mark:
        first, end = self._batch.base_offset, self._batch.next_offset
        return Mark(first, f"{why}; offsets {first}..{end - 1}", self._data)

    def _salvage(self, after: int) -> Iterator[Any]:
        """The batch again with aiokafka's Python parser, record by record, from after offset ``after``."""
        try:
            batch = _DefaultRecordBatchPy(self._data)
            batch._maybe_uncompress()
        except Exception as exc:  # noqa: BLE001
            yield self._whole(f"batch unreadable: {_why(exc)}")
            return
        base, buf = batch.base_offset, batch._buffer
        while batch._next_record_index < batch._num_records:
            start = batch._pos
            try:
                record = batch._read_msg()
            except Exception as exc:  # noqa: BLE001
                try:  # the record's length, and its offset delta after attributes and timestamp delta
                    length, pos = decode_varint(buf, start)
                    end = pos + length
                    _, p = decode_varint(buf, pos)
                    _, p = decode_varint(buf, p)
                    delta, _ = decode_varint(buf, p)
                except Exception:  # noqa: BLE001
                    length, end, delta = -1, 0, -1
                if length < 0 or end > len(buf) or delta < 0:
                    offset = max(after + 1, base)
                    yield Mark(offset, f"unreadable from here to the batch end: {_why(exc)}", buf[start:])
                    return
                batch._pos, batch._next_record_index = end, batch._next_record_index + 1
                if base + delta > after:
                    yield Mark(base + delta, _why(exc), buf[start:end])
                continue
            batch._next_record_index += 1
            if record.offset > after:
                yield record


class BrokenBatch:
    """A slice too short to be a batch: one mark at its base offset."""

    is_control_batch = False
    is_transactional = False
    producer_id = None

    def __init__(self, data: memoryview, why: str) -> None:
        self._data = data
        self.base_offset = struct.unpack_from(">q", data, 0)[0] if len(data) >= 8 else 0
        self.next_offset = self.base_offset + 1
        self._why = why

    def validate_crc(self) -> bool:
        return True

    def __iter__(self) -> Iterator[Any]:
        yield Mark(self.base_offset, self._why, self._data)


class GuardedRecords(_MemoryRecordsPy):
    """A fetched record set whose v2 batches come :class:`GuardedBatch`-wrapped."""

    def next_batch(self, *args: Any) -> Any:
        data = self._next_slice
        try:
            batch = super().next_batch()
        except CorruptRecordException as exc:
            return BrokenBatch(data, _why(exc))
        if batch is None or data[_MAGIC_AT] < 2:
            return batch
        return GuardedBatch(batch, data)


def install() -> None:
    """Make every aiokafka consumer in this process read record sets through :class:`GuardedRecords`,
    decompressing with a bound."""
    import importlib

    fetcher.MemoryRecords = GuardedRecords
    for name in _READERS:
        try:
            module = importlib.import_module(name)
        except ImportError:  # aiokafka built without its C extensions
            continue
        for codec_name, decode in _DECODERS.items():
            if hasattr(module, codec_name):
                setattr(module, codec_name, decode)
