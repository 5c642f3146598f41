"""Getting past a Kafka record batch the consumer cannot decode, losing nothing else.

aiokafka decompresses a fetched batch while ``getmany`` hands its records out. A batch it cannot
decode (a codec whose library is missing, an unknown codec, a bad CRC) raises out of
``getmany`` (``UnsupportedCodecError``, ``CorruptRecordException``) without saying which
partition failed, leaves that partition's position where it was (every later ``getmany`` raises
again) and drops the records other partitions had handed out in that call, though their
positions moved. Left alone, that is a crash, or a partition stuck for ever.

So every readable partition is put back where intake stands and re-read from there with a
client of our own: a raw ``Fetch`` (:func:`scan_partition`, through
:mod:`citemon._service.kafka_internals`), unpacked batch by batch by the consumer's own
``PartitionRecords`` (same CRC check, same ``read_committed`` filtering of aborted
transactions). The records before the first bad batch are taken, the batch is dead-lettered
whole (:class:`BadBatch`) and the partition sought past it. Partitions still opening are left
out: their records are ignored until they are sought to the committed offset, where a bad batch
is met (and skipped) again; a skip entry added now would precede the records read after that
seek, and the ledger would refuse them.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import cramjam
from aiokafka.errors import CorruptRecordException, KafkaError, UnsupportedCodecError

from citemon._service.clients import KafkaClients
from citemon._service.kafka_internals import fetch_record_set, first_batch, partition_records
from citemon._service.ledger import Ledger, OutMessage
from citemon._service.outputs import MAX_RECORD_BYTES, error_headers
from citemon._service.settings import Settings

__all__ = [
    "CODECS",
    "UNDECODABLE",
    "BadBatch",
    "BatchRecovery",
    "Scan",
    "Scanner",
    "describe",
    "scan_partition",
    "split_batches",
    "unpack_batches",
]

log = logging.getLogger(__name__)
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

    def __str__(self) -> str:
        return (
            f"{self.topic}/{self.partition} offsets {self.base_offset}-{self.last_offset} "
            f"({self.codec}, {self.error})"
        )

    def dead_letter(self, dlq_topic: str) -> OutMessage:
        """The DLQ record: the batch's raw bytes (a Kafka v2 record batch any client with the
        codec can read again), its reason and error, and where it came from."""
        value = self.raw if len(self.raw) <= MAX_RECORD_BYTES else b""
        headers = error_headers(self.reason, self.error)
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


Scanner = Callable[..., Awaitable[Scan]]
""":func:`scan_partition`'s signature: ``(client, tp, start, *, max_bytes)``."""


class BatchRecovery:
    """Locates and skips undecodable batches; owns the re-read client (made on first use).

    ``take(tp, record)`` takes a record as intake does; ``unlocated_backoff_s`` is the wait
    before fetching again when a re-read found no bad batch (or failed).
    """

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        *,
        take: Callable[[Any, Any], None],
        clients: KafkaClients,
        scan: Scanner = scan_partition,
        client: Any = None,
        unlocated_backoff_s: float = 1.0,
    ) -> None:
        self._settings = settings
        self._ledger = ledger
        self._take = take
        self._clients = clients
        self._scan = scan
        self.client: Any = client
        self._unlocated_backoff_s = unlocated_backoff_s

    async def recover(self, consumer: Any, exc: BaseException) -> None:
        """Find the bad batch behind ``exc``, take what precedes it, skip it; when none is
        found (or the re-read fails), wait ``unlocated_backoff_s`` and let intake fetch again."""
        s = self._settings
        log.warning("a fetched batch does not decode (%s): locating it", exc)
        found = 0
        try:
            if self.client is None:
                self.client = await self._clients.client(s.kafka_options(), f"{s.client_id}-reread")
            for tp in self._ledger.all_readable():
                found += await self._reread(consumer, tp)
        except (KafkaError, OSError, TimeoutError) as err:
            log.warning("re-reading after an undecodable batch failed, will retry: %r", err)
            found = -1
        if found <= 0:
            if found == 0:
                log.warning("no undecodable batch found on re-reading; fetching again")
            await asyncio.sleep(self._unlocated_backoff_s)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    async def _reread(self, consumer: Any, tp: Any) -> int:
        """Rewind ``tp`` to where intake stands and skip a bad batch there; 1 if one was."""
        ledger = self._ledger
        start = ledger.taken_to(tp)
        if start is None:  # nothing taken since assignment: intake stands at the commit
            committed = await consumer.committed(tp)
            if committed is None:  # auto_offset_reset="earliest"
                committed = (await consumer.beginning_offsets([tp]))[tp]
            start = committed
        if await consumer.position(tp) != start:
            consumer.seek(tp, start)  # records the failed getmany drained and dropped
            ledger.sought(tp)
            ledger.stats.rewound_partitions += 1
        scan = await self._scan(
            self.client, tp, start, max_bytes=self._settings.max_partition_fetch_bytes
        )
        if scan.bad is None or not ledger.readable(tp):
            return 0  # nothing to skip, or revoked (and maybe reassigned) meanwhile
        for rec in scan.good:
            self._take(tp, rec)
        self._skip(tp, scan.bad)
        consumer.seek(tp, scan.bad.next_offset)
        ledger.sought(tp)
        return 1

    def _skip(self, tp: Any, bad: BadBatch) -> None:
        log.error("skipping undecodable batch %s: dead-lettered", bad)
        self._ledger.stats.undecodable_batches += 1
        message = bad.dead_letter(self._settings.dlq_topic)
        self._ledger.skip_batch(tp, bad.next_offset, message, bad.reason)
