"""The review page's tasks and API, over real HTTP on loopback (the browser test is in
tests/integration/test_review_browser.py)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from citemon._core.errors import InputError
from citemon._review.model import read_labels, read_review_records
from citemon._review.page import ReviewPage, ReviewServer
from citemon._review.tasks import disagrees, load_review_set, marked_segments, shared_words
from citemon.cli import main
from tests.review_sets import HOSTILE, review_records, write_review_set


def test_the_words_a_claim_shares_are_marked_and_the_text_is_kept_exactly() -> None:
    words = shared_words("The Eiffel Tower is 330 metres tall.")
    assert words == frozenset({"eiffel", "tower", "330", "metres", "tall"})
    segments = marked_segments("Tower: the eiffel TOWER, 330 m (tall).", words)
    assert segments == [
        ("Tower", True),
        (": the ", False),
        ("eiffel", True),
        (" ", False),
        ("TOWER", True),
        (", ", False),
        ("330", True),
        (" m (", False),
        ("tall", True),
        (").", False),
    ]
    assert "".join(text for text, _ in marked_segments(HOSTILE, words)) == HOSTILE


@pytest.mark.parametrize(
    ("label", "verdict", "expected"),
    [
        ("entailed", "correct", False),
        ("partial", "correct", True),
        ("not_entailed", "correct", True),
        ("entailed", "misattributed", True),
        ("partial", "unsupported", False),
        ("not_entailed", "multi_hop", False),
        ("not_entailed", "dangling", False),
        ("not_a_claim", "correct", True),
        ("not_a_claim", "unsupported", True),
        ("entailed", "unjudged", False),
    ],
)
def test_which_labels_disagree_with_which_verdicts(
    label: str, verdict: str, expected: bool
) -> None:
    assert disagrees(label, verdict) is expected  # type: ignore[arg-type]


def test_one_task_per_cited_claim_in_file_order(tmp_path: Path) -> None:
    review_set = load_review_set(write_review_set(tmp_path / "set.jsonl"))
    assert [t.key for t in review_set.tasks] == [
        ("a" * 32, 0), ("a" * 32, 1), ("b" * 32, 0), ("b" * 32, 1), ("c" * 32, 0),
        ("d" * 32, 0), ("d" * 32, 1), ("d" * 32, 2),
    ]  # fmt: skip
    regions = review_set.tasks[4]
    assert [(pid, cut, bool(segs)) for pid, segs, cut in regions.passages] == [
        ("r-1", False, True),
        ("r-9", False, False),  # cited, but the record has no text for it
    ]
    assert review_set.tasks[3].passages[0][2] is True  # d-8 was cut at the cap
    # the claim is marked in its answer, with the citation marker it was stripped of
    assert review_set.tasks[3].answer == (
        ("Requests are retried three times with exponential backoff [d-7]. ", False),
        ("The client gives up after 30 seconds and logs the error [d-8].", True),
        (" Retries are safe.", False),
    )


def test_the_example_set_is_the_test_set() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "review" / "set.jsonl"
    assert read_review_records(example) == review_records()


def test_a_file_that_is_not_a_review_set_is_a_clear_error(tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"id": "q1", "question": "q", "answer": "a [1]", "passages": []}\n')
    with pytest.raises(InputError, match="not a review record"):
        load_review_set(answers)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="no review records"):
        load_review_set(empty)
    no_cited = tmp_path / "uncited.jsonl"
    no_cited.write_text('{"trace_id": "t", "claims": []}\n')
    with pytest.raises(InputError, match="no review record in it has a cited claim"):
        load_review_set(no_cited)


def test_serve_names_the_bad_set_file_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "scores.jsonl"
    bad.write_text('{"id": "q1", "citation_accuracy": 0.5}\n')
    code = main(["review", "serve", "--set", str(bad), "--labels", str(tmp_path / "l.jsonl"),
                 "--reviewer", "ann"])  # fmt: skip
    assert code == 2
    assert "scores.jsonl:1: not a review record" in capsys.readouterr().err


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ReviewServer, Path]]:
    labels = tmp_path / "labels.jsonl"
    page = ReviewPage(load_review_set(write_review_set(tmp_path / "set.jsonl")), labels, "ann")
    server = ReviewServer(page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, labels
    server.shutdown()
    server.server_close()
    thread.join()


def _call(
    server: ReviewServer,
    path: str,
    body: object | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, object]]:
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if body is not None else {}
    request = urllib.request.Request(server.url.rstrip("/") + path, data=data,
                                     headers=sent | (headers or {}))  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_the_state_is_blind_and_a_label_is_on_disk_before_the_answer(
    served: tuple[ReviewServer, Path],
) -> None:
    server, labels = served
    assert server.url.startswith("http://127.0.0.1:")
    status, state = _call(server, "/api/state")
    assert status == 200
    assert state["total"] == 8 and state["labelled"] == []
    # nothing of citemon's verdict before a label
    assert "verdict" not in json.dumps(state["tasks"])

    key = {"trace_id": "a" * 32, "claim": 1}
    status, shown = _call(server, "/api/reveal", key | {"label": "entailed"})
    assert (status, shown["verdict"], shown["disagrees"]) == (200, "unsupported", True)
    assert labels.read_text() == ""  # revealing writes nothing

    status, saved = _call(server, "/api/label", key | {"label": "entailed", "checker": "strict"})
    assert (status, saved["labelled"], saved["total"]) == (200, 1, 8)
    (label,) = read_labels(labels)
    assert (label.trace_id, label.claim, label.label, label.checker, label.verdict) == (
        "a" * 32, 1, "entailed", "strict", "unsupported",
    )  # fmt: skip
    assert (label.reviewer, label.text, label.cited_ids, label.service, label.version) == (
        "ann", "It was completed in 1889.", ["p-2"], "docs-rag", "v2",
    )  # fmt: skip
    assert _call(server, "/api/state")[1]["labelled"] == [["a" * 32, 1]]


def test_a_reopened_page_resumes_after_what_this_reviewer_labelled(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    review_set = load_review_set(write_review_set(tmp_path / "set.jsonl"))
    first = ReviewPage(review_set, labels, "ann")
    first.give({"trace_id": "b" * 32, "claim": 0, "label": "entailed", "checker": None})
    first.give({"trace_id": "a" * 32, "claim": 0, "label": "partial", "checker": "strict"})
    assert ReviewPage(review_set, labels, "ann").state()["labelled"] == [
        ["a" * 32, 0], ["b" * 32, 0],
    ]  # fmt: skip
    assert ReviewPage(review_set, labels, "bob").state()["labelled"] == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"trace_id": "a" * 32, "claim": 9, "label": "entailed"}, "no cited claim 9"),
        ({"trace_id": "b" * 32, "claim": 2, "label": "entailed"}, "no cited claim 2"),  # uncited
        ({"trace_id": "a" * 32, "claim": 0, "label": "yes"}, "label must be one of"),
        ({"trace_id": "a" * 32, "claim": "0", "label": "entailed"}, "claim (an integer)"),
        ({"trace_id": "a" * 32, "claim": 0, "label": "partial", "checker": "bad"}, "checker must"),
        (["not", "an", "object"], "expected a JSON object"),
    ],
)
def test_a_bad_label_is_refused_and_writes_nothing(
    served: tuple[ReviewServer, Path], body: object, error: str
) -> None:
    server, labels = served
    status, reply = _call(server, "/api/label", body)
    assert status == 400
    assert error in str(reply["error"])
    assert labels.read_text() == ""


def test_foreign_hosts_and_non_json_posts_are_refused(served: tuple[ReviewServer, Path]) -> None:
    server, labels = served
    status, _ = _call(server, "/api/state", headers={"Host": "evil.example:80"})
    assert status == 421
    body = {"trace_id": "a" * 32, "claim": 0, "label": "entailed", "checker": None}
    status, _ = _call(server, "/api/label", body, headers={"Content-Type": "text/plain"})
    assert status == 415
    assert labels.read_text() == ""


def test_the_page_is_sent_with_a_policy_that_allows_only_its_own_script(
    served: tuple[ReviewServer, Path],
) -> None:
    server, _ = served
    with urllib.request.urlopen(server.url, timeout=10) as reply:
        policy = reply.headers["Content-Security-Policy"]
        html = reply.read().decode()
    assert "<script>" in html and "innerHTML" not in html
    assert policy.startswith("default-src 'none'; script-src 'sha256-")
    assert "unsafe-inline" not in policy


def test_a_labels_file_that_cannot_be_written_is_refused_at_start(tmp_path: Path) -> None:
    review_set = load_review_set(write_review_set(tmp_path / "set.jsonl"))
    with pytest.raises(InputError, match="cannot write the labels file"):
        ReviewPage(review_set, tmp_path / "missing-dir" / "labels.jsonl", "ann")


def test_a_port_taken_or_out_of_range_is_a_clear_error_not_a_traceback(
    served: tuple[ReviewServer, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The port now also comes from CITEMON_REVIEW_SERVE_PORT, set once and forgotten: a port in
    # use (or past 65535) was an OSError (OverflowError) traceback out of `review serve`.
    taken = served[0].server_address[1]
    review_set = str(write_review_set(tmp_path / "mine.jsonl"))
    argv = ["review", "serve", "--set", review_set, "--labels", str(tmp_path / "l.jsonl"),
            "--reviewer", "bob"]  # fmt: skip
    assert main([*argv, "--port", str(taken)]) == 2
    assert f"cannot listen on 127.0.0.1:{taken}" in capsys.readouterr().err
    monkeypatch.setenv("CITEMON_REVIEW_SERVE_PORT", "70000")
    assert main(argv) == 2
    assert "port: Input should be less than or equal to 65535" in capsys.readouterr().err
