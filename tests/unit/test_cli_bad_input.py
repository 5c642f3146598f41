"""Bad input to each CLI command, as a README reader would try it: a clear error, exit status 2
(1 and 3 mean something else to `compare` and `selftest`), no traceback, nothing dropped."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from citemon.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_run_rejects_a_zero_window(capsys: pytest.CaptureFixture[str]) -> None:
    # Was a ValueError traceback (exit 1) from the windowed gauges after start-up began.
    assert main(["run", "--window", "0", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "window" in err and "greater than 0" in err
    assert "Traceback" not in err


def test_run_with_its_metrics_port_taken_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was an OSError traceback (exit 1). The port is checked before Kafka is contacted.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["run", "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
                "--bootstrap-servers", "127.0.0.1:1"]  # fmt: skip
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot serve metrics on 127.0.0.1:{port}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--marker-pattern", "["], "--marker-pattern is not a valid regex"),
        (["--marker-pattern", r"p-\d+"], "--marker-pattern needs a capturing group"),
        (["--overlap-tokens", "0"], "--overlap-tokens must be at least 1"),
        (["--overlap-tokens", "-1"], "--overlap-tokens must be at least 1"),
    ],
)
def test_score_rejects_bad_scoring_flags(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Were: re.error / IndexError tracebacks (exit 1); --overlap-tokens 0 flagged every
    # misattribution of the specimen as a chunk overlap and exited 0.
    assert main(["score", str(EXAMPLES / "specimen.jsonl"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_run_checks_the_marker_pattern_before_contacting_kafka(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--marker-pattern", "(", "--metrics-port", "0",
            "--bootstrap-servers", "127.0.0.1:1"]  # fmt: skip
    assert main(argv) == 2
    assert "--marker-pattern is not a valid regex" in capsys.readouterr().err


def test_compare_on_a_file_that_is_not_scores_is_an_error_not_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was a pydantic traceback with exit status 1, which `compare` documents as "regressed".
    scores = tmp_path / "scores.jsonl"
    scores.write_text("[1, 2]\n", encoding="utf-8")
    assert main(["compare", "--scores", str(scores), "--baseline", "v1", "--candidate", "v2"]) == 2
    err = capsys.readouterr().err
    assert "does not hold per-answer scores" in err and "Traceback" not in err


def test_compare_names_a_version_the_scores_do_not_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = tmp_path / "scores.json"
    assert main(["score", str(EXAMPLES / "sample.jsonl"), "--format", "json"]) == 0
    scores.write_text(capsys.readouterr().out, encoding="utf-8")
    # A typo'd version: still "not enough data" (3), but no longer without a word why.
    argv = [
        "compare",
        "--scores",
        str(scores),
        "--baseline",
        "2026.11.3",
        "--candidate",
        "2026.11.4",
    ]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "no judged claims of version '2026.11.4'" in err
    assert "(versions with claims: 2026.11.3)" in err
    assert "'2026.11.3'" not in err  # the baseline is there: no note about it


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--min-claims", "0"], "--min-claims must be at least 1"),
        (["--min-effect", "-0.1"], "--min-effect must be 0 or more"),
    ],
)
def test_compare_rejects_thresholds_that_would_pass_on_no_data(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # With --min-claims 0 two versions with no claims at all came out "no evidence", exit 0.
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    argv = ["compare", "--scores", str(empty), "--baseline", "a", "--candidate", "b", *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_selftest_reports_bad_lines_and_does_not_call_no_data_a_blind_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was: bad lines dropped without a word, then "FAIL: the judge does not tell the cited
    # passage from the others" with exit 1 — the verdict for a blind judge — on no data at all.
    src = tmp_path / "in.jsonl"
    good = '{"answer": "Kept 90 days. [p-1]", "passages": [{"id": "p-1", "text": "Kept 90 days."}]}'
    src.write_text(f'{good}\nnot json\n{{"answer": "x"}}\n', encoding="utf-8")
    assert main(["selftest", str(src)]) == 2
    err = capsys.readouterr().err
    assert "skipped line 2: not valid JSON" in err
    assert "skipped line 3: passages: Field required" in err
    assert "2 bad input line(s) skipped" in err
    assert "1 answer(s) read, none with two or more differently cited sentences" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert main(["selftest", str(empty)]) == 2


def test_selftest_still_passes_and_fails_on_the_sample(capsys: pytest.CaptureFixture[str]) -> None:
    sample = str(EXAMPLES / "sample.jsonl")
    assert main(["selftest", sample]) == 0
    assert "answers read 49, shuffled 49" in capsys.readouterr().out
    assert main(["selftest", sample, "--judge", "tests.oracles:yes_judge"]) == 1


def _labels(tmp_path: Path) -> Path:
    labels = tmp_path / "labels.jsonl"
    row = '{"claim": "Kept 90 days.", "passage": "Logs are kept 90 days.", "label": "supported"}'
    labels.write_text(row + "\n", encoding="utf-8")
    return labels


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--output", "/nonexistent-dir/calib.json"], "not a file in an existing directory"),
        (["--output", "."], "not a file in an existing directory"),
        (["--limit", "-3"], "--limit must be at least 1"),
        (["--disagreements", "-1"], "--disagreements must be 0 or more"),
    ],
)
def test_calibrate_checks_its_flags_before_judging(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --output into a missing directory was a FileNotFoundError traceback (exit 1) after the
    # whole labels file had been judged; --limit -3 silently used no pairs.
    assert main(["calibrate", "--labels", str(_labels(tmp_path)), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_calibrate_still_writes_its_output(tmp_path: Path) -> None:
    out = tmp_path / "calib.json"
    assert main(["calibrate", "--labels", str(_labels(tmp_path)), "--output", str(out)]) == 0
    assert '"sensitivity"' in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rate", "0"], "--rate must be above 0"),
        (["--rate", "-5"], "--rate must be above 0"),
        (["--interval", "0"], "--interval must be above 0"),
        (["--duration", "6"], "v2 would never ship"),  # default deploy at 2.4 s, traffic 0-2 s
        (["--deploy-at", "-1"], "v2 would never ship"),
    ],
)
def test_demo_refuses_settings_that_break_it_before_touching_kafka(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Were: --rate 0 killed the traffic thread with ZeroDivisionError in silence (1 answer sent,
    # exit 0); --rate -5 sent unpaced; --duration 6 ended without v2 ever shipping, exit 0.
    argv = ["demo", "--bootstrap-servers", "127.0.0.1:1", "--metrics-port", "0", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "cannot reach Kafka" not in err


def test_score_with_a_judge_that_never_answers_says_so_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was: every claim unjudged, accuracy "n/a", nothing on stderr and exit status 0 — a CI
    # step running `citemon score` passed with the judge down.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: connection refused
    argv = ["score", str(EXAMPLES / "specimen.jsonl"), "--judge", "http", "--judge-retries", "0",
            "--judge-base-url", f"http://127.0.0.1:{port}/v1"]  # fmt: skip
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "unjudged 3" in captured.out
    assert "the judge failed on 3 of 3 claim(s)" in captured.err
    assert f"127.0.0.1:{port}/v1/chat/completions" in captured.err
    assert "no claim got a verdict" in captured.err


def test_score_exit_status_is_unchanged_when_the_judge_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["score", str(EXAMPLES / "sample.jsonl")]) == 0
    assert capsys.readouterr().err == ""


def test_score_of_an_empty_input_says_so_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was: an all-"n/a" summary and exit status 0.
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    assert main(["score", str(empty)]) == 1
    captured = capsys.readouterr()
    assert "answers 0" in captured.out
    assert f"citemon: no answers in {empty}" in captured.err


@pytest.mark.parametrize(
    ("env_var", "value", "flag"),
    [
        ("CITEMON_JUDGE_CONCURRENCY", "abc", "--judge-concurrency"),
        ("CITEMON_JUDGE_TIMEOUT", "30s", "--judge-timeout"),
        ("CITEMON_JUDGE_RETRIES", "1.5", "--judge-retries"),
    ],
)
def test_a_garbage_judge_env_var_is_a_usage_error(
    env_var: str, value: str, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was a ValueError traceback while the parser was built, for every command.
    monkeypatch.setenv(env_var, value)
    with pytest.raises(SystemExit) as exited:
        main(["score", str(EXAMPLES / "specimen.jsonl")])
    assert exited.value.code == 2


def test_a_garbage_judge_env_var_message_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CITEMON_JUDGE_CONCURRENCY", "abc")
    with pytest.raises(SystemExit):
        main(["score", str(EXAMPLES / "specimen.jsonl")])
    err = capsys.readouterr().err
    assert "--judge-concurrency: 'abc' is not a whole number" in err
    assert "CITEMON_JUDGE_CONCURRENCY" in err


@pytest.mark.parametrize("url", ["not-a-url", "ftp://judge/v1", "http:///v1"])
def test_a_judge_base_url_that_is_not_absolute_http_is_refused_up_front(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was accepted; every claim then failed at request time and came out unjudged.
    argv = ["score", str(EXAMPLES / "specimen.jsonl"), "--judge", "http", "--judge-base-url", url]
    assert main(argv) == 2
    assert "must be absolute, http:// or https://" in capsys.readouterr().err
