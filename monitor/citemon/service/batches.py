"""Kafka record batches the consumer cannot decode: find exactly which, so only they are skipped.

aiokafka decompresses a fetched batch while ``getmany`` hands its records out. A batch it cannot
decode (a codec whose library is missing, an unknown codec, a bad CRC) raises out of
``getmany`` (``UnsupportedCodecError``, ``CorruptRecordException``) and leaves the consumer
where it was: the partition's position does not move, the records of *earlier* batches in the
same fetch are never returned, and every later ``getmany`` raises again. Records that other
partitions handed out in that call are dropped too, though their positions did move. Left
alone, that is a crash, or a partition stuck for ever.

:func:`scan_partition` re-reads the partition from where the monitor's intake stands with its
own ``Fetch`` request and runs the consumer's own unpacking (both through
:mod:`citemon.service.kafka_internals`, aiokafka's ``PartitionRecords``:
same CRC check, same ``read_committed`` filtering of aborted transactions) over each batch of
the response separately. It returns the records that decode, up to the first batch that does
not, and that batch's exact offsets and raw bytes (:class:`BadBatch`), so the monitor can take
the good records, dead-letter the batch whole and seek past it — and nothing else.

:data:`DISABLE_CODECS_ENV` is a test-only hook: it makes aiokafka report the listed codecs'
libraries as missing, which is how the tests get a real, broker-accepted batch that the monitor
cannot decode (the broker validates batches on produce, so a corrupt one never reaches a log).
"""

from __future__ import annotations

import gzip
import logging
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import cramjam
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError

from citemon.service.entries import OutMessage
from citemon.service.kafka_internals import (
    disable_codec,
    fetch_record_set,
    first_batch,
    partition_records,
)

__all__ = [
    "CODECS",
    "DISABLE_CODECS_ENV",
    "UNDECODABLE",
    "BadBatch",
    "Scan",
    "describe",
    "disable_codecs",
    "scan_partition",
    "split_batches",
    "unpack_batches",
]

log = logging.getLogger(__name__)

DISABLE_CODECS_ENV: Final = "CITEMON_TEST_DISABLE_CODECS"
"""Test-only: comma-separated codecs (``gzip,snappy,lz4,zstd``) aiokafka must treat as missing."""

CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
"""Kafka's codec IDs 0–4 (the low three bits of a v2 batch's attributes)."""

UNDECODABLE: Final[tuple[type[BaseException], ...]] = (
    UnsupportedCodecError,
    CorruptRecordException,
    cramjam.DecompressionError,
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
)
"""What aiokafka's ``getmany`` raises for a batch it cannot decode."""

_BATCH_HEADER: Final = struct.Struct(">qiibIhi")  # base offset … last offset delta (27 bytes)
_LOG_OVERHEAD: Final = 12  # base offset (8) + length (4): not counted in the length
_MAX_DLQ_VALUE_BYTES: Final = 900_000  # under Kafka's default 1 MB message.max.bytes
_READ_COMMITTED: Final = 1


@dataclass(frozen=True, slots=True)
class BadBatch:
    """One record batch that does not decode: offsets ``[base_offset, next_offset)``."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    codec: str
    reason: str
    """``unsupported_codec`` (no library for it, or an unknown codec ID) or ``corrupt_batch``."""
    error: str
    raw: bytes
    timestamp_ms: int = -1

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def dead_letter(self, dlq_topic: str, headers: Iterable[tuple[str, bytes]]) -> OutMessage:
        """The DLQ record: the batch's raw bytes (a Kafka v2 record batch any client with the
        codec can read again), ``headers`` (reason, message) plus where it came from."""
        value = self.raw if len(self.raw) <= _MAX_DLQ_VALUE_BYTES else b""
        extra = [
            ("citemon.source", f"{self.topic}/{self.partition}/{self.base_offset}".encode()),
            ("citemon.batch.offsets", f"{self.base_offset}-{self.last_offset}".encode()),
            ("citemon.batch.codec", self.codec.encode()),
        ]
        if not value:
            extra.append(("citemon.batch.omitted_bytes", str(len(self.raw)).encode()))
        return OutMessage(dlq_topic, None, value, (*headers, *extra))


@dataclass(slots=True)
class Scan:
    """What re-reading a partition found: records that decode, then the first batch that does
    not (``bad`` is None when every batch of the response decoded)."""

    good: list[Any] = field(default_factory=list)
    bad: BadBatch | None = None


def disable_codecs(names: str | None = None) -> list[str]:
    """Test-only: make aiokafka treat the named codecs' libraries as missing (see
    :data:`DISABLE_CODECS_ENV`, read when ``names`` is None). Returns what it disabled."""
    raw = os.environ.get(DISABLE_CODECS_ENV, "") if names is None else names
    wanted = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in CODECS[1:]]
    if unknown:  # checked before anything is patched
        raise ValueError(
            f"{DISABLE_CODECS_ENV}: unknown codec {unknown[0]!r} (one of {CODECS[1:]})"
        )
    for name in wanted:
        disable_codec(name)
    if wanted:
        log.warning("test hook %s: codecs %s disabled", DISABLE_CODECS_ENV, ",".join(wanted))
    return wanted


class _Batches:
    """``MemoryRecords``' two methods ``PartitionRecords`` uses, one batch at a time, remembering
    which batch is being unpacked."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.index = -1

    def has_next(self) -> bool:
        return self.index + 1 < len(self.chunks)

    def next_batch(self) -> Any:
        self.index += 1
        return first_batch(self.chunks[self.index])


def split_batches(raw: bytes) -> list[bytes]:
    """The complete batches of a fetch response's record set (a partial last one is dropped,
    as the broker may cut the response inside a batch)."""
    chunks: list[bytes] = []
    pos = 0
    while pos + _LOG_OVERHEAD <= len(raw):
        _, length = struct.unpack_from(">qi", raw, pos)
        end = pos + _LOG_OVERHEAD + length
        if length <= 0 or end > len(raw):
            break
        chunks.append(raw[pos:end])
        pos = end
    return chunks


def describe(topic: str, partition: int, chunk: bytes, exc: BaseException) -> BadBatch:
    """A :class:`BadBatch` from a batch's header (never compressed, so always readable)."""
    reason = "unsupported_codec" if isinstance(exc, UnsupportedCodecError) else "corrupt_batch"
    error = str(exc)
    if not error.startswith(type(exc).__name__):  # aiokafka's errors name themselves
        error = f"{type(exc).__name__}: {error}"
    if len(chunk) < _BATCH_HEADER.size:
        base = struct.unpack_from(">q", chunk)[0]
        return BadBatch(topic, partition, base, base + 1, "unknown", reason, error, chunk)
    base, _, _, magic, _, attributes, last_delta = _BATCH_HEADER.unpack_from(chunk)
    if magic != 2:  # v0/v1 message sets (gone from Kafka 4): one offset per wrapper
        return BadBatch(topic, partition, base, base + 1, "unknown", reason, error, chunk)
    codec_id = attributes & 0x07
    codec = CODECS[codec_id] if codec_id < len(CODECS) else f"unknown({codec_id})"
    (first_ts,) = struct.unpack_from(">q", chunk, _BATCH_HEADER.size)
    return BadBatch(
        topic, partition, base, base + last_delta + 1, codec, reason, error, chunk, first_ts
    )


async def scan_partition(
    client: Any,
    tp: Any,
    offset: int,
    *,
    max_bytes: int,
    isolation_level: int = _READ_COMMITTED,
) -> Scan:
    """Fetch ``tp`` from ``offset`` with ``client`` (an ``AIOKafkaClient``) and unpack it batch by
    batch as the consumer does. Raises ``KafkaError`` when the broker refuses the fetch."""
    fetched = await fetch_record_set(
        client, tp, offset, max_bytes=max_bytes, isolation_level=isolation_level
    )
    if fetched is None:
        return Scan()
    raw, aborted = fetched
    return unpack_batches(tp, raw, aborted, offset, isolation_level)


def unpack_batches(
    tp: Any, raw: bytes, aborted: Any, offset: int, isolation_level: int = _READ_COMMITTED
) -> Scan:
    """Unpack a fetch response's record set from ``offset`` exactly as the consumer does, batch
    by batch, stopping at the first batch that does not decode."""
    batches = _Batches(split_batches(bytes(raw)))
    records = partition_records(tp, batches, aborted, offset, isolation_level)
    scan = Scan()
    try:
        for record in records:
            scan.good.append(record)
    except UNDECODABLE as exc:
        scan.bad = describe(tp.topic, tp.partition, batches.chunks[batches.index], exc)
    return scan
