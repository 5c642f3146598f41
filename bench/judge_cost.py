"""Judge prompt cost on ExpertQA: wire contract v2 beside v1, the naive scheme and a RAGAS pass.

Every request is the real prompt :mod:`citemon.judges.prompts` builds (system message included,
16-hex-digit nonce), counted two ways: characters ÷ 4 (the usual rule of thumb for English with
BPE tokenizers; the headline figure) and whitespace-separated words (a tokenizer-free cross-check).
The judge is a deterministic stub (entailed iff every content word of the claim occurs in the
passages shown), so v1 and v2 must give the same verdicts, which is checked claim by claim.
Nothing is cached: each answer is judged as if new, as in production.

* naive — every cited claim against its cited passages, every claim also against the joined
  context, every failed cited claim against each other passage (bench/engine.py), v1 prompts;
* v1 — citemon's scorer with a per-claim judge (``--judge-protocol v1``);
* v2 — the same scorer with a batch judge (``--judge-protocol v2``);
* RAGAS-style — two calls per answer, each showing the whole context (statement extraction and
  the faithfulness verdicts), approximated as two v1 prompts with the whole answer as the claim.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from citemon._core.judge import CitedOutcome, CitedVerdict, SupportOutcome, SupportVerdict
from citemon._core.records import AnswerRecord, AnswerScore, Verdict
from citemon._engine.claims import extract_claims
from citemon._engine.scoring import Scorer
from citemon.judges.prompts import (
    Message,
    build_cited_messages,
    build_entailment_messages,
    build_support_messages,
)

__all__ = ["DATA", "Cost", "measure", "run"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "expertqa" / "val.jsonl"
TARGET = 0.3  # v2 prompt tokens ÷ naive prompt tokens (issue 6)

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = (
    "a an and are as at be been but by can could did do does for from had has have how i if in "
    "into is it its may might must not of on or our so such than that the their them then there "
    "these they this those to was we were what when where which who will with would you your"
)
_STOP = frozenset(_STOPWORDS.split())


def _words(text: str) -> set[str]:
    return {
        w for w in _WORD.findall(text.lower()) if w not in _STOP and (len(w) > 2 or w.isdigit())
    }


def _holds(claim: str, passages: Mapping[str, str]) -> bool:
    """The stub's judgement: every content word of the claim occurs in the passages shown."""
    return _words(claim) <= _words(" ".join(passages.values()))


def _nonce() -> str:
    return "0123456789abcdef"  # same length as the real secrets.token_hex(8); counts are stable


@dataclass(slots=True)
class Cost:
    """Requests and prompt size of one scheme over a set of answers."""

    calls: int = 0
    chars: int = 0
    words: int = 0

    def add(self, messages: list[Message]) -> None:
        self.calls += 1
        for m in messages:
            self.chars += len(m["content"])
            self.words += len(m["content"].split())

    @property
    def tokens(self) -> float:
        return self.chars / 4


class _V1Stub:
    """Per-claim judge: answers by the rule, counts the v1 prompt it would send."""

    def __init__(self) -> None:
        self.cost = Cost()

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        if not passages:  # HTTPJudge sends nothing for an empty passage set
            return Verdict(entailed=False)
        self.cost.add(build_entailment_messages(claim, passages, make_nonce=_nonce))
        return Verdict(entailed=_holds(claim, passages))


class _V2Stub(_V1Stub):
    """Batch judge: one counted v2 prompt per call, claims deduplicated as HTTPBatchJudge does."""

    async def check_citations(
        self, claims: Sequence[str], passages: Mapping[str, str], *, precision: bool
    ) -> list[CitedOutcome]:
        if not passages:
            return [CitedVerdict(entailed=False)] * len(claims)
        precise = precision and len(passages) > 1
        ids = {f"c{n}": c for n, c in enumerate(dict.fromkeys(claims), 1)}
        self.cost.add(build_cited_messages(ids, passages, precision=precise, make_nonce=_nonce))
        out: list[CitedOutcome] = []
        for claim in claims:
            entailed = _holds(claim, passages)
            if not (precise and entailed):
                out.append(CitedVerdict(entailed=entailed))
                continue
            alone = tuple(p for p in passages if _holds(claim, {p: passages[p]}))
            spare = tuple(
                p for p in passages if _holds(claim, {k: v for k, v in passages.items() if k != p})
            )
            out.append(CitedVerdict(entailed=True, supported_by=alone, dispensable=spare))
        return out

    async def find_support(
        self, claims: Sequence[str], passages: Mapping[str, str]
    ) -> list[SupportOutcome]:
        ids = {f"c{n}": c for n, c in enumerate(dict.fromkeys(claims), 1)}
        self.cost.add(build_support_messages(ids, passages, make_nonce=_nonce))
        return [
            SupportVerdict(
                supported_by=tuple(p for p in passages if _holds(c, {p: passages[p]})),
                joint=_holds(c, passages),
            )
            for c in claims
        ]


def _naive(record: AnswerRecord, cost: Cost) -> None:
    passages = record.passage_map()

    def ask(claim: str, shown: Mapping[str, str]) -> bool:
        if not shown:
            return False
        cost.add(build_entailment_messages(claim, shown, make_nonce=_nonce))
        return _holds(claim, shown)

    for claim in extract_claims(record):
        valid = {c: passages[c] for c in claim.cited_ids if c in passages}
        ok = bool(valid) and ask(claim.text, valid)
        ask(claim.text, passages)
        if claim.cited_ids and not ok:
            for pid, text in passages.items():
                if pid not in valid:
                    ask(claim.text, {pid: text})


def _ragas(record: AnswerRecord, cost: Cost) -> None:
    for _ in range(2):
        cost.add(build_entailment_messages(record.answer, record.passage_map(), make_nonce=_nonce))


def _key(score: AnswerScore) -> list[tuple[object, ...]]:
    return [(c.verdict, c.supported_by, c.faithful, c.irrelevant_ids) for c in score.claims]


@dataclass(slots=True)
class Measured:
    """The four schemes' costs and how many claims v1 and v2 scored alike."""

    answers: int
    claims: int
    same_claims: int
    naive: Cost
    v1: Cost
    v2: Cost
    ragas: Cost


def measure(records: Sequence[AnswerRecord]) -> Measured:
    """Cost of each scheme on ``records``, and whether v1 and v2 agree on every claim."""
    v1, v2 = _V1Stub(), _V2Stub()

    async def both() -> tuple[list[AnswerScore], list[AnswerScore]]:
        one = await Scorer(v1).score_many(records)
        two = await Scorer(v2).score_many(records)
        return one, two

    one, two = asyncio.run(both())
    naive, ragas = Cost(), Cost()
    for record in records:
        _naive(record, naive)
        _ragas(record, ragas)
    same = sum(
        a == b
        for s1, s2 in zip(one, two, strict=True)
        for a, b in zip(_key(s1), _key(s2), strict=True)
    )
    return Measured(
        answers=len(records),
        claims=sum(len(s.claims) for s in one),
        same_claims=same,
        naive=naive,
        v1=v1.cost,
        v2=v2.cost,
        ragas=ragas,
    )


def run() -> None:
    if not DATA.is_file():
        print(f"skipped: {DATA} not found (the labelled data is only in the project's CI)")
        return
    records = [AnswerRecord.model_validate_json(line) for line in DATA.open(encoding="utf-8")]
    m = measure(records)
    k = m.answers
    print(
        f"answers {k}, claims {m.claims}; prompt tokens = characters ÷ 4, system message included"
    )
    head = ("scheme", "calls/answer", "tokens/answer", "× naive", "words × naive")
    print(f"{head[0]:<22}{head[1]:>13}{head[2]:>15}{head[3]:>9}{head[4]:>15}")
    for name, cost in [
        ("naive", m.naive),
        ("v1 (per claim)", m.v1),
        ("v2 (batched)", m.v2),
        ("RAGAS-style (2 calls)", m.ragas),
    ]:
        print(
            f"{name:<22}{cost.calls / k:>13.1f}{cost.tokens / k:>15.0f}"
            f"{cost.chars / m.naive.chars:>9.2f}{cost.words / m.naive.words:>15.2f}"
        )
    print(
        f"v2 / v1 tokens {m.v2.chars / m.v1.chars:.2f}   v2 / RAGAS-style tokens "
        f"{m.v2.chars / m.ragas.chars:.2f}   v2 / naive {m.v2.chars / m.naive.chars:.2f} "
        f"(target ≤ {TARGET})"
    )
    print(f"same verdicts v1 = v2: {m.same_claims}/{m.claims} claims")
