"""citemon: online monitoring of citation accuracy for RAG services.

The public surface: the records the scorer reads and writes, the judge protocol, and the errors.
"""

from importlib.metadata import version as _version

from citemon.core.errors import CitemonError, DecodeError, InputError, JudgeError
from citemon.core.judge import Judge
from citemon.core.records import (
    VERDICTS,
    AnswerRecord,
    AnswerScore,
    Claim,
    ClaimResult,
    Passage,
    Verdict,
    VerdictName,
)

__version__: str = _version("citemon")
"""The installed version, from the package metadata (set once, in pyproject.toml)."""

__all__ = [
    "VERDICTS",
    "AnswerRecord",
    "AnswerScore",
    "CitemonError",
    "Claim",
    "ClaimResult",
    "DecodeError",
    "InputError",
    "Judge",
    "JudgeError",
    "Passage",
    "Verdict",
    "VerdictName",
    "__version__",
]
