"""The wire of Text Embeddings Inference's ``/predict``, as the classifier judge speaks it.

The classifier (:mod:`citemon.judges.classifier`) is the shared
:class:`~citemon.judges.transport.HTTPTransport` given :class:`PredictWire`: the body as the
judge built it, a reply read by :func:`parse_predictions`, and TEI's refusals of a batch that is
too large (:class:`BatchTooLarge`: HTTP 422 over ``--max-client-batch-size``, 413 over the
payload limit) told apart from failures, so the judge can split the batch instead of retrying it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Generic, TypeVar

import httpx

from citemon._core.errors import JudgeHTTPError, JudgeInvalidReply
from citemon.judges.transport import Exchange, Site, raise_for_status

__all__ = [
    "BatchTooLarge",
    "LabelMissing",
    "PredictRequest",
    "PredictWire",
    "parse_predictions",
]

_T = TypeVar("_T")
_TEI_BATCH_LIMIT: Final = re.compile(r"maximum allowed batch size (\d+)")


class LabelMissing(JudgeInvalidReply):
    """The model has no such label: a configuration error, so asking again cannot help."""

    retriable = False


class BatchTooLarge(JudgeHTTPError):
    """TEI refused the batch (422 over ``--max-client-batch-size``, 413 over the payload limit)."""

    def __init__(self, message: str, *, status: int, limit: int | None) -> None:
        super().__init__(message, status=status)
        self.limit = limit


def parse_predictions(content: str, *, pairs: int, label: str) -> list[float]:
    """The ``label`` score of each pair in a TEI ``/predict`` batch reply, or why not.

    The reply must be a JSON list of ``pairs`` lists of ``{"label": str, "score": number}``; a
    score must be finite and in [0, 1] (``raw_scores: false`` gives probabilities); a list that
    names a label twice is invalid; one without ``label`` (case-insensitive) raises a
    non-retriable :class:`JudgeInvalidReply` that lists the labels the model has.
    """
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        raise JudgeInvalidReply(f"reply is not JSON: {content[:200]!r}") from None
    if not isinstance(value, list) or len(value) != pairs:
        got = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
        raise JudgeInvalidReply(f"reply is not a list of {pairs} predictions (got {got})")
    wanted = label.casefold()
    scores = []
    for n, predictions in enumerate(value):
        if not isinstance(predictions, list):
            raise JudgeInvalidReply(f"prediction {n} is not a list of {{label, score}}")
        found: dict[str, float] = {}
        for item in predictions:
            name = item.get("label") if isinstance(item, dict) else None
            score = item.get("score") if isinstance(item, dict) else None
            if (
                not isinstance(name, str)
                or isinstance(score, bool)
                or not isinstance(score, int | float)
                or not math.isfinite(score)
                or not 0.0 <= score <= 1.0
            ):
                raise JudgeInvalidReply(f"prediction {n} holds {str(item)[:100]!r}")
            if name.casefold() in found:
                raise JudgeInvalidReply(f"prediction {n} names label {name!r} twice")
            found[name.casefold()] = float(score)
        if wanted not in found:
            names = sorted({str(i.get("label")) for i in predictions if isinstance(i, dict)})
            raise LabelMissing(
                f"the model has no label {label!r} (it has {names}): set --judge-label"
            )
        scores.append(found[wanted])
    return scores


@dataclass(frozen=True, slots=True)
class PredictRequest(Generic[_T]):
    """A ``/predict`` request: its JSON body as it is sent, and how the reply's text reads."""

    body: dict[str, Any]
    parse: Callable[[str], _T]


def _read(site: Site, parse: Callable[[str], _T], response: httpx.Response) -> _T:
    status = response.status_code
    if status in (413, 422):
        found = _TEI_BATCH_LIMIT.search(response.text)
        if status == 413 or found:
            raise BatchTooLarge(
                f"judge at {site.url} refused the batch (HTTP {status})",
                status=status,
                limit=int(found.group(1)) if found else None,
            )
    try:
        raise_for_status(response, site)  # 429 and the other errors, redacted
    except JudgeHTTPError as exc:
        if status == 424:  # TEI's backend error (e.g. out of memory under load)
            exc.retriable = True
        raise
    return parse(response.text)


class PredictWire:
    """``POST predict``: the body as given, the reply's text through the request's parser."""

    endpoint = "predict"

    def __repr__(self) -> str:
        return "PredictWire()"

    def exchange(self, request: PredictRequest[_T], site: Site) -> Exchange[_T]:
        return Exchange(request.body, partial(_read, site, request.parse))
