"""The judge protocol: the only thing the scorer asks of a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from monitor.records import Verdict

__all__ = ["Judge"]


@runtime_checkable
class Judge(Protocol):
    """Decides whether ``passages`` (ID → text) entail ``claim``.

    The scorer shows a judge only the passages under test: for a citation check, the cited ones.
    A judge raises :class:`monitor.errors.JudgeError` when it cannot answer; the scorer turns that
    into ``unjudged``, never into a verdict.
    """

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...
