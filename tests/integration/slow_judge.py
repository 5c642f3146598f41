"""A ``--judge tests.integration.slow_judge:factory`` for process tests: the lexical judge,
slowed by ``CITEMON_TEST_JUDGE_DELAY_S`` per call and never cached, so a test can land a kill
or a SIGTERM in the middle of the stream."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

from citemon._core.records import Verdict
from citemon.judges.lexical import LexicalJudge

__all__ = ["SlowLexicalJudge", "factory"]


class SlowLexicalJudge:
    def __init__(self, delay_s: float) -> None:
        self._inner = LexicalJudge()
        self._delay_s = delay_s

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        await asyncio.sleep(self._delay_s)
        return await self._inner.entails(claim, passages)


def factory() -> SlowLexicalJudge:
    return SlowLexicalJudge(float(os.environ.get("CITEMON_TEST_JUDGE_DELAY_S", "0.05")))
