"""citemon: online monitoring of citation accuracy for RAG services.

The Python API (docs/api.md): score answer records with a judge, and read the ratios of the
scores. Everything a library user needs is importable from here::

    import asyncio
    from citemon import AnswerRecord, Passage, Scorer, summarize
    from citemon.judges import load_judge

    record = AnswerRecord(
        answer="Audit logs are kept 90 days. [p-1]",
        passages=[Passage(id="p-1", text="Audit logs are retained for 90 days.")],
    )
    score = asyncio.run(Scorer(load_judge("lexical")).score(record))
    print(score.claims[0].verdict, summarize([score]).tally.citation_accuracy)

The judges themselves (``lexical``, ``http``, ``classifier``, …) are :mod:`citemon.judges`; a
judge of your own implements :class:`Judge` (and, for wire contract v2's batches,
:class:`BatchJudge` with its :class:`CitedVerdict` and :class:`SupportVerdict`); a store of
passage text for traces without it (``Scorer(judge, passages=…)``) implements
:class:`PassageStore` (docs/passage-store.md). The other
modules are citemon's own: their names may change between releases.
"""

from importlib.metadata import version as _version

from citemon._core.errors import CitemonError, DecodeError, InputError, JudgeError
from citemon._core.judge import (
    BatchJudge,
    CitedOutcome,
    CitedVerdict,
    Judge,
    SupportOutcome,
    SupportVerdict,
)
from citemon._core.passages import PassageLookupError, PassageStore
from citemon._core.records import (
    CITED_VERDICTS,
    VERDICTS,
    AnswerRecord,
    AnswerScore,
    Claim,
    ClaimResult,
    Passage,
    UnjudgedCause,
    Verdict,
    VerdictName,
)
from citemon._core.tally import Tally
from citemon._engine.scoring import Scorer
from citemon._engine.settings import ScoringSettings
from citemon._engine.summary import Summary, summarize

__version__: str = _version("citemon")
"""The installed version, from the package metadata (set once, in pyproject.toml)."""

__all__ = [
    "CITED_VERDICTS",
    "VERDICTS",
    "AnswerRecord",
    "AnswerScore",
    "BatchJudge",
    "CitedOutcome",
    "CitedVerdict",
    "CitemonError",
    "Claim",
    "ClaimResult",
    "DecodeError",
    "InputError",
    "Judge",
    "JudgeError",
    "Passage",
    "PassageLookupError",
    "PassageStore",
    "Scorer",
    "ScoringSettings",
    "Summary",
    "SupportOutcome",
    "SupportVerdict",
    "Tally",
    "UnjudgedCause",
    "Verdict",
    "VerdictName",
    "__version__",
    "summarize",
]
