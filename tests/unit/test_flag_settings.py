"""The one settings mechanism (citemon._core.settings): every flag of every model has its
``CITEMON_*`` variable, the flag wins, a bad variable is the usage error a bad flag is."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Final

import pytest
from pydantic import Field, ValidationError
from pydantic_settings import SettingsConfigDict

from citemon._commands._options import scoring_options
from citemon._core.settings import MAIN, Exclusive, Flag, FlagSettings, field_of
from citemon._engine.settings import ScoringSettings
from citemon._passages.settings import PassageStoreSettings
from citemon._service.settings import Settings
from citemon.cli import COMMANDS, build_parser, main
from citemon.judges.settings import JudgeSettings

MODELS: tuple[type[FlagSettings], ...] = (Settings, JudgeSettings, ScoringSettings)


def test_every_variable_is_citemons_and_names_one_field() -> None:
    variables = [v for model in MODELS for v in model.env_vars().values()]
    assert all(v.startswith("CITEMON_") and v == v.upper() for v in variables)
    assert len(variables) == len(set(variables))
    assert ScoringSettings.env_vars() == {
        "policy": "CITEMON_POLICY",
        "decompose": "CITEMON_DECOMPOSE",
        "marker_pattern": "CITEMON_MARKER_PATTERN",
        "passage_id_keys": "CITEMON_PASSAGE_ID_KEYS",
        "overlap_tokens": "CITEMON_OVERLAP_TOKENS",
        "max_judge_calls_per_answer": "CITEMON_MAX_JUDGE_CALLS_PER_ANSWER",
    }


def test_run_help_names_the_variable_of_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps help lines
    for model in MODELS:
        for row in model.FLAGS:
            assert f"[env {model.env_var(row.field)}]" in text, row.flag
    assert len(Settings.FLAGS) + len(JudgeSettings.FLAGS) + len(ScoringSettings.FLAGS) == 58


def test_flag_then_variable_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    parse = build_parser().parse_args
    assert scoring_options(parse(["score", "-"])).policy == "any_of"
    monkeypatch.setenv("CITEMON_POLICY", "single")
    monkeypatch.setenv("CITEMON_OVERLAP_TOKENS", "7")
    options = scoring_options(build_parser().parse_args(["score", "-"]))
    assert (options.policy, options.overlap_tokens) == ("single", 7)
    options = scoring_options(build_parser().parse_args(["score", "-", "--policy", "any_of"]))
    assert (options.policy, options.overlap_tokens) == ("any_of", 7)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CITEMON_SAMPLE_RATE", "half", "--sample-rate: 'half' is not a number "
         "(from the flag or CITEMON_SAMPLE_RATE)"),
        ("CITEMON_METRICS_PORT", "9464.5", "--metrics-port: '9464.5' is not a whole number "
         "(from the flag or CITEMON_METRICS_PORT)"),
        ("CITEMON_OVERLAP_TOKENS", "many", "--overlap-tokens: 'many' is not a whole number "
         "(from the flag or CITEMON_OVERLAP_TOKENS)"),
        ("CITEMON_MAX_JUDGE_CALLS_PER_ANSWER", "-1", "'-1' is not a whole number >= 0 "
         "(from the flag or CITEMON_MAX_JUDGE_CALLS_PER_ANSWER)"),
    ],
)  # fmt: skip
def test_a_bad_variable_is_a_usage_error_naming_it(
    variable: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        main(["run", "--metrics-port", "0"] if variable != "CITEMON_METRICS_PORT" else ["run"])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_value_the_model_refuses_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CITEMON_POLICY", "most")
    assert main(["score", "-"]) == 2
    err = capsys.readouterr().err
    assert "invalid settings: policy: Input should be 'any_of' or 'single'" in err
    assert "Traceback" not in err


def test_the_judge_api_key_is_a_variable_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEMON_JUDGE_API_KEY", "sk-never-shown")
    settings = JudgeSettings.from_args(build_parser().parse_args(["score", "-"]))
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "sk-never-shown"
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "sk-never-shown" not in text
    assert not any(row.field == "api_key" for row in JudgeSettings.FLAGS)  # never a flag


@pytest.mark.parametrize(
    ("model", "secret", "file"),
    [
        (JudgeSettings, "api_key", "api_key_file"),
        (Settings, "kafka_password", "kafka_password_file"),
        (PassageStoreSettings, "passage_store_password", "passage_store_password_file"),
        (PassageStoreSettings, "passage_store_token", "passage_store_token_file"),
    ],
)
def test_a_settings_model_built_in_code_never_echoes_its_secret(
    model: type[FlagSettings], secret: str, file: str, tmp_path: Path
) -> None:
    # Both sources at once is refused; the error must not print the input (pydantic would,
    # cut to its first characters: a short secret whole, a long one's start).
    with pytest.raises(ValidationError) as caught:
        model.model_validate({secret: "s3cr3t", file: tmp_path / "key"})
    assert "not both" in str(caught.value)
    for text in (str(caught.value), repr(caught.value)):
        assert "input_value" not in text and "s3c" not in text


class _Renamed(FlagSettings):
    """A model with a renamed switch, as a settings rename leaves it."""

    FLAGS = (Flag("--loud", "loud", "say more", bool, aliases=("--noisy",)),)
    loud: bool = False


def test_a_renamed_switch_keeps_its_old_flag_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    parser = argparse.ArgumentParser()
    _Renamed.add_arguments(parser, title="t")
    with caplog.at_level(logging.WARNING, logger="citemon._core.settings"):
        assert _Renamed.from_args(parser.parse_args(["--noisy"])).loud is True
        assert _Renamed.from_args(parser.parse_args([])).loud is False
    assert [r.getMessage() for r in caplog.records] == [
        "--noisy is deprecated: use --loud (same meaning)"
    ]


def test_a_command_flag_has_its_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CITEMON_SCORE_FORMAT", "json")
    monkeypatch.setenv("CITEMON_SELFTEST_MIN_DROP", "0.2")
    monkeypatch.setenv("CITEMON_CALIBRATE_NO_THRESHOLD", "true")
    from citemon._commands.calibrate import CalibrateSettings
    from citemon._commands.score import ScoreSettings
    from citemon._commands.selftest import SelftestSettings

    parse = build_parser().parse_args
    assert ScoreSettings.from_args(parse(["score", "-"])).format == "json"
    assert ScoreSettings.from_args(parse(["score", "-", "--format", "table"])).format == "table"
    assert SelftestSettings.from_args(parse(["selftest", "-"])).min_drop == 0.2
    assert CalibrateSettings.from_args(parse(["calibrate", "--labels", "x"])).no_threshold is True
    with pytest.raises(SystemExit):
        parse(["score", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "[env CITEMON_SCORE_CONCURRENCY]" in help_text


class _Query(FlagSettings):
    """A command's query, as ``inspect`` and ``compare`` have one: every kind of row."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_QUERY_", extra="ignore", validate_default=True, frozen=True
    )
    FLAGS = (
        Flag("input", "input", "the file", env=False, positional=True, metavar="FILE"),
        Flag("--base", "base", "the version before", env=False, required=True),
        Flag("--service", "service", "a service (repeatable)", env=False, repeat=True),
        Flag("--partition", "partition", "a partition", int, env=False, repeat=True),
        Flag("--url", "url", "read here", env=False, group=MAIN),
        Flag("--file", "file", "or here", env=False, group=MAIN),
        Flag("--offset", "offset", "from N", int, env=False, group="where"),
        Flag("--last", "last", "the last N", int, env=False, group="where"),
        Flag("--follow", "follow", "keep going", bool, env=False, group="where"),
        Flag("--port", "port", "serve here", int),
    )
    EXCLUSIVE = (Exclusive(("url", "file"), required=True), Exclusive(("offset", "last")))

    input: str
    base: str
    service: list[str] = Field(default_factory=list)
    partition: list[int] = Field(default_factory=list)
    url: str | None = None
    file: str | None = None
    offset: int | None = None
    last: int | None = None
    follow: bool = False
    port: int = 9000


def _query_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="q")
    _Query.add_arguments(parser, title="query")
    return parser


def test_every_kind_of_row_becomes_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    # Flag-only fields ignore a variable of their name; the one config field reads its own.
    for name in ("INPUT", "BASE", "SERVICE", "PARTITION", "URL", "OFFSET", "FOLLOW"):
        monkeypatch.setenv(f"CITEMON_QUERY_{name}", "7")
    monkeypatch.setenv("CITEMON_QUERY_PORT", "9100")
    argv = ["in.jsonl", "--base", "v1", "--service", "a", "--service", "b", "--url", "u"]
    argv += ["--partition", "3", "--partition", "0", "--last", "5", "--follow"]
    args = _query_parser().parse_args(argv)
    query = _Query.from_args(args)
    assert query.model_dump() == {
        "input": "in.jsonl", "base": "v1", "service": ["a", "b"], "partition": [3, 0],
        "url": "u", "file": None, "offset": None, "last": 5, "follow": True, "port": 9100,
    }  # fmt: skip
    bare = _Query.from_args(_query_parser().parse_args(["-", "--base", "v", "--file", "f"]))
    assert (bare.service, bare.partition, bare.offset, bare.follow) == ([], [], None, False)
    assert _Query.env_vars() == {"port": "CITEMON_QUERY_PORT"}
    assert _Query.flag_only() == {f for f in _Query.model_fields if f != "port"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-", "--url", "u"], "the following arguments are required: --base"),
        (["-", "--base", "v"], "one of the arguments --url --file is required"),
        (["-", "--base", "v", "--url", "u", "--file", "f"],
         "--file: not allowed with argument --url"),
        (["-", "--base", "v", "--url", "u", "--offset", "1", "--last", "2"],
         "argument --last: not allowed with argument --offset"),
        (["-", "--base", "v", "--url", "u", "--partition", "x"],
         "argument --partition: 'x' is not a whole number (from the flag)"),
        # Empty text passes unconverted only where a variable may mean "unset": a flag-only
        # row converts it as argparse's type= did (it was "invalid settings: partitions.0").
        (["-", "--base", "v", "--url", "u", "--partition", ""],
         "argument --partition: '' is not a whole number (from the flag)"),
        (["-", "--base", "v", "--url", "u", "--offset", ""],
         "argument --offset: '' is not a whole number (from the flag)"),
        (["--base", "v", "--url", "u"], "the following arguments are required: FILE"),
    ],
)  # fmt: skip
def test_a_bad_query_is_a_usage_error_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _query_parser().parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_rows_go_to_their_help_groups_and_name_their_variable_only_if_they_have_one() -> None:
    parser = _query_parser()
    groups = {
        group.title: [a.dest for a in group._group_actions] for group in parser._action_groups
    }
    assert groups == {
        "positional arguments": ["input"],
        "options": ["help", "url", "file"],
        "query": ["base", "service", "partition", "port"],
        "where": ["offset", "last", "follow"],
    }
    text = " ".join(parser.format_help().split())
    assert "serve here [env CITEMON_QUERY_PORT]" in text
    assert text.count("[env ") == 1
    backed = {a.dest: field_of(a) for a in parser._actions}
    assert backed.pop("help") is None
    assert backed == {f: (_Query, f) for f in _Query.model_fields}


def test_a_query_row_cannot_have_a_variable() -> None:
    for kind in ({"repeat": True}, {"required": True}, {"positional": True}):
        with pytest.raises(ValueError, match="env=False"):
            Flag("x" if "positional" in kind else "--x", "x", "x", **kind)  # type: ignore[arg-type]


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    """``citemon`` and each command's and subcommand's parser, their flags added (a command's
    are added when it first parses or shows its help)."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    waiting = [("citemon", build_parser())]
    while waiting:
        name, parser = waiting.pop()
        parser.format_help()  # loads a command's module and its flags
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                waiting += [(f"{name} {n}", p) for n, p in action.choices.items()]
    return found


def test_every_flag_of_every_command_is_a_settings_field() -> None:
    """One settings path, kept: an argument added by hand, not by a model's row, fails here."""
    parsers = _every_parser()
    assert len(parsers) == 1 + len(COMMANDS) + 5  # citemon, its commands, review's five
    plain = []
    for name, parser in parsers:
        for action in parser._actions:
            if isinstance(
                action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
            ):
                continue
            backed = field_of(action)
            if backed is None or backed[1] not in backed[0].model_fields:
                plain.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert plain == []


def _models() -> set[type[FlagSettings]]:
    for name, _ in _every_parser():  # imports every command's module, so every model
        assert name
    found: set[type[FlagSettings]] = set()
    waiting = [FlagSettings]
    while waiting:
        model = waiting.pop()
        for sub in model.__subclasses__():
            waiting.append(sub)
            if sub.__module__.startswith("citemon."):
                found.add(sub)
    return found


# Two fields that are one setting read by two commands: the demo's brokers are run's.
_SHARED: Final = {"CITEMON_BOOTSTRAP_SERVERS": {"Settings", "DemoSettings"}}


def test_every_variable_names_one_field_across_all_models() -> None:
    """``CITEMON_VERSION`` must not mean one thing to inspect and another to pull: every
    variable of every model belongs to one field, and a query (flag only) has none."""
    owners: dict[str, set[str]] = {}
    models = _models()
    assert len(models) == 17  # every command's, its parts', and the shared --log-level's
    for model in models:
        for field, variable in model.env_vars().items():
            owners.setdefault(variable, set()).add(f"{model.__name__}.{field}")
            assert field not in model.flag_only()
    shared = {v: {o.split(".")[0] for o in who} for v, who in owners.items() if len(who) > 1}
    assert shared == _SHARED
    for model in models:
        for row in model.FLAGS:
            if not row.env:
                assert row.field not in model.env_vars()


def test_config_flags_have_their_variable_and_queries_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from citemon._commands.demo import DemoSettings
    from citemon._commands.inspect import InspectSettings
    from citemon._commands.review.pull import PullSettings
    from citemon._commands.review.serve import ServeSettings
    from citemon.cli import CliSettings

    for name, value in {
        "CITEMON_DEMO_METRICS_PORT": "9500",
        "CITEMON_REVIEW_SERVE_PORT": "8123",
        "CITEMON_LOG_LEVEL": "info",
        "CITEMON_TRACE_URL": "https://t/{trace_id}",
        # Queries: none of these is read, whatever a shell has set.
        "CITEMON_VERSION": "v9",
        "CITEMON_SINCE": "1m",
        "CITEMON_SERVICE": "s",
        "CITEMON_LIMIT": "3",
        "CITEMON_RATE": "99",
    }.items():
        monkeypatch.setenv(name, value)
    parse = build_parser().parse_args
    demo = DemoSettings.from_args(parse(["demo"]))
    assert (demo.metrics_port, demo.rate) == (9500, 8.0)
    serve = ServeSettings.from_args(
        parse(["review", "serve", "--set", "s", "--labels", "l", "--reviewer", "r"])
    )
    assert (serve.port, serve.host) == (8123, "127.0.0.1")
    assert CliSettings.from_args(parse(["demo"])).log_level == "INFO"
    inspect = InspectSettings.from_args(parse(["inspect"]))
    assert inspect.trace_url == "https://t/{trace_id}"
    assert (inspect.versions, inspect.since, inspect.services, inspect.limit) == ([], None, [], 20)
    pull = PullSettings.from_args(parse(["review", "pull", "-o", "-", "--version", "v1"]))
    assert (pull.versions, pull.since, pull.output) == (["v1"], None, "-")


@pytest.mark.parametrize("where", ["variable", "flag"])
def test_an_empty_log_level_is_the_default_not_a_traceback(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CITEMON_LOG_LEVEL= (set but empty, as a template leaves it) passed "" to
    # logging.basicConfig, which raised ValueError before any command ran.
    from citemon.cli import CliSettings

    argv = ["demo"]
    if where == "variable":
        monkeypatch.setenv("CITEMON_LOG_LEVEL", "")
    else:
        argv = ["--log-level", "", "demo"]
    level = CliSettings.from_args(build_parser().parse_args(argv)).log_level
    assert level == "WARNING"
    assert logging.getLevelNamesMapping()[level] == logging.WARNING


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inspect", "--limit", ""], "argument --limit: '' is not a whole number (from the flag)"),
        (["review", "pull", "-o", "-", "--size", ""],
         "argument --size: '' is not a whole number (from the flag)"),
        (["demo", "--duration", ""], "argument --duration: '' is not a number (from the flag)"),
    ],
)  # fmt: skip
def test_an_empty_flag_only_number_is_a_usage_error_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_empty_review_page_host_is_this_machine_not_every_interface(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CITEMON_REVIEW_SERVE_HOST= (set but empty) reached the server as "", which binds every
    # interface: the answers and passages under review were open to the network.
    from citemon._commands.review.serve import ServeSettings

    monkeypatch.setenv("CITEMON_REVIEW_SERVE_HOST", "")
    argv = ["review", "serve", "--set", "s", "--labels", "l", "--reviewer", "r"]
    assert ServeSettings.from_args(build_parser().parse_args(argv)).host == "127.0.0.1"
    monkeypatch.setenv("CITEMON_REVIEW_SERVE_HOST", "0.0.0.0")  # every interface: said so
    assert ServeSettings.from_args(build_parser().parse_args(argv)).host == "0.0.0.0"


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_demo_metrics_port_out_of_range_is_refused_before_any_topic(
    port: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It reached Settings(...) only after the demo had created its topics: a pydantic
    # ValidationError traceback, the topics left behind.
    from citemon._commands.demo import DemoSettings
    from citemon._core.errors import ConfigError

    monkeypatch.setenv("CITEMON_DEMO_METRICS_PORT", port)
    with pytest.raises(ConfigError, match="metrics_port"):
        DemoSettings.from_args(build_parser().parse_args(["demo"]))
