"""The judge's ``CITEMON_JUDGE*`` variables, read through pydantic-settings (judges/settings.py)."""

from __future__ import annotations

import argparse

import pytest

from citemon.judges import add_judge_arguments
from citemon.judges.settings import JUDGE_ENV_VARS, JudgeEnvironment


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_judge_arguments(parser)
    return parser.parse_args(list(argv))


def test_variables_are_read_exactly_as_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEMON_JUDGE_MODEL", "m-7b")
    monkeypatch.setenv("citemon_judge_label", "lower-case is another variable")
    monkeypatch.setenv("CITEMON_JUDGE_THRESHOLD", "")
    env = JudgeEnvironment()
    assert env.get("CITEMON_JUDGE_MODEL", "judge") == "m-7b"
    assert env.get("CITEMON_JUDGE_LABEL", "entailment") == "entailment"
    assert env.get("CITEMON_JUDGE_THRESHOLD", "0.5") == ""  # set but empty stays empty
    with pytest.raises(KeyError, match="CITEMON_JUDGE_NOPE is not a documented judge variable"):
        env.get("CITEMON_JUDGE_NOPE", "")


def test_flags_win_over_variables_and_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CITEMON_JUDGE_CONCURRENCY", "3")
    monkeypatch.setenv("CITEMON_JUDGE_MODEL", "from-env")
    args = _parse("--judge-model", "from-flag")
    assert (args.judge_concurrency, args.judge_model) == (3, "from-flag")
    monkeypatch.setenv("CITEMON_JUDGE_CONCURRENCY", "many")
    with pytest.raises(SystemExit) as stop:
        _parse()
    assert stop.value.code == 2
    assert "'many' is not a whole number (from the flag or CITEMON_JUDGE_CONCURRENCY)" in (
        capsys.readouterr().err
    )


def test_every_variable_is_documented_once() -> None:
    assert len(JUDGE_ENV_VARS) == len(set(JUDGE_ENV_VARS)) == 15
    assert all(v.startswith("CITEMON_JUDGE") for v in JUDGE_ENV_VARS)
    env = JudgeEnvironment(CITEMON_JUDGE_API_KEY="sk-secret")  # type: ignore[call-arg]
    assert env.api_key == "sk-secret"
    assert "sk-secret" not in repr(env) and "sk-secret" not in str(env)
