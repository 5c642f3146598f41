"""citemon: online monitoring of citation accuracy for RAG services.

The public surface: the records the scorer reads and writes, the judge protocol, and the errors.
"""

from monitor.errors import CitemonError, DecodeError, InputError, JudgeError
from monitor.judges.base import Judge
from monitor.records import (
    VERDICTS,
    AnswerRecord,
    AnswerScore,
    Claim,
    ClaimResult,
    Passage,
    Verdict,
    VerdictName,
)

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
]
