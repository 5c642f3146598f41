"""The held-parts store: trace parts waiting for the rest of their trace, kept in a compacted
topic so that the input offsets move on past them without losing them on a crash.

A Collector batches spans as they end, so a RAG request's retriever span reaches the topic
seconds, and on a busy topic thousands of records, before its root. Holding the retriever's
*record* uncommitted until the root came would hold back the partition's commit (and intake's
bound on uncommitted records would stop the very fetch that brings the root). Instead, as Kafka
Streams keeps a state store's changelog: each input partition P has partition P of the held
topic (``<group>.held-spans`` by default, ``cleanup.policy=compact``), keyed by trace ID.

* A record that brings a part of a trace still waiting writes the trace's parts from P
  (an *upsert*: every part so far, each with its input offset, and when the trace was first
  seen) **with its own commit**: in P's transaction with the offsets when delivery is
  transactional; acknowledged (``acks=all``) before the offsets are committed otherwise. The
  record itself finishes at once and its offset commits.
* A trace that leaves the assembler (completed, settled, dropped, evicted) writes a *tombstone*
  with the commit of the record that completed it, or of an *anchor* entry at P's position (a
  trace settled by its window): the answer is produced and counted in that same commit. With
  transactions the tombstone is in that commit's transaction. Without, it is written only
  **after** the offsets' commit is confirmed (:class:`~citemon._service.outputs.KafkaDelivery`;
  retried after later commits if it fails): a tombstone acknowledged first, then a crash before
  the commit, would leave the completing record to be read again with its trace's parts gone,
  an answer never counted. In this order a crash between the commit and the tombstone leaves a
  stale part, read back below and settled by its window as a trace without an answer: no answer
  lost or counted twice. (A tombstone followed by an upsert of the same key in one commit is
  dropped: the upsert is the key's whole value.)
* A partition assigned here is read back from its held partition (``read_committed``, to its
  end) after its transactional producer fenced the previous owner and before any of its input
  is taken: the store then matches the committed offset exactly. Parts whose input offset is at
  or past the committed offset are left out: those records are read again (a crash between an
  acknowledged upsert and its commit, without transactions).

Why this and not a local state store (RocksDB, a file): a replica's disk does not follow its
partitions to the next owner, and only a topic written in the offsets' transaction stays exactly
in step with them. Why not larger uncommitted bounds: memory would grow with the distance
between a trace's parts, and a crash would re-read (and re-decode) all of it.

A trace's parts too large for one record of the held topic (over its ``max.message.bytes``
after compression) are held the old way: their record stays uncommitted until the trace leaves.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from citemon._core.records import Passage
from citemon._otlp.spans import ResourceInfo, TraceSpan
from citemon._service.kafka import KafkaClients
from citemon._service.outputs import OutMessage

if TYPE_CHECKING:
    from citemon._service.settings import Settings

__all__ = ["HeldParts", "HeldTrace", "decode_held", "encode_held", "read_held"]

log = logging.getLogger(__name__)

_VERSION: Final = 1
_READ_TIMEOUT_S: Final = 60.0
_SPAN_FIELDS: Final = tuple(
    f.name for f in dataclasses.fields(TraceSpan) if f.name not in ("resource", "documents")
)


@dataclass(slots=True)
class HeldTrace:
    """One trace's parts read from one input partition, each with its record's offset."""

    parts: list[tuple[int, TraceSpan]] = field(default_factory=list)
    root_seen: bool = False
    seen_at: float = 0.0
    """When the trace was first seen (Unix time): its window runs from then, across owners."""


def _span_json(span: TraceSpan) -> dict[str, Any]:
    body: dict[str, Any] = {name: getattr(span, name) for name in _SPAN_FIELDS}
    res = span.resource
    body["resource"] = [res.service, res.version, res.environment]
    if span.documents is not None:
        body["documents"] = [d.model_dump(mode="json", exclude_none=True) for d in span.documents]
    return body


def _span_of(body: dict[str, Any]) -> TraceSpan:
    known = {name: body[name] for name in _SPAN_FIELDS if name in body}
    docs = body.get("documents")
    return TraceSpan(
        **known,
        resource=ResourceInfo(*body.get("resource", ())),
        documents=None if docs is None else [Passage(**d) for d in docs],
    )


def encode_held(trace: HeldTrace) -> bytes:
    """The held topic's value of ``trace``: compact JSON, zlib-compressed (passage text
    compresses about 3:1, and the value must fit the topic's ``max.message.bytes``)."""
    body = {
        "v": _VERSION,
        "seen_at": trace.seen_at,
        "root_seen": trace.root_seen,
        "parts": [{"offset": o, "span": _span_json(s)} for o, s in trace.parts],
    }
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return zlib.compress(text.encode("utf-8", "surrogatepass"), 1)


def decode_held(value: bytes) -> HeldTrace:
    """The inverse of :func:`encode_held`; ValueError on a value it cannot read."""
    try:
        body = json.loads(zlib.decompress(value).decode("utf-8", "surrogatepass"))
        if body.get("v") != _VERSION:
            raise ValueError(f"held-parts format {body.get('v')!r}, expected {_VERSION}")
        return HeldTrace(
            parts=[(int(p["offset"]), _span_of(p["span"])) for p in body["parts"]],
            root_seen=bool(body["root_seen"]),
            seen_at=float(body["seen_at"]),
        )
    except (zlib.error, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"unreadable held parts: {exc!r}") from exc


class HeldParts:
    """Which input partitions' held partitions hold parts of which trace, and the messages that
    keep them there (upserts) or remove them (tombstones). Intake owns it."""

    def __init__(self, topic: str, *, max_value_bytes: int) -> None:
        self.topic = topic
        self.max_value_bytes = max_value_bytes
        """Set from the held topic's record limit once the topics are checked."""
        self._traces: dict[str, dict[Any, HeldTrace]] = {}
        self.upserts = 0
        self.tombstones = 0
        self.too_large = 0

    def __len__(self) -> int:
        return len(self._traces)

    def __contains__(self, trace_id: object) -> bool:
        return trace_id in self._traces

    def partitions(self, trace_id: str) -> list[Any]:
        """The input partitions whose held partitions hold parts of ``trace_id``."""
        return list(self._traces.get(trace_id, ()))

    def upsert(
        self,
        trace_id: str,
        tp: Any,
        offset: int,
        spans: Iterable[TraceSpan],
        *,
        root_seen: bool,
        age_s: float,
    ) -> OutMessage | None:
        """Add the parts record ``offset`` of ``tp`` brought; the message that writes the
        trace's parts from ``tp`` (None when it would not fit the held topic: the caller holds
        the record instead, and nothing of this record is kept here)."""
        by_tp = self._traces.setdefault(trace_id, {})
        held = by_tp.get(tp) or HeldTrace(seen_at=time.time() - age_s)
        candidate = HeldTrace([*held.parts, *((offset, s) for s in spans)], root_seen, held.seen_at)
        value = encode_held(candidate)
        if len(value) > self.max_value_bytes:
            self.too_large += 1
            if not by_tp:
                del self._traces[trace_id]
            return None
        by_tp[tp] = candidate
        self.upserts += 1
        return OutMessage(self.topic, trace_id.encode(), value, partition=tp.partition)

    def gone(self, trace_id: str) -> list[tuple[Any, OutMessage]]:
        """``trace_id`` left the assembler: a tombstone for each input partition whose held
        partition holds parts of it, with that partition."""
        by_tp = self._traces.pop(trace_id, {})
        self.tombstones += len(by_tp)
        key = trace_id.encode()
        return [(tp, OutMessage(self.topic, key, None, partition=tp.partition)) for tp in by_tp]

    def restored(self, trace_id: str, tp: Any, trace: HeldTrace) -> None:
        """``trace``'s parts from ``tp`` were read back from the held topic."""
        self._traces.setdefault(trace_id, {})[tp] = trace

    def drop(self, tps: set[Any]) -> list[str]:
        """Forget what is held for ``tps`` (revoked or lost: their next owner reads it back);
        returns the traces that had parts there."""
        doomed = [tid for tid, by_tp in self._traces.items() if any(tp in tps for tp in by_tp)]
        for tid in doomed:
            by_tp = self._traces[tid]
            for tp in tps:
                by_tp.pop(tp, None)
            if not by_tp:
                del self._traces[tid]
        return doomed


async def read_held(
    clients: KafkaClients,
    settings: Settings,
    tps: list[Any],
    committed: dict[Any, int | None],
) -> dict[Any, dict[str, HeldTrace]]:
    """Read the held partitions of input partitions ``tps`` back, each to its end
    (:meth:`KafkaClients.read_compacted <citemon._service.kafka.KafkaClients.read_compacted>`):
    per input partition, trace ID → its parts there, leaving out parts at or past the
    partition's committed offset (their records are read again)."""
    if not tps:
        return {}
    values = await clients.read_compacted(
        settings,
        settings.held_topic_name,
        [tp.partition for tp in tps],
        client_id=f"{settings.client_id}-held",
        timeout_s=_READ_TIMEOUT_S,
    )
    out: dict[Any, dict[str, HeldTrace]] = {}
    for tp in tps:
        floor = committed.get(tp)
        traces: dict[str, HeldTrace] = {}
        for tid, value in values.get(tp.partition, {}).items():
            try:
                trace = decode_held(value)
            except ValueError as exc:
                log.warning(
                    "held parts of trace %s (partition %d) left out: %s", tid, tp.partition, exc
                )
                continue
            trace.parts = [(o, s) for o, s in trace.parts if floor is not None and o < floor]
            if trace.parts:
                traces[tid] = trace
        out[tp] = traces
    return out
