"""Records that fit: every record ``citemon run`` produces stays under the limit the broker
enforces on its topic, so no commit can fail on every retry.

A Kafka transaction that holds one record over the topic's ``max.message.bytes`` (or the
producer's ``max_request_size``) fails, and since the record is built again for every retry of
the commit, the partition would stall for good behind it. :class:`RecordLimits` holds, per
topic, the bytes a record may take (read from the broker at start-up:
:mod:`citemon._service.kafka`); the functions here make each record fit, in a documented way:

* a **results** record (:func:`fit_result`): first the passage ``excerpts`` are dropped; then
  the claims beyond what fits are dropped, summarised by their count and their verdicts; at
  last (a record that does not fit even then) only the answer's identity is kept. The record is
  marked ``cut``: ``{"excerpts": n, "claims": n, "verdicts": {verdict: n}, "bytes": size
  before, "max_bytes": limit}``. The answer is still counted in the metrics in full: only the
  written record is shorter.
* a **dead letter** (:func:`fit_dead_letter`): the original value is left out (header
  ``citemon.cut.omitted_bytes`` says how long it was); key and reason headers stay.
* a **review** record that does not fit is not written (the caller counts it): a review record
  without its passages could not be labelled.

Each cut is named in :attr:`OutMessage.cut` and counted once the record's commit succeeded
(``citemon_records_cut_total{record, reason}``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from citemon._service.ledger import OutMessage

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MIN_RECORD_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "RecordLimits",
    "fit_dead_letter",
    "fit_result",
]

DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_588
"""Kafka's default ``message.max.bytes`` (a topic's ``max.message.bytes`` defaults to it)."""
DEFAULT_MAX_REQUEST_SIZE: Final = 1_048_576
"""aiokafka's default ``max_request_size``: the producer refuses a larger record itself."""
RECORD_OVERHEAD_BYTES: Final = 512
"""Kept free of every limit for the record batch's framing (61 bytes of batch header, the
record's varints and attributes) with room to spare."""
MIN_RECORD_BYTES: Final = 4096
"""A topic whose limit leaves less than this is refused at start-up: not even an answer's
identity and its counts would fit."""
_JSON: Final = {"separators": (",", ":"), "ensure_ascii": False}


class RecordLimits:
    """The bytes a produced record's value may take on each topic: the smaller of the topic's
    ``max.message.bytes`` and the producer's ``max_request_size``, less the key, the headers
    and :data:`RECORD_OVERHEAD_BYTES`. Topics not named get ``default``."""

    def __init__(
        self,
        by_topic: Mapping[str, int] | None = None,
        *,
        default: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
    ) -> None:
        self._by_topic = dict(by_topic or {})
        self._default = default
        self.max_request_size = max_request_size

    def __repr__(self) -> str:
        return f"RecordLimits({self._by_topic!r}, max_request_size={self.max_request_size})"

    def max_bytes(self, topic: str) -> int:
        """The record size (key, value and headers) ``topic`` and the producer accept."""
        return min(self._by_topic.get(topic, self._default), self.max_request_size)

    def value_budget(
        self, topic: str, key: bytes | None, headers: tuple[tuple[str, bytes], ...] = ()
    ) -> int:
        """The bytes left for a record's value on ``topic``."""
        framing = sum(len(k.encode()) + len(v) + 8 for k, v in headers)
        return self.max_bytes(topic) - RECORD_OVERHEAD_BYTES - len(key or b"") - framing


def _dumps(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, **_JSON).encode()  # type: ignore[arg-type]


def fit_result(body: dict[str, Any], max_bytes: int) -> tuple[bytes, tuple[str, ...]]:
    """The results record ``body`` as JSON of at most ``max_bytes``, cut as the module says;
    returns the bytes and what was cut (``excerpts``, ``claims``, ``identity_only``)."""
    value = _dumps(body)
    if len(value) <= max_bytes:
        return value, ()
    original = len(value)
    claims: list[dict[str, Any]] = list(body.get("claims") or [])
    excerpts = body.get("excerpts") or {}
    cut: dict[str, Any] = {
        "excerpts": len(excerpts),
        "claims": 0,
        "verdicts": {},
        "bytes": original,
        "max_bytes": max_bytes,
    }
    reasons = ["excerpts"] if excerpts else []
    trimmed = {**body, "excerpts": {}, "cut": cut} if "excerpts" in body else {**body, "cut": cut}

    def with_claims(n: int) -> bytes:
        dropped = claims[n:]
        cut["claims"] = len(dropped)
        cut["verdicts"] = dict(Counter(str(c.get("verdict")) for c in dropped))
        return _dumps({**trimmed, "claims": claims[:n]})

    value = with_claims(len(claims))
    if len(value) <= max_bytes:
        return value, tuple(reasons)
    # The most claims that fit: the record grows with n, so search for the largest n that fits.
    low, high = 0, len(claims)
    while low < high:
        mid = (low + high + 1) // 2
        if len(with_claims(mid)) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    value = with_claims(low)
    if claims:
        reasons.append("claims")
    if len(value) <= max_bytes:
        return value, tuple(reasons)
    # Not even the identity and the counts with no claim fit with the other fields: keep only
    # the fields that say which answer this is.
    keep = ("id", "service", "version", "environment", "trace_id", "span_id", "judge_calls")
    stub = {k: body[k] for k in keep if k in body}
    value = _dumps({**stub, "claims": [], "cut": cut})
    return value, (*reasons, "identity_only")


def fit_dead_letter(message: OutMessage, limits: RecordLimits) -> OutMessage:
    """``message`` (a dead letter) with its value left out when it would not fit its topic."""
    size = len(message.value or b"")
    headers = (*message.headers, ("citemon.cut.omitted_bytes", str(size).encode()))
    if size <= limits.value_budget(message.topic, message.key, message.headers):
        return message
    return replace(
        message, value=b"", headers=headers, cut=(*message.cut, ("dead_letter", "value"))
    )
