"""The wire of Text Embeddings Inference's ``/predict`` (and ``/info``), as the classifier
judge (:mod:`citemon.judges.classifier`) speaks it: the request, the reply and how it is read
(:func:`parse_predictions`), and TEI's refusals of a batch that is too large
(:class:`BatchTooLarge`: HTTP 422 over ``--max-client-batch-size``, 413 over the payload limit).
The in-flight cap, retries, cache and redaction are :class:`~citemon.judges.transport.
HTTPTransport`'s."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import httpx

from citemon.core.errors import JudgeHTTPError, JudgeInvalidReply
from citemon.judges.transport import HTTPTransport

__all__ = ["BatchTooLarge", "LabelMissing", "PredictTransport", "parse_predictions"]

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
class _Predict:
    """A ``/predict`` request: its JSON body as it is sent (no chat messages, no schema)."""

    body: dict[str, Any]


class PredictTransport(HTTPTransport):
    """The shared HTTP transport aimed at ``{base_url}/predict``: the in-flight cap, deadline,
    retries, Retry-After, cache, single-flight and redaction are
    :class:`~citemon.judges.transport.HTTPTransport`'s; this says what the body is and how a
    ``/predict`` reply and TEI's refusals read."""

    def __init__(self, base_url: str, model: str, **kwargs: Any) -> None:
        super().__init__(base_url, model, endpoint="predict", **kwargs)

    @property
    def shown_base(self) -> str:
        return self._shown_base

    async def send(
        self, body: dict[str, Any], parse: Callable[[str], _T], *, log: logging.Logger
    ) -> _T:
        """POST ``body`` with the retry budget; a refused batch size is raised at once."""
        return await self._call(
            _Predict(body), parse, fatal=(BatchTooLarge,), log=log, what="classifier"
        )

    def _body(self, request: Any, rung: str) -> dict[str, Any]:
        assert isinstance(request, _Predict)
        return request.body

    def _reply(self, response: httpx.Response, parse: Callable[[str], _T]) -> _T:
        return parse(response.text)

    def _read(self, response: httpx.Response, parse: Callable[[Any], _T]) -> _T:
        status = response.status_code
        if status in (413, 422):
            found = _TEI_BATCH_LIMIT.search(response.text)
            if status == 413 or found:
                raise BatchTooLarge(
                    f"judge at {self._shown_url} refused the batch (HTTP {status})",
                    status=status,
                    limit=int(found.group(1)) if found else None,
                )
        try:
            return super()._read(response, parse)  # 429 and the other errors, redacted
        except JudgeHTTPError as exc:
            if status == 424:  # TEI's backend error (e.g. out of memory under load)
                exc.retriable = True
            raise

    async def info(self) -> dict[str, Any] | None:
        """TEI's ``GET /info`` (its limits and labels), or None when the server has none or
        fails: the judge works without it. One request, outside the cap and the metrics."""
        parsed = httpx.URL(self._base_url)
        url = str(parsed.copy_with(path=parsed.path.rstrip("/") + "/info"))
        auth: dict[str, Any] = {} if self._auth is None else {"auth": self._auth}
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.get(url, headers=self._headers, **auth)
            if response.status_code != 200 or len(response.content) > 1_000_000:
                return None
            value = response.json()
        except (TimeoutError, httpx.HTTPError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def key(self, kind: str, claim: str, passages: list[tuple[str, str]]) -> str:
        return self._key(kind, claim, passages)

    async def cached(self, key: str, call: Callable[[], Awaitable[_T]]) -> _T:
        return await self._cached(key, call)

    def lookup(self, key: str) -> object | None:
        found, value = self._lookup(key)
        return value if found else None

    def store(self, key: str, value: object) -> None:
        self._store(key, value)
