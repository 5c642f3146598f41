"""The settings of ``citemon run``: one model, its flags, and its judge and scoring parts.

Precedence, highest first: a CLI flag, the ``CITEMON_<FIELD>`` environment variable, the default
(the mechanism: :mod:`citemon._core.settings`). Every limit carries its unit in its name. The
judge (``settings.judge``: ``--judge*``, ``CITEMON_JUDGE_*``) and how claims are checked
(``settings.scoring``: ``--policy``, ``--marker-pattern``…) are parts, shared with ``citemon
score``. Secrets are :class:`~pydantic.SecretStr`: their ``repr``/``str`` is ``'**********'``,
:meth:`Settings.describe` (what the service logs at start-up) leaves them out, and the plaintext
is only ever handed to the Kafka client in :meth:`Settings.kafka_options`.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from pathlib import Path
from typing import Any, ClassVar, Final, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from citemon._core.errors import ConfigError
from citemon._core.settings import (
    ENV_PREFIX,
    Flag,
    FlagSettings,
    one_secret_source,
    parse_duration_s,
    secret_from,
)
from citemon._engine.excerpts import MAX_EXCERPT_CHARS
from citemon._engine.settings import ScoringSettings
from citemon._otlp.settings import AgentSettings
from citemon._passages.settings import PassageStoreSettings
from citemon._review.sample import DEFAULT_REVIEW_PASSAGE_CHARS, DEFAULT_REVIEW_TOPIC
from citemon.judges.settings import JudgeSettings

__all__ = [
    "ENV_PREFIX",
    "KAFKA_CONNECTION_FIELDS",
    "SERVICE_FLAGS",
    "SecurityProtocol",
    "Settings",
    "add_settings_arguments",
    "check_transactional_id",
    "derived_transactional_id",
    "parse_duration_s",
    "settings_from_args",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


# Renamed settings keep their old flag and variable as deprecated aliases: the shuffle probe was
# called the "canary" until 0.x. Its Prometheus metrics keep that name
# (citemon_judge_canary_sensitivity, citemon_judge_canary_answers_total): the dashboards and
# alert rules read them, so renaming them would break every deployed panel.
SERVICE_FLAGS: Final = (
    Flag("--bootstrap-servers", "bootstrap_servers", "Kafka brokers (default 127.0.0.1:9092)"),
    Flag("--topic", "topic", "topic of OTLP span batches (default otlp_spans)"),
    Flag("--group", "group", "consumer group (default citemon)"),
    Flag("--dlq-topic", "dlq_topic", "dead-letter topic (default otlp_spans.dlq)"),
    Flag("--results-topic", "results_topic", "per-answer JSON results, exactly once (off)"),
    Flag(
        "--results-excerpt-chars",
        "results_excerpt_chars",
        "characters of each cited/supporting passage in a result's excerpts; 0 = none (240)",
        int,
    ),
    Flag(
        "--review-rate",
        "review_rate",
        "share of scored answers sampled for human review to --review-topic, exactly "
        "once, e.g. 0.01 (default 0 = off)",
        float,
    ),
    Flag("--review-topic", "review_topic", "topic of review records (default citemon._review)"),
    Flag(
        "--review-passage-chars",
        "review_passage_chars",
        "characters of each cited/supporting passage in a review record, 1..4000 (4000)",
        int,
    ),
    Flag(
        "--rekey-topic",
        "rekey_topic",
        "re-key the input by trace ID to this topic (exactly once) and score from it, for "
        "input not keyed by trace ID (off)",
    ),
    Flag(
        "--held-topic",
        "held_topic",
        "compacted topic keeping trace parts that wait for the rest of their trace, created "
        "when missing (default <group>.held-spans)",
    ),
    Flag(
        "--held-max-bytes",
        "held_max_bytes",
        "bytes of trace parts held in memory for assembly; past it bare roots, then the "
        "oldest traces, are let go early (default 67108864 = 64 MiB)",
        int,
    ),
    Flag(
        "--create-topics",
        "create_topics",
        "create the topics run uses that do not exist, instead of exiting 1 (off)",
        bool,
    ),
    Flag(
        "--topic-partitions",
        "topic_partitions",
        "partitions of topics --create-topics creates; -1 = the broker's default (-1)",
        int,
    ),
    Flag(
        "--topic-replication-factor",
        "topic_replication_factor",
        "replication factor of topics --create-topics creates; -1 = the broker's default (-1)",
        int,
    ),
    Flag(
        "--transactional-id",
        "transactional_id",
        "deprecated: the results producers' ID prefix is citemon-<group>, derived from "
        "the group so every replica shares it; any other value is refused",
    ),
    Flag("--security-protocol", "security_protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    Flag("--sasl-mechanism", "sasl_mechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    Flag("--kafka-username", "kafka_username", "SASL user (password: CITEMON_KAFKA_PASSWORD)"),
    Flag("--kafka-password-file", "kafka_password_file", "file holding the SASL password", Path),
    Flag("--ssl-cafile", "ssl_cafile", "CA bundle to verify the brokers", Path),
    Flag("--ssl-certfile", "ssl_certfile", "client certificate (mutual TLS)", Path),
    Flag("--ssl-keyfile", "ssl_keyfile", "client key (mutual TLS)", Path),
    Flag(
        "--sample-rate",
        "sample_rate",
        "fraction of traces scored, by trace ID (default 1)",
        float,
    ),
    Flag(
        "--budget-per-minute",
        "budget_per_minute",
        "answers scored per (service, version) per minute; 0 = unlimited (default 600)",
        float,
    ),
    Flag(
        "--max-inflight-answers",
        "max_inflight_answers",
        "answers being scored at once; partitions pause when full (default 64)",
        int,
    ),
    Flag(
        "--cpu-workers",
        "cpu_workers",
        "threads for CPU-bound scoring, off the event loop (default 2)",
        int,
    ),
    Flag(
        "--max-answer-attempts",
        "max_answer_attempts",
        "scoring attempts per answer before judge failures are recorded unjudged (default 5)",
        int,
    ),
    Flag(
        "--metrics-port",
        "metrics_port",
        "port of /metrics, /healthz, /readyz (default 9464)",
        int,
    ),
    Flag("--metrics-host", "metrics_host", "address to serve metrics on (default 0.0.0.0)"),
    Flag(
        "--drain-timeout",
        "drain_timeout_s",
        "seconds to finish work on SIGTERM (default 30)",
        float,
    ),
    Flag("--commit-interval", "commit_interval_s", "seconds between commits (default 0.5)", float),
    Flag("--window", "window", "window of the ratio gauges, e.g. 15m (default 15m)"),
    Flag(
        "--calibration",
        "calibration",
        "judge calibration file (citemon calibrate --output): export corrected accuracy",
        Path,
    ),
    Flag(
        "--probe-rate",
        "probe_rate",
        "share of scored answers re-checked with shuffled citations (the shuffle probe), "
        "e.g. 0.02 (default 0 = off)",
        float,
        aliases=("--canary-rate",),
        env_aliases=("CITEMON_CANARY_RATE",),
    ),
    Flag(
        "--probe-window",
        "probe_window",
        "window of the shuffle probe's sensitivity gauge (default 1h)",
        aliases=("--canary-window",),
        env_aliases=("CITEMON_CANARY_WINDOW",),
    ),
    Flag(
        "--evaluation-events",
        "evaluation_events",
        "send gen_ai.evaluation.result events per scored answer over OTLP "
        "(OTEL_EXPORTER_OTLP_* variables; needs citemon[events]) (off)",
        bool,
    ),
    Flag(
        "--evaluation-events-max-queue",
        "evaluation_events_max_queue",
        "evaluation events waiting for export at most; more are dropped and counted (2048)",
        int,
    ),
)
"""The ``citemon run`` flags: each sets the :class:`Settings` field of its name."""


KAFKA_CONNECTION_FIELDS: Final = (
    "bootstrap_servers",
    "security_protocol",
    "sasl_mechanism",
    "kafka_username",
    "kafka_password_file",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)
"""The fields whose flags reach the brokers: what a command that reads a topic offers (with the
topic's own field) through ``add_settings_arguments(parser, only=...)``."""


class Settings(FlagSettings):
    """Everything ``citemon run`` needs besides the judge. Field ``x`` ⇔ env ``CITEMON_X``;
    the flags are :data:`SERVICE_FLAGS`."""

    FLAGS: ClassVar[tuple[Flag, ...]] = SERVICE_FLAGS
    DEST_PREFIX: ClassVar[str | None] = "settings_"
    TITLE: ClassVar[str] = "kafka, sampling and delivery"

    # -- Kafka -------------------------------------------------------------------------------
    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "otlp_spans"
    group: str = "citemon"
    dlq_topic: str = "otlp_spans.dlq"
    results_topic: str | None = None
    results_excerpt_chars: int = Field(default=240, ge=0, le=MAX_EXCERPT_CHARS)
    """Characters kept of each cited or supporting passage in a results record's ``excerpts``
    (the text the shim recorded, after its redaction hook); 0 = no excerpts."""
    review_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """Share of scored answers written to ``review_topic`` for people to label (a hash of the
    trace ID, independent of ``sample_rate`` and the shuffle probe: :mod:`citemon._review.sample`);
    0 = off. Any rate > 0 makes delivery transactional, like a results topic."""
    review_topic: str = DEFAULT_REVIEW_TOPIC
    review_passage_chars: int = Field(
        default=DEFAULT_REVIEW_PASSAGE_CHARS, ge=1, le=MAX_EXCERPT_CHARS
    )
    """Characters kept of each cited or supporting passage in a review record (the text the
    shim recorded, after its redaction hook); longer passages are cut and named in
    ``passages_cut``."""
    rekey_topic: str | None = None
    """Re-key the input by trace ID to this topic first, in transactions with the input
    offsets, and score from it (:mod:`citemon._service.rekey`)."""
    held_topic: str | None = None
    """The held-parts store (:mod:`citemon._service.held`); None: ``<group>.held-spans``."""
    held_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Bytes of trace parts the assembler holds in memory (text, plus a small entry per bare
    root); past it bare roots go first, then the oldest traces are settled early (``evicted``)."""
    create_topics: bool = False
    """Create the topics ``run`` uses that do not exist (:mod:`citemon._service.kafka`)."""
    topic_partitions: int = Field(default=-1, ge=-1)
    topic_replication_factor: int = Field(default=-1, ge=-1)
    transactional_id: str | None = None
    """Deprecated: the results producers' transactional-ID prefix is derived from the consumer
    group alone, ``citemon-<group>`` (:attr:`transactional_id_prefix`), so every replica of a
    group has the same one by construction. The prefix must be the same on every replica, or the
    broker cannot fence a frozen replica and its answers are counted twice: a value other than
    the derived one (a per-pod ID, say) is refused at start-up (:func:`check_transactional_id`);
    the derived value itself is accepted, so configurations that spelled it out still start."""
    client_id: str = "citemon"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    kafka_username: str | None = None
    kafka_password: SecretStr | None = None
    kafka_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    fetch_max_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Upper bound of one fetch response (aiokafka's default, 50 MB, is a lot of RSS)."""
    max_partition_fetch_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_poll_records: int = Field(default=500, ge=1)
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    """How long the group waits for a silent (crashed) member before moving its partitions."""
    transaction_timeout_ms: int = Field(default=30_000, ge=1000)

    # -- sampling ----------------------------------------------------------------------------
    sample_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    budget_per_minute: float = Field(default=600.0, ge=0.0)
    """Answers scored per (service, version) per minute of traffic; 0 = no budget."""
    max_budget_keys: int = Field(default=1000, ge=1)

    # -- work and delivery -------------------------------------------------------------------
    max_inflight_answers: int = Field(default=64, ge=1)
    cpu_workers: int = Field(default=2, ge=1)
    """Threads that run CPU-bound scoring (sentence splitting, the lexical and learned judges)
    off the event loop; more answers than this queue for them."""
    max_uncommitted_records: int = Field(default=4096, ge=1)
    """Records fetched but not yet committed (in flight + finished behind a slower one)."""
    max_answer_attempts: int = Field(default=5, ge=1)
    """Attempts per answer while the judge is otherwise healthy; during an outage (no answer
    scores cleanly) attempts are not spent: the pipeline waits instead."""
    answer_retry_backoff_s: float = Field(default=1.0, gt=0)
    answer_retry_backoff_max_s: float = Field(default=30.0, gt=0)
    dedupe_window: int = Field(default=100_000, ge=0)
    commit_interval_s: float = Field(default=0.5, gt=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)
    revoke_timeout_s: float = Field(default=5.0, ge=0)
    lag_interval_s: float = Field(default=5.0, gt=0)
    trace_window_s: float = Field(default=30.0, gt=0)
    """How long an OpenInference trace whose root never arrives is held for its other parts
    before it is settled (scored if it has documents and an answer)."""

    # -- metrics -----------------------------------------------------------------------------
    metrics_host: str = "0.0.0.0"
    metrics_port: int = Field(default=9464, ge=0, le=65535)
    window: float = Field(default=900.0, gt=0)
    """``CITEMON_WINDOW``: the windowed gauges' span (``15m``, ``900s``…), in seconds here."""
    max_versions: int = Field(default=20, ge=1)

    # -- self-checks -------------------------------------------------------------------------
    calibration: Path | None = None
    """A ``citemon calibrate --output`` file: export ``citemon_citation_accuracy_corrected``."""
    probe_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    """``CITEMON_PROBE_RATE`` (deprecated alias ``CITEMON_CANARY_RATE``, ``--canary-rate``):
    share of scored answers re-checked with shuffled citations (the shuffle probe); 0 = off.
    Costs one judge call per cited claim of each such answer
    (:mod:`citemon._checks.shuffle_probe`)."""
    probe_window: float = Field(default=3600.0, gt=0)
    """``CITEMON_PROBE_WINDOW`` (deprecated alias ``CITEMON_CANARY_WINDOW``,
    ``--canary-window``): span of the probe's sums, in seconds here (``1h``…). Longer than
    ``window`` because the probe sees only ``probe_rate`` of the answers."""

    # -- verdicts back on the trace ------------------------------------------------------------
    evaluation_events: bool = False
    """Send each counted answer's ``gen_ai.evaluation.result`` events over OTLP (the standard
    ``OTEL_EXPORTER_OTLP_*`` variables; :mod:`citemon._service.evaluation_events`)."""
    evaluation_events_max_queue: int = Field(default=2048, ge=1)
    """Events waiting for export at most; more are dropped, and counted, rather than queued."""

    # -- the parts ---------------------------------------------------------------------------
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    """How claims are checked (its own flags and ``CITEMON_*`` variables)."""
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    """The judge (``--judge*``, ``CITEMON_JUDGE*``)."""
    passages: PassageStoreSettings = Field(default_factory=PassageStoreSettings)
    """The passage store answers' cited IDs are looked up in (``--passage-store*``)."""
    agents: AgentSettings = Field(default_factory=AgentSettings)
    """How agents' tool calls are read (``--retrieval-tools``, ``--tool-result-reader``)."""

    @field_validator("window", "probe_window", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration_s(value) if isinstance(value, str) else value

    @field_validator(
        "results_topic", "rekey_topic", "held_topic", "sasl_mechanism", "calibration", mode="before"
    )
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @model_validator(mode="after")
    def _coherent(self) -> Settings:
        one_secret_source(self.kafka_password, self.kafka_password_file, what="the Kafka password")
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl_mechanism is None:
            raise ValueError(f"security protocol {self.security_protocol} needs --sasl-mechanism")
        if sasl and not self.kafka_username:
            raise ValueError("SASL needs --kafka-username")
        if sasl and self.kafka_password is None and self.kafka_password_file is None:
            raise ValueError("SASL needs CITEMON_KAFKA_PASSWORD or --kafka-password-file")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("--ssl-certfile and --ssl-keyfile go together")
        if self.answer_retry_backoff_max_s < self.answer_retry_backoff_s:
            raise ValueError("answer_retry_backoff_max_s must be >= answer_retry_backoff_s")
        check_transactional_id(self.transactional_id, self.group)
        if self.rekey_topic is not None and self.rekey_topic == self.topic:
            raise ValueError("--rekey-topic must differ from --topic")
        if self.held_topic_name in (self.topic, self.rekey_topic, self.results_topic):
            raise ValueError("--held-topic must differ from the topics it reads and writes")
        if 0 in (self.topic_partitions, self.topic_replication_factor):
            raise ValueError("--topic-partitions and --topic-replication-factor: >= 1, or -1")
        return self

    # -- derived -----------------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        """Whether results are produced in per-partition transactions with the offsets: with a
        results topic or a review sample (both exactly once)."""
        return self.results_topic is not None or self.review_rate > 0

    @property
    def held_topic_name(self) -> str:
        """The held-parts store's topic: ``--held-topic``, or ``<group>.held-spans`` (one per
        group: two groups reading one input hold their parts apart)."""
        return self.held_topic or f"{self.group}.held-spans"

    @property
    def transactional_id_prefix(self) -> str:
        """``citemon-<group>``: from the group alone, the same on every replica of it."""
        return derived_transactional_id(self.group)

    def transactional_id_for(self, topic: str, partition: int) -> str:
        """The transactional ID of input partition ``topic``/``partition``'s results producer:
        the same on every replica, so the partition's next owner fences the previous one."""
        return f"{self.transactional_id_prefix}-{topic}-{partition}"

    def password(self) -> SecretStr | None:
        """The Kafka password, from env or its file (the one rule for secrets:
        :func:`~citemon._core.settings.secret_from`)."""
        return secret_from(
            self.kafka_password, self.kafka_password_file, file_flag="--kafka-password-file"
        )

    def kafka_options(self) -> dict[str, Any]:
        """Keyword arguments shared by every aiokafka client. Holds the plaintext password:
        pass it to aiokafka and nowhere else (never log it)."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
        }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            try:
                options["ssl_context"] = create_ssl_context(
                    cafile=self.ssl_cafile,
                    certfile=self.ssl_certfile,
                    keyfile=self.ssl_keyfile,
                    password=_encrypted_key,
                )
            except OSError as exc:
                raise ConfigError(f"cannot load TLS files: {exc}") from None
        if self.security_protocol.startswith("SASL_"):
            password = self.password()
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.kafka_username
            options["sasl_plain_password"] = password.get_secret_value() if password else None
        return options

    def describe(self) -> dict[str, Any]:
        """The settings as logged at start-up: every field but the secrets' values."""
        out = self.model_dump(mode="json", exclude={"kafka_password", "judge"})
        out["kafka_password"] = "set" if self.kafka_password is not None else None
        out["judge"] = self.judge.model_dump(mode="json", exclude={"api_key"})
        out["judge"]["api_key"] = "set" if self.judge.api_key is not None else None
        return out


def derived_transactional_id(group: str) -> str:
    """The results producers' transactional-ID prefix of consumer group ``group``."""
    return f"citemon-{group}"


def check_transactional_id(given: str | None, group: str) -> None:
    """Refuse a ``--transactional-id`` / ``CITEMON_TRANSACTIONAL_ID`` that is not the one
    derived from the group. Each input partition's results producer has the ID
    ``<prefix>-<topic>-<partition>``; when a replica freezes past its session timeout, the
    partition's next owner initialises the same ID and the broker fences the frozen one's open
    transaction. A per-replica prefix gives the new owner a different ID, nothing is fenced, and
    the frozen replica's answers are committed twice (measured: 4 of 60 answers)."""
    derived = derived_transactional_id(group)
    if given is None or given in ("", derived):
        return
    raise ValueError(
        f"--transactional-id / CITEMON_TRANSACTIONAL_ID {given!r} is refused: the prefix must be "
        f"the same on every replica of consumer group {group!r}, or the broker cannot fence a "
        "frozen replica and answers are counted twice, so citemon derives it from the group "
        f"alone ({derived!r}). Remove the setting (a per-pod value is exactly the mistake); to "
        "separate two deployments give them different --group names."
    )


def _encrypted_key() -> str:
    # Without a password callback OpenSSL prompts on the terminal: a service would hang there
    # (or, with no terminal, fail with "Invalid argument"). Say what is wrong instead.
    raise ConfigError(
        "--ssl-keyfile is encrypted; citemon needs an unencrypted client key "
        "(protect it with file permissions or a mounted secret)"
    )


def add_settings_arguments(
    parser: argparse.ArgumentParser,
    only: Collection[str] | None = None,
    title: str = "kafka, sampling and delivery",
) -> None:
    """The ``citemon run`` flags of the service (or those of the fields in ``only``); each
    overrides its ``CITEMON_*`` env var. The parts' flags: ``Settings.add_arguments(parser,
    parts=True)``."""
    Settings.add_arguments(parser, title=title, only=only)


def settings_from_args(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Build :class:`Settings` from the flags (each defaulting to its env var), the env vars of
    the fields without a flag, then ``overrides``.

    Raises :class:`ConfigError` naming the bad field (and never echoing a secret value).
    """
    return Settings.from_args(args, **overrides)
