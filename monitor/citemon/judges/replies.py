"""Reading a judge's replies: wire contract v1 and v2 verdicts, MiniCheck's Yes/No, decompositions.

Pure functions over the model's message content (no HTTP): each returns the verdicts or raises
:class:`~citemon._core.errors.JudgeInvalidReply` with its ``cause``
(:data:`citemon._core.errors.INVALID_REPLY_CAUSES`). A reply with a repeated JSON key
(``{"entailed": false, "entailed": true}``) is invalid, not read as whichever copy the JSON
parser keeps; a ```json fence and surrounding whitespace are tolerated.

v2 replies are judged per claim (:class:`BatchReply`): a claim with no entry, two entries or an
invalid one is invalid for that claim only, and entries naming no claim of the request are
ignored (the HTTP judge asks only those claims again).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from citemon._core.errors import JudgeInvalidReply
from citemon._core.judge import CitedVerdict, SupportVerdict
from citemon._core.records import Verdict

__all__ = [
    "BatchReply",
    "parse_cited_reply",
    "parse_decompose_reply",
    "parse_entailment_reply",
    "parse_minicheck_reply",
    "parse_support_reply",
]

_T = TypeVar("_T")
_V = TypeVar("_V", CitedVerdict, SupportVerdict)
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)
_SNIPPET_CHARS = 200


def snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "…"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            # Two values for one key: which one the model meant is a guess, so neither is used.
            raise JudgeInvalidReply(f"reply repeats the key {snippet(key)!r}")
        seen.add(key)
    return dict(pairs)


def _json_object(content: str) -> dict[str, Any]:
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        # strict=False: a raw control character inside a string (a model's literal newline or
        # tab in "reason"; llama.cpp's JSON grammar lets any byte through) leaves the verdict
        # unambiguous, so it is not a reason to lose it.
        value = json.loads(text, object_pairs_hook=_unique_keys, strict=False)
    except (ValueError, RecursionError) as exc:
        raise JudgeInvalidReply(
            f"reply is not JSON: {snippet(content)!r}", cause="not_json"
        ) from exc
    if not isinstance(value, dict):
        raise JudgeInvalidReply(
            f"reply is not a JSON object: {snippet(content)!r}", cause="not_json"
        )
    return value


def parse_entailment_reply(content: str) -> Verdict:
    """The verdict in a model's message content, or :class:`JudgeInvalidReply`.

    ``entailed`` must be a JSON boolean (``"true"`` or ``1`` is a model not following the
    contract, and guessing would bias the score); ``reason`` must be a string or absent; a
    ``confidence`` in [0, 1] is kept, any other is ignored.
    """
    obj = _json_object(content)
    entailed = obj.get("entailed")
    if not isinstance(entailed, bool):
        raise JudgeInvalidReply(f'"entailed" is not a boolean: {snippet(content)!r}')
    reason = obj.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise JudgeInvalidReply(f'"reason" is not a string: {snippet(content)!r}')
    confidence = obj.get("confidence")
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not 0.0 <= confidence <= 1.0
    ):
        confidence = None
    return Verdict(entailed=entailed, reason=reason, confidence=confidence)


_YES_NO = re.compile(r"\A[\s\"'*`]*(yes|no)\b[\s.!\"'*`]*\Z", re.IGNORECASE)


def _probability(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return math.exp(min(0.0, value))  # a logprob above 0 is rounding: probability 1


def _minicheck_confidence(logprobs: object, answer: str) -> float | None:
    """The probability of ``answer`` (``yes``/``no``) at the first Yes/No token of the reply,
    renormalised over Yes and No among its ``top_logprobs``; None when the server sent none."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return None
    for entry in content:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        token = entry["token"].strip().lower()
        if not token:
            continue  # a leading space or newline token
        if token not in ("yes", "no"):
            return None
        mass = {"yes": 0.0, "no": 0.0}
        seen: set[str] = set()
        top = entry.get("top_logprobs")
        for alt in top if isinstance(top, list) else []:
            if not isinstance(alt, dict) or not isinstance(alt.get("token"), str):
                continue
            word = alt["token"].strip().lower()
            p = _probability(alt.get("logprob"))
            if word in mass and p is not None and alt["token"] not in seen:
                seen.add(alt["token"])
                mass[word] += p
        if mass["yes"] + mass["no"] > 0:
            return round(mass[answer] / (mass["yes"] + mass["no"]), 6)
        p = _probability(entry.get("logprob"))
        return None if p is None or token != answer else round(p, 6)
    return None


def parse_minicheck_reply(content: str, logprobs: object = None) -> Verdict:
    """The verdict in a MiniCheck reply: ``Yes`` (entailed) or ``No``, else JudgeInvalidReply.

    Case, surrounding blanks, quotes, markdown emphasis and a full stop are tolerated; any other
    word is invalid. ``logprobs`` is the choice's ``logprobs`` object (OpenAI shape); with it,
    ``confidence`` is the probability of the answer given (see :func:`_minicheck_confidence`).
    """
    found = _YES_NO.match(content)
    if not found:
        raise JudgeInvalidReply(f"reply is not Yes or No: {snippet(content)!r}", cause="not_yes_no")
    answer = found.group(1).lower()
    return Verdict(
        entailed=answer == "yes",
        reason=f"MiniCheck: {found.group(1)}",
        confidence=_minicheck_confidence(logprobs, answer),
    )


@dataclass(frozen=True, slots=True)
class Choice:
    """The parts of a chat completion's first choice a parser reads."""

    content: str
    finish_reason: object = None
    logprobs: object = None


def parse_content(parse: Callable[[str], _T]) -> Callable[[Choice], _T]:
    return lambda choice: parse(choice.content)


def parse_minicheck_choice(choice: Choice) -> Verdict:
    return parse_minicheck_reply(choice.content, choice.logprobs)


@dataclass(slots=True)
class BatchReply(Generic[_V]):
    """A v2 reply taken apart: valid verdicts and, per claim ID, why it has none (``problems``)."""

    verdicts: dict[str, _V] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def cause(self) -> str:
        """The ``citemon_judge_invalid_replies_total`` cause of a reply with problems: entries
        missing or doubled only → ``missing_claims``; any mistyped entry → ``schema``."""
        only_missing = all(p in _MISSING for p in self.problems.values())
        return "missing_claims" if only_missing else "schema"


_NO_ENTRY: Final = "no entry for the claim"
_TWO_ENTRIES: Final = "two entries for one claim"
_MISSING: Final = (_NO_ENTRY, _TWO_ENTRIES)


def _entries(content: str, claims: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each asked claim's entry in a v2 reply, or why it has no usable one."""
    obj = _json_object(content)
    listed = obj.get("verdicts")
    if not isinstance(listed, list):
        raise JudgeInvalidReply(f'"verdicts" is not a list: {snippet(content)!r}')
    asked = set(claims)
    entries: dict[str, dict[str, Any]] = {}
    problems: dict[str, str] = {}
    for entry in listed:
        cid = entry.get("claim") if isinstance(entry, dict) else None
        if not isinstance(cid, str) or cid not in asked:
            continue  # an extra entry: nothing to attribute it to
        if cid in entries or cid in problems:
            entries.pop(cid, None)
            problems[cid] = _TWO_ENTRIES
            continue
        entries[cid] = entry
    for cid in claims:
        if cid not in entries and cid not in problems:
            problems[cid] = _NO_ENTRY
    return entries, problems


def _ids(entry: dict[str, Any], name: str, shown: list[str]) -> tuple[str, ...]:
    value = entry.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f'"{name}" is not a list of passage IDs')
    unknown = [v for v in value if v not in shown]
    if unknown:
        raise ValueError(f'"{name}" names passages not shown: {", ".join(unknown[:3])}')
    return tuple(p for p in shown if p in value)  # the shown order, without repeats


def _reason(entry: dict[str, Any]) -> str | None:
    reason = entry.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError('"reason" is not a string')
    return reason


def parse_cited_reply(
    content: str, *, claims: list[str], passages: list[str], precision: bool
) -> BatchReply[CitedVerdict]:
    """A v2 citation-check reply for the claim IDs ``claims`` over the passage IDs ``passages``.

    Per entry: ``entailed`` must be a JSON boolean, ``reason`` a string or absent, a
    ``confidence`` in [0, 1] is kept. With ``precision``, an entailed claim's entry must also
    carry ``supported_by`` and ``dispensable``, lists of shown passage IDs (possibly empty);
    otherwise those fields are ignored. Raises :class:`JudgeInvalidReply` only when the reply as
    a whole is unusable.
    """
    entries, problems = _entries(content, claims)
    reply: BatchReply[CitedVerdict] = BatchReply(problems=problems)
    for cid, entry in entries.items():
        try:
            entailed = entry.get("entailed")
            if not isinstance(entailed, bool):
                raise ValueError('"entailed" is not a boolean')
            reason = _reason(entry)
            confidence = entry.get("confidence")
            if (
                isinstance(confidence, bool)
                or not isinstance(confidence, int | float)
                or not 0.0 <= confidence <= 1.0
            ):
                confidence = None
            alone = spare = None
            if precision and entailed:
                alone = _ids(entry, "supported_by", passages)
                spare = _ids(entry, "dispensable", passages)
        except ValueError as exc:
            reply.problems[cid] = str(exc)
            continue
        reply.verdicts[cid] = CitedVerdict(
            entailed=entailed,
            reason=reason,
            confidence=confidence,
            supported_by=alone,
            dispensable=spare,
        )
    return reply


def parse_support_reply(
    content: str, *, claims: list[str], passages: list[str]
) -> BatchReply[SupportVerdict]:
    """A v2 support-search reply: per claim ``supported_by`` (shown IDs) and ``joint`` (bool)."""
    entries, problems = _entries(content, claims)
    reply: BatchReply[SupportVerdict] = BatchReply(problems=problems)
    for cid, entry in entries.items():
        try:
            joint = entry.get("joint")
            if not isinstance(joint, bool):
                raise ValueError('"joint" is not a boolean')
            verdict = SupportVerdict(
                supported_by=_ids(entry, "supported_by", passages),
                joint=joint,
                reason=_reason(entry),
            )
        except ValueError as exc:
            reply.problems[cid] = str(exc)
            continue
        reply.verdicts[cid] = verdict
    return reply


def parse_decompose_reply(content: str) -> list[str]:
    """The claims in a decomposition reply ``{"claims": ["…", …]}``, blank ones dropped."""
    obj = _json_object(content)
    claims = obj.get("claims")
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise JudgeInvalidReply(f'"claims" is not a list of strings: {snippet(content)!r}')
    return [c.strip() for c in claims if c.strip()]


def parse_batch_for(
    parse: Callable[[str, list[str]], BatchReply[_V]], ids: list[str], choice: Choice
) -> BatchReply[_V]:
    return parse(choice.content, ids)
