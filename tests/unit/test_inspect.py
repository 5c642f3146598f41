"""``citemon inspect`` on scores files: worst-first order, every filter, the JSON and table
shapes, bad input and bad flags; and the results record's capped ``excerpts``."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from citemon._commands._inspection import (
    SEVERITY,
    Filter,
    Worst,
    findings,
    parse_result,
    read_results_file,
)
from citemon._core.records import AnswerScore, ClaimResult
from citemon._demo.data import specimen
from citemon._engine.excerpts import MAX_EXCERPT_CHARS, MAX_EXCERPTS, excerpt_of, excerpts
from citemon._engine.scoring import Scorer
from citemon._service.outputs import result_message
from citemon._service.settings import Settings
from citemon.cli import main
from citemon.judges.lexical import LexicalJudge

T0 = 1_764_576_000_000  # 2025-12-01T08:00:00Z


def claim(n: int, verdict: str, **extra: Any) -> dict[str, Any]:
    return {
        "sentence": n,
        "text": f"claim {n} ({verdict})",
        "cited_ids": ["p-1"],
        "verdict": verdict,
        **extra,
    }


def record(rid: str, minute: int, claims: list[dict[str, Any]], **labels: Any) -> dict[str, Any]:
    base = {"service": "bot", "version": "v1", "environment": "prod"}
    return {
        "id": rid,
        "trace_id": f"{int(rid.strip('a')):032x}",
        "span_id": f"{int(rid.strip('a')):016x}",
        **base,
        **labels,
        "claims": claims,
        "timestamp": T0 + minute * 60_000,
    }


RECORDS = [
    record("a1", 0, [claim(0, "correct"), claim(1, "unsupported"), claim(2, "dangling")]),
    record("a2", 1, [claim(0, "misattributed", supported_by=["p-2"])], version="v2"),
    record("a3", 2, [claim(0, "multi_hop"), claim(1, "unsupported")], environment="staging"),
    record(
        "a4",
        3,
        [claim(0, "misattributed", supported_by=["p-3"]), claim(1, "uncited")],
        service="other-bot",
    ),
    record("a5", 4, [claim(0, "unjudged"), claim(1, "dangling")], environment=None),
]


@pytest.fixture
def scores(tmp_path: Path) -> Path:
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def shown(out: str) -> list[tuple[str, str, int]]:
    return [
        (d["verdict"], d["answer_id"], d["sentence"]) for d in map(json.loads, out.splitlines())
    ]


def test_worst_first_then_newest_first_within_a_verdict(
    scores: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--input", str(scores), "--format", "json", "--verdict", "all")
    assert code == 0
    assert shown(out) == [
        ("misattributed", "a4", 0),  # minute 3: newer than a2
        ("misattributed", "a2", 0),
        ("unsupported", "a3", 1),
        ("unsupported", "a1", 1),
        ("multi_hop", "a3", 0),
        ("dangling", "a5", 1),
        ("dangling", "a1", 2),
        ("uncited", "a4", 1),
        ("unjudged", "a5", 0),
        ("correct", "a1", 0),
    ]
    assert "read 5 answer(s)" in err and "10 claim(s) matched" in err


def test_default_shows_the_failed_citations_only(
    scores: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, err = run(capsys, "--input", str(scores), "--format", "json")
    assert [v for v, _, _ in shown(out)] == ["misattributed"] * 2 + ["unsupported"] * 2 + [
        "multi_hop"
    ] + ["dangling"] * 2
    assert "(misattributed 2 · unsupported 2 · multi_hop 1 · dangling 2)" in err


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--service", "other-bot"], [("misattributed", "a4", 0)]),
        (["--version", "v2"], [("misattributed", "a2", 0)]),
        (["--environment", "staging"], [("unsupported", "a3", 1), ("multi_hop", "a3", 0)]),
        # No environment on the span is the metrics' "unknown" label, so the alert's line finds it.
        (["--environment", "unknown"], [("dangling", "a5", 1)]),
        # "other" is the metrics' overflow label: it cannot name versions, so it filters nothing.
        (
            ["--version", "other", "--verdict", "misattributed"],
            [("misattributed", "a4", 0), ("misattributed", "a2", 0)],
        ),
        (["--verdict", "uncited"], [("uncited", "a4", 1)]),
        (
            ["--verdict", "unjudged", "--verdict", "correct"],
            [("unjudged", "a5", 0), ("correct", "a1", 0)],
        ),
        (["--trace-id", f"{3:032X}"], [("unsupported", "a3", 1), ("multi_hop", "a3", 0)]),
        (
            ["--since", "2025-12-01T08:01:00Z", "--until", "2025-12-01T08:03:00Z"],
            [("misattributed", "a2", 0), ("unsupported", "a3", 1), ("multi_hop", "a3", 0)],
        ),
        (
            ["--service", "bot", "--version", "v1", "--environment", "prod"],
            [("unsupported", "a1", 1), ("dangling", "a1", 2)],
        ),
        (
            ["--limit", "3"],
            [("misattributed", "a4", 0), ("misattributed", "a2", 0), ("unsupported", "a3", 1)],
        ),
    ],
)
def test_filters(
    scores: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    expected: list[tuple[str, str, int]],
) -> None:
    code, out, _ = run(capsys, "--input", str(scores), "--format", "json", *flags)
    assert code == 0
    assert shown(out) == expected


def test_limit_keeps_the_worst_of_many_and_counts_the_rest() -> None:
    rows = [
        record(f"a{i}", i, [claim(0, ("dangling", "multi_hop", "misattributed")[i % 3])])
        for i in range(1, 301)
    ]
    worst = Worst(5)
    for seq, r in enumerate(rows):
        for f in findings(
            parse_result(json.dumps(r)),
            timestamp_ms=None,
            source="x",
            position=(0, seq),
            where=Filter(),
        ):
            worst.add(f)
    kept = [(f.claim.verdict, f.record.id) for f in worst.sorted()]
    # misattributed are i % 3 == 2: the newest five are 299, 296, 293, 290, 287.
    assert kept == [("misattributed", f"a{i}") for i in (299, 296, 293, 290, 287)]
    assert worst.total == 300 and worst.matched == {
        "dangling": 100,
        "multi_hop": 100,
        "misattributed": 100,
    }


def test_json_line_carries_ids_excerpts_reason_and_trace_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    r = record(
        "a7",
        0,
        [
            claim(
                0,
                "misattributed",
                cited_ids=["p-1"],
                supported_by=["p-2"],
                reason="no",
                faithful=True,
            )
        ],
    )
    r["excerpts"] = {"p-1": "the cited text", "p-2": "the right text", "p-9": "not this claim's"}
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(r) + "\n", encoding="utf-8")
    monkeypatch.setenv("CITEMON_TRACE_URL", "https://tempo.example/trace/{trace_id}")
    code, out, _ = run(capsys, "--input", str(path), "--format", "json")
    assert code == 0
    assert json.loads(out) == {
        "verdict": "misattributed",
        "claim": "claim 0 (misattributed)",
        "sentence": 0,
        "cited_ids": ["p-1"],
        "resolved_ids": [],  # a record written before citemon kept them
        "supported_by": ["p-2"],
        "overlap": False,
        "irrelevant_ids": [],
        "faithful": True,
        "reason": "no",
        "service": "bot",
        "version": "v1",
        "environment": "prod",
        "trace_id": f"{7:032x}",
        "span_id": f"{7:016x}",
        "answer_id": "a7",
        "timestamp": "2025-12-01T08:00:00Z",
        "source": f"{path}:1",
        "excerpts": {"p-1": "the cited text", "p-2": "the right text"},
        "trace_url": f"https://tempo.example/trace/{7:032x}",
    }


def test_table_shows_the_passage_that_should_have_been_cited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = record("a7", 0, [claim(0, "misattributed", supported_by=["p-2"], reason="24 not in p-1")])
    r["excerpts"] = {"p-1": "Retries run for 12 hours.", "p-2": "Retries run for up to 24 hours."}
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(r) + "\n", encoding="utf-8")
    code, out, _ = run(capsys, "--input", str(path), "--trace-url", "https://t/{trace_id}")
    assert code == 0
    assert out.splitlines() == [
        f"MISATTRIBUTED 2025-12-01T08:00:00Z  bot v1 prod  trace {7:032x}",
        '    "claim 0 (misattributed)"',
        '    cited p-1: "Retries run for 12 hours."',
        '    should cite p-2: "Retries run for up to 24 hours."',
        "    reason: 24 not in p-1",
        f"    https://t/{7:032x}",
    ]


def test_table_shows_what_a_metadata_id_resolved_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A marker that named documents by a metadata ID (LlamaIndex nodes are UUIDs): the
    citation as the model wrote it, then the documents it named."""
    c = claim(0, "misattributed", cited_ids=["kb-7"], resolved_ids=["u-1"], supported_by=["u-2"])
    r = record("a7", 0, [c])
    r["excerpts"] = {"u-1": "Retries run for 12 hours.", "u-2": "Retries run for up to 24 hours."}
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(r) + "\n", encoding="utf-8")
    code, out, _ = run(capsys, "--input", str(path))
    assert code == 0
    assert out.splitlines()[1:5] == [
        '    "claim 0 (misattributed)"',
        "    cited kb-7",
        '    resolved to u-1: "Retries run for 12 hours."',
        '    should cite u-2: "Retries run for up to 24 hours."',
    ]


async def test_reads_a_citemon_score_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    score = await Scorer(LexicalJudge()).score(specimen())
    path = tmp_path / "score.json"
    doc = {"summary": {}, "answers": [score.model_dump(mode="json")]}
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    code, out, err = run(capsys, "--input", str(path), "--format", "json", "--verdict", "all")
    assert code == 0
    # the same document on one line reads the same
    one_line = tmp_path / "score-one-line.json"
    one_line.write_text(json.dumps(doc), encoding="utf-8")
    code2, out2, _ = run(capsys, "--input", str(one_line), "--format", "json", "--verdict", "all")

    def unsourced(text: str) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in json.loads(x).items() if k != "source"} for x in text.splitlines()
        ]

    assert code2 == 0 and unsourced(out2) == unsourced(out)
    got = [
        (d["verdict"], d["sentence"], d["cited_ids"], d["supported_by"])
        for d in map(json.loads, out.splitlines())
    ]
    # The documented order, worst first (docs/inspect.md), pinned as one line.
    assert (
        " ".join(SEVERITY)
        == "misattributed unsupported multi_hop dangling uncited unjudged correct"
    )
    expected = sorted(
        ((c.verdict, c.sentence, c.cited_ids, c.supported_by) for c in score.claims),
        key=lambda t: (SEVERITY.index(t[0]), -t[1]),
    )
    assert sorted(got, key=lambda t: (t[0], t[1])) == sorted(expected, key=lambda t: (t[0], t[1]))
    assert [g[0] for g in got] == [e[0] for e in expected]
    assert "read 1 answer(s)" in err


def test_bad_lines_are_reported_by_number_and_the_rest_still_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps(RECORDS[1]),
        "{not json",
        json.dumps({"id": "x"}),
        "",
        json.dumps(RECORDS[3]),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "--input", str(path), "--format", "json")
    assert code == 1
    assert shown(out) == [("misattributed", "a4", 0), ("misattributed", "a2", 0)]
    assert f"skipped {path}: line 2: not valid JSON" in err
    assert f"skipped {path}: line 3: not a results record: no 'claims'" in err
    assert "2 bad record(s) skipped" in err


def test_since_on_a_file_without_timestamps_says_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = {k: v for k, v in RECORDS[1].items() if k != "timestamp"}
    path = tmp_path / "bare.jsonl"
    path.write_text(json.dumps(bare) + "\n" + json.dumps(RECORDS[3]) + "\n", encoding="utf-8")
    code, out, err = run(
        capsys, "--input", str(path), "--format", "json", "--since", "2025-12-01T07:00:00Z"
    )
    assert code == 0
    assert shown(out) == [("misattributed", "a4", 0)]
    assert "1 answer(s) carry no timestamp and were left out by --since/--until" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--since", "yesterday"], "--since 'yesterday': not a duration"),
        (["--until", "2025-13-01"], "--until '2025-13-01': not a duration"),
        (["--limit", "-1"], "--limit must be 0 (all) or more"),
        (["--last", "0"], "--last must be at least 1"),
        (["--offset", "-3"], "--offset must be 0 or more"),
        (["--follow"], "--follow reads the results topic; not with --input"),
        (["--last", "5"], "--last reads the results topic; not with --input"),
        (["--since", "10m", "--until", "20m"], "--until '20m' is not after --since '10m'"),
        (["--trace-url", "https://t/trace"], "--trace-url 'https://t/trace' has no {trace_id}"),
        (["--trace-url", "https://t/{span}"], "--trace-url: only {trace_id} may be substituted"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    scores: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    code, out, err = run(capsys, "--input", str(scores), *flags)
    assert code == 2 and out == ""
    assert message in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--since", "1h", "--offset", "3"], "--since and --offset both say where to start"),
        (["--follow", "--until", "5m"], "--until ends the read; not with --follow"),
        (["--offset", "1", "--last", "2"], "argument --last: not allowed with argument --offset"),
        (["--verdict", "wrong"], "argument --verdict: invalid choice: 'wrong'"),
        (
            ["--bootstrap-servers", "127.0.0.1:9092", "--security-protocol", "TLS"],
            "security_protocol",
        ),
    ],
)
def test_bad_topic_flags_exit_2_before_connecting(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    try:
        code = main(["inspect", *flags])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert message in err


def test_an_unreachable_broker_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Loopback port 1: connection refused at once.
    code = main(["inspect", "--bootstrap-servers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "citemon: error: cannot connect to Kafka at 127.0.0.1:1" in err
    assert "Traceback" not in err


def test_reads_standard_input(
    scores: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(scores.read_text(encoding="utf-8")))
    code, out, err = run(capsys, "--input", "-", "--format", "json", "--verdict", "dangling")
    assert code == 0
    assert shown(out) == [("dangling", "a5", 1), ("dangling", "a1", 2)]
    assert "read 5 answer(s) from -" in err


def test_a_missing_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--input", str(tmp_path / "nope.jsonl"))
    assert code == 2 and f"no such file: {tmp_path / 'nope.jsonl'}" in err


# -- excerpts in the results record -----------------------------------------------------------


def test_excerpts_are_capped_and_cover_cited_and_supporting_passages_only() -> None:
    score = AnswerScore(
        claims=[
            ClaimResult(sentence=0, text="a", cited_ids=["p-1", "p-9"], verdict="dangling"),
            ClaimResult(
                sentence=1,
                text="b",
                cited_ids=["p-2"],
                verdict="misattributed",
                supported_by=["p-3", "p-1"],
            ),
        ]
    )
    passages = {"p-1": "x" * 50, "p-2": "short", "p-3": "y" * 10, "p-4": "never cited"}
    assert excerpts(score, passages, 10) == {
        "p-1": "x" * 9 + "…",
        "p-2": "short",
        "p-3": "y" * 10,  # exactly the cap: not cut
    }
    assert list(excerpts(score, passages, 10)) == ["p-1", "p-2", "p-3"]
    assert excerpts(score, passages, 0) == {}
    # However many passages the claims name, a record carries at most MAX_EXCERPTS of them.
    many = AnswerScore(
        claims=[
            ClaimResult(
                sentence=0,
                text="a",
                verdict="misattributed",
                cited_ids=["p-0"],
                supported_by=[f"p-{i}" for i in range(1, 100)],
            )
        ]
    )
    texts = {f"p-{i}": "é" * 4000 for i in range(100)}
    capped = excerpts(many, texts, 4000)
    assert list(capped) == [f"p-{i}" for i in range(MAX_EXCERPTS)]
    assert len(json.dumps(capped, ensure_ascii=False).encode()) < 1024 * 1024 // 2
    assert excerpt_of("ab cd", 4) == "ab…"


async def test_results_record_carries_the_excerpts_of_the_scored_passages() -> None:
    score = await Scorer(LexicalJudge()).score(specimen())
    passages = specimen().passage_map()
    for chars, expected_len in ((40, 40), (0, None)):
        settings = Settings(results_topic="r", results_excerpt_chars=chars)
        message = result_message(settings, score, "00f067aa0ba902b7")
        assert message is not None
        body = json.loads(message.value)
        assert body["span_id"] == "00f067aa0ba902b7"
        assert body["claims"] == [c.model_dump(mode="json") for c in score.claims]
        if expected_len is None:
            assert "excerpts" not in body
            continue
        referenced = {i for c in score.claims for i in (*c.cited_ids, *c.supported_by)}
        assert set(body["excerpts"]) == referenced == {"p-3310", "p-3312"}  # lexical judge
        for pid, text in body["excerpts"].items():
            assert len(text) <= expected_len
            assert text == excerpt_of(passages[pid], chars)
        # and a file of such records reads back with them
        ((_, back),) = list(read_results_file([message.value.decode()]))
        assert not isinstance(back, Exception) and back.excerpts == body["excerpts"]


def test_the_score_command_output_has_no_excerpts_or_passages() -> None:
    # The passages ride along in memory for the results record only; `citemon score` is unchanged.
    score = AnswerScore(claims=[])
    score._evidence = {"p-1": "secret-ish text"}
    assert "passages" not in score.model_dump() and "secret-ish" not in score.model_dump_json()


def test_over_broad_citations_of_correct_claims_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # CitationIdsPerClaimClimbing's runbook: `--verdict correct` shows what was cited needlessly.
    r = record(
        "a8",
        0,
        [
            claim(
                0,
                "correct",
                cited_ids=["p-1", "p-2", "p-3"],
                supported_by=["p-1"],
                irrelevant_ids=["p-2", "p-3"],
            )
        ],
    )
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(r) + "\n", encoding="utf-8")
    code, out, _ = run(capsys, "--input", str(path), "--verdict", "correct")
    assert code == 0
    assert "    cited p-1\n    cited p-2\n    cited p-3\n" in out
    assert "    over-broad: p-2, p-3 (not needed: ALCE)" in out.splitlines()
    code, out, _ = run(capsys, "--input", str(path), "--verdict", "correct", "--format", "json")
    assert json.loads(out)["irrelevant_ids"] == ["p-2", "p-3"]


def test_kafka_flags_are_run_s_and_env_vars_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    from citemon._service.settings import settings_from_args
    from citemon.cli import build_parser

    monkeypatch.setenv("CITEMON_RESULTS_TOPIC", "from-env.scores")
    monkeypatch.setenv("CITEMON_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("CITEMON_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("CITEMON_KAFKA_USERNAME", "oncall")
    monkeypatch.setenv("CITEMON_KAFKA_PASSWORD", "s3cret-value")
    args = build_parser().parse_args(["inspect", "--bootstrap-servers", "k1:9093"])
    s = settings_from_args(args)
    assert (
        s.bootstrap_servers,
        s.results_topic,
        s.security_protocol,
        s.sasl_mechanism,
        s.kafka_username,
    ) == ("k1:9093", "from-env.scores", "SASL_SSL", "SCRAM-SHA-512", "oncall")
    assert "s3cret-value" not in repr(s) and "s3cret-value" not in str(s.describe())
    # the sampling and judge flags of `run` are not inspect's
    with pytest.raises(SystemExit):
        build_parser().parse_args(["inspect", "--sample-rate", "0.5"])


# -- the runbooks' lines ----------------------------------------------------------------------

RUNBOOKS = Path(__file__).resolve().parents[2] / "grafana" / "runbooks.md"
AGREED = (
    "citemon inspect --service '<service>' --version '<version>' "
    "--environment '<environment>' --since 30m"
)


def _runbook_lines() -> dict[str, list[str]]:
    """Per ``## Alert`` section, the ``citemon inspect`` lines of its code blocks."""
    out: dict[str, list[str]] = {}
    section = ""
    in_code = False
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif line.startswith("## ") and not in_code:
            section = line[3:].strip()
        elif in_code and line.startswith("citemon inspect"):
            out.setdefault(section, []).append(line)
    return out


def test_each_quality_alert_runbook_gives_the_agreed_inspect_line() -> None:
    found = _runbook_lines()
    assert found["CitationAccuracyDrop"] == [AGREED]
    assert found["CitationCoverageDrop"] == [AGREED + " --verdict uncited"]
    assert found["CitationIdsPerClaimClimbing"] == [AGREED, AGREED + " --verdict correct"]
    assert found["CitationJudgeFailing"] == ["citemon inspect --verdict unjudged --since 30m"]


def test_every_runbook_line_is_valid_for_the_real_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex

    path = tmp_path / "scores.jsonl"
    now = int(time.time() * 1000)
    r = record(
        "a9",
        0,
        [
            claim(0, "misattributed", supported_by=["p-2"]),
            claim(1, "uncited"),
            claim(2, "unjudged"),
            claim(3, "correct"),
        ],
    )
    r["timestamp"] = now - 60_000  # a minute ago: inside --since 30m
    path.write_text(json.dumps(r) + "\n", encoding="utf-8")
    labels = {"<service>": "bot", "<version>": "v1", "<environment>": "prod"}
    lines = [line for found in _runbook_lines().values() for line in found]
    assert len(lines) == 6  # the introduction shows the agreed line too
    for line in lines:
        for placeholder, value in labels.items():
            line = line.replace(placeholder, value)
        argv = shlex.split(line)[2:]
        code, out, err = run(capsys, *argv, "--input", str(path), "--format", "json")
        assert code == 0, (line, err)
        (finding,) = [json.loads(x) for x in out.splitlines()]
        verdict = argv[argv.index("--verdict") + 1] if "--verdict" in argv else "misattributed"
        assert finding["verdict"] == verdict


def test_order_does_not_depend_on_fetch_order() -> None:
    # Many results share a millisecond (one commit writes them all); partitions arrive in any
    # order. The larger offset is newer; between partitions the order is fixed, not arrival's.
    import random

    same_ms = [(p, o) for p in range(3) for o in range(5)]
    made = []
    for p, o in same_ms:
        r = parse_result(json.dumps(record(f"a{p * 10 + o + 1}", 0, [claim(0, "unsupported")])))
        made.append((p, o, r))
    orders = []
    for seed in range(4):
        random.Random(seed).shuffle(made)
        worst = Worst(6)
        for p, o, r in made:
            for f in findings(r, timestamp_ms=T0, source="t", position=(p, o), where=Filter()):
                worst.add(f)
        orders.append([f.position for f in worst.sorted()])
    assert orders[0] == [(0, 4), (1, 4), (2, 4), (0, 3), (1, 3), (2, 3)]
    assert all(o == orders[0] for o in orders)


async def test_a_held_score_keeps_kilobytes_however_long_its_passages() -> None:
    # Scores wait for their offset to commit; they keep capped excerpts, not the passages.
    from citemon._core.records import AnswerRecord, Passage

    long = "Retention is ninety days. " + "filler words here " * 2000  # ~36,000 characters
    rec = AnswerRecord(
        answer="Retention is ninety days. [p-1] Nothing else matters. [p-2]",
        passages=[
            Passage(id="p-1", text=long),
            Passage(id="p-2", text="x " * 50_000),
            Passage(id="p-3", text="never cited " * 1000),
        ],
    )
    score = await Scorer(LexicalJudge()).score(rec)
    assert set(score.evidence) <= {"p-1", "p-2"} and "p-1" in score.evidence
    assert all(len(t) <= MAX_EXCERPT_CHARS for t in score.evidence.values())
    for chars in (1, 240, 3999, MAX_EXCERPT_CHARS):
        settings = Settings(results_topic="r", results_excerpt_chars=chars)
        message = result_message(settings, score, None)
        assert message is not None
        body = json.loads(message.value)
        assert body["excerpts"]["p-1"] == excerpt_of(long, chars)  # as if cut from the passage


def test_the_excerpt_setting_is_bounded() -> None:
    from citemon._core.errors import ConfigError
    from citemon._service.settings import settings_from_args
    from citemon.cli import build_parser

    too_many = str(MAX_EXCERPT_CHARS + 1)
    args = build_parser().parse_args(["run", "--results-excerpt-chars", too_many])
    with pytest.raises(ConfigError, match="results_excerpt_chars"):
        settings_from_args(args)


async def test_misattributions_are_grouped_by_pattern_per_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A version whose every claim cites the first passage (v2) beside one that carries the
    last citation forward (v1): the block names each version's pattern, its share against the
    other version, owner and fix, and an example; --pattern keeps one; JSON lines carry it."""
    from tests.buggy_rag import buggy_answers, oracle_for

    v2 = list(buggy_answers("first_passage", 10, seed=1, version="v2"))
    v1 = list(buggy_answers("carry_forward", 10, seed=2, version="v1"))
    scores = await Scorer(oracle_for(v1 + v2)).score_many([p.record for p in v1 + v2])
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(s.model_dump_json() + "\n" for s in scores), encoding="utf-8")
    wrong_v2 = sum(c.verdict == "misattributed" for s in scores[10:] for c in s.claims)
    assert main(["inspect", "--input", str(path), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    block, first_claim = out.split("\n\n", 1)
    lines = block.splitlines()
    assert lines[0] == (
        "why citations fail: buggy-rag v1 test: 20 misattributed claim(s) by pattern"
        " (rest: the other versions read)"
    )
    assert lines[1].split() == [
        "previous_citation", "20", "100%", "rest", "0%",
        "owner:", "the", "prompt", "/", "the", "generator",
    ]  # fmt: skip
    v2_head = next(i for i, line in enumerate(lines) if "buggy-rag v2 test" in line)
    assert lines[v2_head] == (
        f"why citations fail: buggy-rag v2 test: {wrong_v2} misattributed claim(s) by pattern"
        " (rest: the other versions read)"
    )
    assert lines[v2_head + 1].split()[:5] == [
        "first_retrieved",
        str(wrong_v2),
        "100%",
        "rest",
        "0%",
    ]
    example = next(i for i, line in enumerate(lines) if i > v2_head and "e.g." in line)
    assert lines[example].startswith('      e.g. "Topic ')
    assert re.fullmatch(
        r"        cites t\d+-p1, should cite t\d+-p[2-5] \(trace -\)", lines[example + 1]
    ), lines[example + 1]
    assert "pattern: first_retrieved (owner: the prompt / the generator)" in first_claim

    assert main(["inspect", "--input", str(path), "--pattern", "first_retrieved", "--limit", "0",
                 "--format", "json"]) == 0  # fmt: skip
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(shown) == wrong_v2 and {s["pattern"] for s in shown} == {"first_retrieved"}
    assert {s["version"] for s in shown} == {"v2"}
