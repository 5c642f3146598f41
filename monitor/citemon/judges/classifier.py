"""The classifier judge: a (premise, hypothesis) sequence-pair classifier behind TEI's ``/predict``.

The judge is handed a :class:`~citemon.judges.transport.HTTPTransport` and speaks TEI's wire
(:class:`~citemon.judges.tei.PredictWire`) through it; what it adds is how a claim becomes pairs
and how scores become a verdict, and it keeps these promises:

* a claim's score is the maximum over the chunks of its premise (the passages shown, joined in
  the order given): one chunk that entails the claim is enough (MiniCheck's rule). Chunks are
  counted in whitespace-separated words, not tokens, because the client does not have the
  server's tokenizer: a word is never split;
* a chunk that could not be scored leaves the claim without a verdict (a
  :class:`~citemon._core.errors.JudgeError`, so ``unjudged``): a maximum over the other chunks
  could miss the one that entails it;
* no pair is lost or scored twice when TEI refuses a batch as too large: the judge lowers its
  cap (to the limit TEI names, else to half the batch), says so once in the log, and sends the
  same pairs again in smaller requests; it starts at TEI's ``/info`` limit when that is lower;
* the cache holds scores, not verdicts (keyed by label, window, overlap, claim and passages),
  so the threshold is applied after it.

The request, the reply, the chunking defaults and TEI's limits: ``docs/judges.md``, "The
classifier judge".
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

from citemon._core.errors import ConfigError, JudgeError, JudgeHTTPError
from citemon._core.judge import (
    CitedOutcome,
    CitedVerdict,
    SupportOutcome,
    SupportVerdict,
)
from citemon._core.records import Verdict
from citemon.judges.cache import ReplyCache, question_key
from citemon.judges.tei import BatchTooLarge, PredictRequest, PredictWire, parse_predictions
from citemon.judges.transport import HTTPTransport

__all__ = [
    "DEFAULT_BATCH_PAIRS",
    "DEFAULT_LABEL",
    "DEFAULT_OVERLAP_WORDS",
    "DEFAULT_THRESHOLD",
    "DEFAULT_WINDOW_WORDS",
    "ClassifierJudge",
    "chunk_words",
]

DEFAULT_LABEL: Final = "entailment"
"""The label whose score is P(entailed); MiniCheck's checkpoints name it ``LABEL_1``."""
DEFAULT_THRESHOLD: Final = 0.5
DEFAULT_BATCH_PAIRS: Final = 32
"""TEI's default ``--max-client-batch-size``."""
DEFAULT_WINDOW_WORDS: Final = 300
DEFAULT_OVERLAP_WORDS: Final = 50

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_WORD = re.compile(r"\S+")
_SEPARATOR = "\n\n"


def chunk_words(text: str, window_words: int, overlap_words: int) -> list[str]:
    """``text`` in windows of ``window_words`` words, each overlapping the previous by
    ``overlap_words``; the last window ends at the last word. A text that fits is returned
    whole, as is; a window keeps the original spacing between its words."""
    if window_words < 1 or not 0 <= overlap_words < window_words:
        raise ConfigError(
            f"need window_words >= 1 and 0 <= overlap_words < window_words, "
            f"not {window_words} and {overlap_words}"
        )
    spans = [m.span() for m in _WORD.finditer(text)]
    if len(spans) <= window_words:
        return [text]
    step = window_words - overlap_words
    chunks = []
    start = 0
    while True:
        end = min(start + window_words, len(spans))
        chunks.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            return chunks
        start += step


@dataclass(frozen=True, slots=True)
class _Score:
    """A claim's best chunk score over one premise, and where it came from."""

    score: float
    chunks: int
    best: int  # 0-based index of the best chunk


_Question = tuple[str, tuple[tuple[str, str], ...]]  # claim, passages (ID, text) in order


class ClassifierJudge:
    """A :class:`~citemon._core.judge.Judge` (and :class:`~citemon._core.judge.BatchJudge`)
    over a TEI-shaped sequence-pair classifier; see the module docstring.

    ``transport``'s base URL is the server root (``http://127.0.0.1:8080``: TEI serves
    ``/predict`` there); ``label`` the entailment label, ``threshold`` the score at or above
    which a claim is entailed, ``batch_pairs`` the most pairs per request, ``window_words`` and
    ``overlap_words`` the chunking, in words; ``cache`` remembers scores (default: a
    :class:`~citemon.judges.cache.ReplyCache` reporting to the transport's observers).
    """

    confidence_means: Literal["entailed"] = "entailed"
    """``Verdict.confidence`` is the model's P(entailed), for ``citemon calibrate``."""

    def __init__(
        self,
        transport: HTTPTransport,
        *,
        label: str = DEFAULT_LABEL,
        threshold: float = DEFAULT_THRESHOLD,
        batch_pairs: int = DEFAULT_BATCH_PAIRS,
        window_words: int = DEFAULT_WINDOW_WORDS,
        overlap_words: int = DEFAULT_OVERLAP_WORDS,
        cache: ReplyCache | None = None,
    ) -> None:
        if not label.strip():
            raise ConfigError("--judge-label must name the model's entailment label")
        if not (isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0):
            raise ConfigError(f"--judge-threshold must be in [0, 1], not {threshold}")
        if batch_pairs < 1:
            raise ConfigError(f"--judge-batch-pairs must be at least 1, not {batch_pairs}")
        if window_words < 1:
            raise ConfigError(f"--judge-window-words must be at least 1, not {window_words}")
        if not 0 <= overlap_words < window_words:
            raise ConfigError(
                f"--judge-overlap-words must be 0 or more and below --judge-window-words "
                f"({window_words}), not {overlap_words}"
            )
        self._label = label.strip()
        self._threshold = float(threshold)
        self._batch_pairs = batch_pairs
        self._window = window_words
        self._overlap = overlap_words
        self._http = transport
        self._wire = PredictWire()
        self._cache = cache if cache is not None else ReplyCache(observers=transport.observers)
        self._kind = f"predict:{self._label.casefold()}:{window_words}:{overlap_words}"
        self._probe: asyncio.Task[None] | None = None

    # -- public surface ------------------------------------------------------------------

    @property
    def label(self) -> str:
        return self._label

    @property
    def threshold(self) -> float:
        return self._threshold

    @property
    def batch_pairs(self) -> int:
        """The most pairs per request: the configured cap, or lower once the server said so."""
        return self._batch_pairs

    @property
    def max_inflight(self) -> int:
        return self._http.max_inflight

    def __repr__(self) -> str:
        inner = repr(self._http)  # base URL without credentials, api_key='***'
        return (
            f"ClassifierJudge(label={self._label!r}, threshold={self._threshold:g}, "
            f"batch_pairs={self._batch_pairs}, window_words={self._window}, "
            f"overlap_words={self._overlap}, transport={inner})"
        )

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """Whether ``passages`` (ID → text), joined in order, entail ``claim``.

        Raises a :class:`~citemon._core.errors.JudgeError` when any chunk could not be scored within
        the retry budget (a maximum over some chunks only could miss the entailing one).
        """
        if not passages:
            return Verdict(entailed=False, reason="no passages were shown")
        question = (claim, tuple(passages.items()))
        found = await self._cache.cached(self._key(question), lambda: self._score_one(question))
        return self._verdict(found)

    async def check_citations(
        self, claims: Sequence[str], passages: Mapping[str, str], *, precision: bool
    ) -> list[CitedOutcome]:
        """:class:`~citemon._core.judge.BatchJudge`: every claim against one citation set in as
        few requests as the batch cap allows; with ``precision`` (two or more passages), a
        second round for the entailed claims: each passage alone, and the set without each."""
        if not passages:
            return [CitedVerdict(entailed=False, reason="no passages were shown")] * len(claims)
        shown = tuple(passages.items())
        first = await self._scores([(c, shown) for c in claims])
        subsets: dict[str, list[_Question]] = {}
        if precision and len(shown) > 1:
            for claim in dict.fromkeys(claims):
                got = first[self._key((claim, shown))]
                if isinstance(got, _Score) and got.score >= self._threshold:
                    subsets[claim] = [(claim, (item,)) for item in shown] + [
                        (claim, tuple(i for i in shown if i != item)) for item in shown
                    ]
        second = await self._scores([q for qs in subsets.values() for q in qs])
        out: list[CitedOutcome] = []
        for claim in claims:
            got = first[self._key((claim, shown))]
            if isinstance(got, JudgeError):
                out.append(got)
                continue
            verdict = self._verdict(got)
            if claim not in subsets:
                out.append(
                    CitedVerdict(
                        entailed=verdict.entailed,
                        reason=verdict.reason,
                        confidence=verdict.confidence,
                    )
                )
                continue
            parts = [second[self._key(q)] for q in subsets[claim]]
            error = next((p for p in parts if isinstance(p, JudgeError)), None)
            if error is not None:
                out.append(error)
                continue
            alone, spare = parts[: len(shown)], parts[len(shown) :]
            out.append(
                CitedVerdict(
                    entailed=True,
                    reason=verdict.reason,
                    confidence=verdict.confidence,
                    supported_by=tuple(
                        pid for (pid, _), s in zip(shown, alone, strict=True) if self._yes(s)
                    ),
                    dispensable=tuple(
                        pid for (pid, _), s in zip(shown, spare, strict=True) if self._yes(s)
                    ),
                )
            )
        return out

    async def find_support(
        self, claims: Sequence[str], passages: Mapping[str, str]
    ) -> list[SupportOutcome]:
        """:class:`~citemon._core.judge.BatchJudge`: per claim, whether all the passages jointly
        entail it and, only for those they do, which single passages do: a passage that entails
        a claim alone makes the whole context entail it too (the scorer's per-claim path makes
        the same assumption), so a claim the context does not entail costs no per-passage pair.
        """
        if not passages:
            return [SupportVerdict(supported_by=(), joint=False)] * len(claims)
        shown = tuple(passages.items())
        joint = await self._scores([(c, shown) for c in claims])
        held = [c for c in dict.fromkeys(claims) if self._yes(joint[self._key((c, shown))])]
        alone = await self._scores([(c, (item,)) for c in held for item in shown])
        out: list[SupportOutcome] = []
        for claim in claims:
            whole = joint[self._key((claim, shown))]
            if isinstance(whole, JudgeError):
                out.append(whole)
                continue
            if not self._yes(whole):
                reason = self._verdict(whole).reason
                out.append(SupportVerdict(supported_by=(), joint=False, reason=reason))
                continue
            singles = [alone[self._key((claim, (item,)))] for item in shown]
            error = next((p for p in singles if isinstance(p, JudgeError)), None)
            if error is not None:
                out.append(error)
                continue
            out.append(
                SupportVerdict(
                    supported_by=tuple(
                        pid for (pid, _), sc in zip(shown, singles, strict=True) if self._yes(sc)
                    ),
                    joint=True,
                    reason=self._verdict(whole).reason,
                )
            )
        return out

    async def aclose(self) -> None:
        if self._probe is not None and not self._probe.done():
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
        await self._cache.aclose()
        await self._http.aclose()

    async def __aenter__(self) -> ClassifierJudge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- scoring -------------------------------------------------------------------------

    def _key(self, question: _Question) -> str:
        claim, passages = question
        return question_key(self._kind, self._http.model, claim, list(passages))

    def _yes(self, score: _Score | JudgeError) -> bool:
        return isinstance(score, _Score) and score.score >= self._threshold

    def _verdict(self, found: _Score) -> Verdict:
        entailed = found.score >= self._threshold
        where = f"chunk {found.best + 1} of {found.chunks}" if found.chunks > 1 else "one chunk"
        return Verdict(
            entailed=entailed,
            reason=(
                f"{self._label} score {found.score:.3f} ({where}) "
                f"{'>=' if entailed else '<'} threshold {self._threshold:g}"
            ),
            confidence=found.score,
        )

    async def _score_one(self, question: _Question) -> _Score:
        got = (await self._scores_uncached([question]))[0]
        if isinstance(got, JudgeError):
            raise got
        return got

    async def _scores(self, questions: Sequence[_Question]) -> dict[str, _Score | JudgeError]:
        """Each distinct question's score by key: cached ones from the cache, the rest asked
        together; errors are per request, so only the questions whose pairs failed get one."""
        out: dict[str, _Score | JudgeError] = {}
        ask: dict[str, _Question] = {}
        for q in questions:
            key = self._key(q)
            if key in out or key in ask:
                continue
            found, hit = self._cache.lookup(key)
            if found and isinstance(hit, _Score):
                out[key] = hit
            else:
                ask[key] = q
        if ask:
            scored = await self._scores_uncached(list(ask.values()))
            for key, got in zip(ask, scored, strict=True):
                out[key] = got
                if isinstance(got, _Score):
                    self._cache.store(key, got)
        return out

    async def _scores_uncached(self, questions: Sequence[_Question]) -> list[_Score | JudgeError]:
        pairs: list[list[str]] = []
        owners: list[range] = []
        for claim, passages in questions:
            premise = _SEPARATOR.join(text for _, text in passages)
            chunks = chunk_words(premise, self._window, self._overlap)
            owners.append(range(len(pairs), len(pairs) + len(chunks)))
            pairs += [[chunk, claim] for chunk in chunks]
        scores = await self._predict_all(pairs)
        out: list[_Score | JudgeError] = []
        for span in owners:
            mine = scores[span.start : span.stop]
            error = next((s for s in mine if isinstance(s, JudgeError)), None)
            if error is not None:
                out.append(error)
                continue
            values = [float(s) for s in mine if not isinstance(s, JudgeError)]
            best = max(range(len(values)), key=values.__getitem__)
            out.append(_Score(values[best], len(values), best))
        return out

    async def _predict_all(self, pairs: list[list[str]]) -> list[float | JudgeError]:
        """Every pair's score, in requests of at most the batch cap, sent concurrently."""
        if self._probe is None:
            self._probe = asyncio.ensure_future(self._read_info())
        await asyncio.shield(self._probe)
        cap = self._batch_pairs
        batches = [pairs[i : i + cap] for i in range(0, len(pairs), cap)]
        results = await asyncio.gather(*(self._predict(b) for b in batches))
        return [s for r in results for s in r]

    async def _read_info(self) -> None:
        """Before the first batch: TEI's ``max_client_batch_size`` lowers the cap, so no
        request is refused for its size (a server without ``/info`` is learned from on 422)."""
        try:
            info = await self._http.get_json("info")
        except Exception:  # an optional hint must never stop judging
            logger.debug("classifier judge: reading /info failed", exc_info=True)
            return
        limit = info.get("max_client_batch_size") if isinstance(info, dict) else None
        usable = isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1
        if usable and isinstance(limit, int) and limit < self._batch_pairs:
            logger.info(
                "classifier judge at %s accepts at most %d pairs per request (its /info): "
                "sending at most that (--judge-batch-pairs %d)",
                self._http.shown_base,
                limit,
                self._batch_pairs,
            )
            self._batch_pairs = limit

    async def _predict(self, pairs: list[list[str]]) -> list[float | JudgeError]:
        if len(pairs) > self._batch_pairs:  # the cap fell while this batch waited
            return await self._predict_all(pairs)
        body = {"inputs": pairs, "truncate": True, "raw_scores": False}

        def parse(content: str) -> list[float]:
            return parse_predictions(content, pairs=len(pairs), label=self._label)

        try:
            request = PredictRequest(body, parse)
            scores = await self._http.call(
                request, self._wire, fatal=(BatchTooLarge,), log=logger, what="classifier"
            )
            return list(scores)
        except BatchTooLarge as exc:
            smaller = exc.limit if exc.limit is not None else len(pairs) // 2
            if len(pairs) <= 1 or smaller < 1 or smaller >= len(pairs):
                return [
                    JudgeHTTPError(
                        f"{exc}; a batch of {len(pairs)} cannot be split further", status=exc.status
                    )
                ] * len(pairs)
            if smaller < self._batch_pairs:
                self._batch_pairs = smaller
                logger.warning(
                    "classifier judge at %s refused %d pairs per request (HTTP %s): sending "
                    "at most %d from now on (--judge-batch-pairs)",
                    self._http.shown_base,
                    len(pairs),
                    exc.status,
                    smaller,
                )
            return await self._predict_all(pairs)
        except JudgeError as exc:
            return [exc] * len(pairs)
