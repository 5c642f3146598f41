"""Settings: env vars, flags over env, validation, and secrets that never leak."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from citemon._core.errors import ConfigError
from citemon._service.settings import (
    Settings,
    add_settings_arguments,
    parse_duration_s,
    settings_from_args,
)
from citemon.cli import build_parser

SECRET = "s3cr3t-Pa55word"


def _args(*flags: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["run", *flags])


def test_defaults_match_the_design() -> None:
    s = Settings()
    assert (s.topic, s.group, s.dlq_topic, s.metrics_port) == (
        "otlp_spans",
        "citemon",
        "otlp_spans.dlq",
        9464,
    )
    assert s.results_topic is None
    assert s.drain_timeout_s == 30.0
    assert s.window == 900.0


def test_env_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEMON_TOPIC", "from-env")
    monkeypatch.setenv("CITEMON_DRAIN_TIMEOUT_S", "12")
    monkeypatch.setenv("CITEMON_SAMPLE_RATE", "0.25")
    monkeypatch.setenv("CITEMON_WINDOW", "5m")
    s = settings_from_args(_args("--sample-rate", "0.5", "--max-inflight-answers", "7"))
    assert s.topic == "from-env"
    assert s.drain_timeout_s == 12.0
    assert s.sample_rate == 0.5  # the flag wins
    assert s.max_inflight_answers == 7
    assert s.window == 300.0
    s = settings_from_args(_args("--topic", "flag", "--drain-timeout", "3"))
    assert (s.topic, s.drain_timeout_s) == ("flag", 3.0)


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (("--sample-rate", "1.5"), "sample_rate"),
        (("--max-inflight-answers", "0"), "max_inflight_answers"),
        (("--security-protocol", "SASL_SSL"), "sasl_mechanism"),
        (("--security-protocol", "CARRIER_PIGEON"), "security_protocol"),
    ],
)
def test_invalid_settings_name_the_field(flags: tuple[str, ...], field: str) -> None:
    with pytest.raises(ConfigError, match=field.split("_")[0]):
        settings_from_args(_args(*flags))


def test_durations() -> None:
    assert parse_duration_s("15m") == 900
    assert parse_duration_s("250ms") == 0.25
    assert parse_duration_s("2h") == 7200
    assert parse_duration_s("42") == 42
    with pytest.raises(ValueError):
        parse_duration_s("soon")


def test_sasl_password_from_env_never_in_repr_logs_or_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CITEMON_KAFKA_PASSWORD", SECRET)
    s = settings_from_args(
        _args(
            "--security-protocol",
            "SASL_PLAINTEXT",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--kafka-username",
            "citemon",
        )
    )
    options = s.kafka_options()
    assert options["sasl_plain_password"] == SECRET
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "citemon"
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("citemon.run").info("settings: %s", s.describe())
    for text in (repr(s), str(s), str(s.describe()), caplog.text, s.model_dump_json()):
        assert SECRET not in text
    assert s.describe()["kafka_password"] == "set"
    # A validation error elsewhere must not echo the secret either.
    with pytest.raises(ConfigError) as info:
        settings_from_args(_args("--security-protocol", "SASL_PLAINTEXT"))
    assert SECRET not in str(info.value)


def test_password_file_and_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CITEMON_KAFKA_PASSWORD", raising=False)
    secret_file = tmp_path / "password"
    secret_file.write_text(SECRET + "\n")
    s = settings_from_args(
        _args(
            "--security-protocol",
            "SASL_PLAINTEXT",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--kafka-username",
            "u",
            "--kafka-password-file",
            str(secret_file),
        )
    )
    assert s.kafka_options()["sasl_plain_password"] == SECRET
    assert SECRET not in repr(s)
    monkeypatch.setenv("CITEMON_KAFKA_PASSWORD", "other")
    with pytest.raises(ConfigError, match="not both"):
        settings_from_args(_args("--kafka-password-file", str(secret_file)))
    # TLS: a missing CA file is a config error, not a traceback.
    monkeypatch.delenv("CITEMON_KAFKA_PASSWORD")
    s = settings_from_args(
        _args("--security-protocol", "SSL", "--ssl-cafile", str(tmp_path / "none.pem"))
    )
    with pytest.raises(ConfigError, match="TLS"):
        s.kafka_options()
    with pytest.raises(ConfigError, match="together"):
        settings_from_args(_args("--ssl-certfile", str(tmp_path / "c.pem")))


def test_a_transactional_id_other_than_the_groups_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prefix comes from the group alone: a per-pod value, by flag or by env, is refused
    with the reason (a frozen replica would count its answers twice); the derived value itself
    (a config that spelled it out) still starts."""
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    args = parser.parse_args(["--group", "rag", "--transactional-id", "citemon-pod-7"])
    with pytest.raises(ConfigError) as err:
        settings_from_args(args)
    message = str(err.value)
    assert "'citemon-pod-7' is refused" in message
    assert "consumer group 'rag'" in message and "counted twice" in message
    assert "('citemon-rag')" in message
    monkeypatch.setenv("CITEMON_TRANSACTIONAL_ID", "pod-8")
    with pytest.raises(ConfigError, match="'pod-8' is refused"):
        settings_from_args(parser.parse_args(["--group", "rag"]))
    monkeypatch.setenv("CITEMON_TRANSACTIONAL_ID", "citemon-rag")
    spelled = settings_from_args(parser.parse_args(["--group", "rag"]))
    assert spelled.transactional_id_for("otlp_spans", 2) == "citemon-rag-otlp_spans-2"
    monkeypatch.setenv("CITEMON_TRANSACTIONAL_ID", "")
    assert settings_from_args(parser.parse_args(["--group", "rag"])).transactional_id_prefix == (
        "citemon-rag"
    )
