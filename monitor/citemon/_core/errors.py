"""citemon's errors, mapped from third-party ones at exactly one boundary each.

::

    CitemonError
    ├── InputError            a record or file that cannot be scored (line number, reason)
    ├── DecodeError           a Kafka/OTLP payload that is not an answer (carries ``reason``,
    │                         the short code used as the DLQ header and the metric label)
    ├── JudgeError            a judge that could not answer
    │   ├── JudgeTimeout
    │   ├── JudgeRateLimited  (429; ``retry_after_s`` when the server said)
    │   ├── JudgeHTTPError    (5xx, connection errors)
    │   └── JudgeInvalidReply (the reply was not the JSON object the contract asks for)
    ├── ConfigError           settings that cannot work together
    ├── KafkaUnavailable      the brokers could not be reached at start-up
    ├── TopicsUnusable        a topic ``run`` needs is missing or refused (exit status 1)
    └── MonitorFailed         a background task of ``citemon run`` died (exit status 1)
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "INVALID_REPLY_CAUSES",
    "CitemonError",
    "ConfigError",
    "DecodeError",
    "InputError",
    "JudgeError",
    "JudgeHTTPError",
    "JudgeInvalidReply",
    "JudgeRateLimited",
    "JudgeTimeout",
    "KafkaUnavailable",
    "MonitorFailed",
    "TopicsUnusable",
    "redacted",
    "without_passwords",
]

_URL_PASSWORD: Final = re.compile(r"(//[^/:@\s'\"]*):[^/@\s'\"]*@")


class CitemonError(Exception):
    """Base of every error citemon raises on purpose."""


class InputError(CitemonError):
    """An input record that cannot be scored."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class DecodeError(CitemonError):
    """A payload that is not a decodable answer span; ``reason`` is a short stable code."""

    def __init__(self, reason: str, message: str, *, spans: int = 1) -> None:
        self.reason = reason
        self.spans = spans
        """The spans the payload held (``no_answer_spans``: each is counted ``skipped``)."""
        super().__init__(f"{reason}: {message}")


class JudgeError(CitemonError):
    """The judge could not give a verdict; ``retriable`` says whether trying again may help."""

    retriable = True
    outcome = "error"  # the `citemon_judge_requests_total{outcome}` label


class JudgeTimeout(JudgeError):
    outcome = "timeout"


class JudgeRateLimited(JudgeError):
    outcome = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class JudgeHTTPError(JudgeError):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        # 4xx other than 408/429 will not get better by asking again.
        self.retriable = status is None or status >= 500 or status in (408, 429)
        super().__init__(message)


INVALID_REPLY_CAUSES = (
    "not_completion",
    "too_large",
    "truncated",
    "not_json",
    "schema",
    "missing_claims",
    "not_yes_no",
)
"""Values of ``citemon_judge_invalid_replies_total{cause}`` (:attr:`JudgeInvalidReply.cause`):
an HTTP 2xx that is no chat completion; a reply over the size cap; a reply cut off by
``max_tokens`` or the context (``finish_reason: length``); content that is not a JSON object;
a JSON object not matching the reply schema; a v2 reply leaving claims without an entry (or with
two); a MiniCheck reply that is not ``Yes``/``No``."""


class JudgeInvalidReply(JudgeError):
    outcome = "invalid"

    def __init__(self, message: str, *, cause: str = "schema") -> None:
        self.cause = cause if cause in INVALID_REPLY_CAUSES else "schema"
        super().__init__(message)


class ConfigError(CitemonError):
    """Settings that cannot work (bad judge spec, unreadable calibration file, …)."""


class KafkaUnavailable(CitemonError):
    """The brokers did not answer at start-up (wrong address, broker down, TLS/SASL mismatch)."""

    @classmethod
    def connecting(cls, servers: str, cause: BaseException) -> KafkaUnavailable:
        """The error for a client that could not bootstrap from ``servers``. aiokafka reports a
        refused login as a failed bootstrap too (its own log says which), hence the wording."""
        return cls(
            f"cannot connect to Kafka at {servers} (unreachable, or TLS/SASL rejected the "
            f"client): {cause}"
        )


class MonitorFailed(CitemonError):
    """A task ``citemon run`` cannot work without (commit loop, lag loop, metrics server)
    ended: ``/healthz`` turns 503 and the process exits with ``exit_code``, the cause logged."""

    exit_code = 1


class TopicsUnusable(CitemonError):
    """Topics ``citemon run`` reads or writes are missing, refused by an ACL or too small for
    its records: ``problems`` names each with the setting or ACL that fixes it (exit status 1)."""

    exit_code = 1

    def __init__(self, problems: list[str], servers: str) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"cannot use the topics at {servers}:\n{lines}")


def redacted(url: str) -> str:
    """``url`` without a password or a query string (what logs and errors show)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, "", ""))


def without_passwords(text: str) -> str:
    """``text`` (a library's error message) with the password of any ``//user:password@`` URL
    in it starred: httpx quotes a request's whole URL in its status errors."""
    return _URL_PASSWORD.sub(r"\1:***@", text)
