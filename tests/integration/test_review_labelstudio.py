"""The Label Studio round trip against a real Label Studio server (SQLite, loopback).

`citemon review export` → a project made with the exported config → the tasks imported → the
first task annotated by a person in Label Studio's own labelling page (Debian's Chromium driven
by Playwright: log in, open the task, press 1, see citemon's verdict appear only then, Submit),
the others through the API with the body that page posts → its JSON and JSON_MIN exports →
`citemon review import`: the labels file holds each annotated claim once, with the label and
checker cause given, citemon's verdict, and nothing for the skipped task. One server for the
module; a missing Label Studio or browser fails under CI=true (``make label-studio``,
``make browser``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from citemon._review.model import read_labels
from citemon.cli import main
from tests.integration.browser_support import chromium_browser
from tests.integration.labelstudio_support import (
    PASSWORD,
    USER,
    LabelStudio,
    label_studio_server,
)
from tests.review_sets import HOSTILE, review_records, write_review_set

A, B, C, D = "a" * 32, "b" * 32, "c" * 32, "d" * 32

# A first run migrates a template database (minutes under load); later runs boot in ~25 s.
pytestmark = pytest.mark.timeout(900)

#: What the annotator answers, task by task (None: they skip the task).
ANSWERS: list[tuple[str, str | None] | None] = [
    ("entailed", None),
    ("entailed", "strict"),
    ("partial", None),
    ("not_entailed", None),
    ("not_a_claim", "fused"),
    None,
    ("entailed", "overlap"),
    ("not_entailed", "other"),
]
KEYS = [(A, 0), (A, 1), (B, 0), (B, 1), (C, 0), (D, 0), (D, 1), (D, 2)]


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabelStudio]:
    with label_studio_server(tmp_path_factory.mktemp("label-studio")) as server:
        yield server


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with chromium_browser() as browser:
        yield browser


def _annotate_in_the_web_page(
    chromium: Any, label_studio: LabelStudio, project: int, task_id: int
) -> dict[str, Any]:
    """A person labels ``task_id`` in Label Studio's labelling page; the annotation it posted."""
    page = chromium.new_page(viewport={"width": 1300, "height": 1000})
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{label_studio.url}/user/login/")
        page.fill("input[name=email]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/user/login" not in url)
        page.goto(f"{label_studio.url}/projects/{project}/data?task={task_id}")
        page.get_by_text("Do the cited passages support the claim?").wait_for()
        # the hostile passage is shown as text (in the page and the data table); nothing ran
        page.get_by_text(HOSTILE, exact=True).first.wait_for()  # an element whose text is it
        assert page.locator("img[onerror], script:has-text('__pwned')").count() == 0
        assert page.evaluate("window.__pwned") is None
        verdict = page.get_by_text("citemon's verdict (shown after your label)")
        assert not verdict.is_visible()  # blind until a label is chosen
        page.keyboard.press("1")  # the hotkey of "entailed"
        verdict.wait_for()
        with page.expect_response(
            lambda r: "/annotations" in r.url and r.request.method == "POST"
        ) as posted:
            page.get_by_role("button", name="Submit").click()
        assert posted.value.status == 201
        annotation: dict[str, Any] = posted.value.json()
        return annotation
    finally:
        page.close()


@pytest.fixture(scope="module")
def annotated(
    label_studio: LabelStudio, chromium: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, dict[tuple[str, int], str]]:
    """A project made from citemon's export, annotated; its ID and each annotation's time."""
    work = tmp_path_factory.mktemp("export")
    review_set = write_review_set(work / "set.jsonl")
    assert main(["review", "export", "--format", "label-studio", str(review_set),
                 "-o", str(work / "ls")]) == 0  # fmt: skip
    api = label_studio.client
    reply = api.post(
        "/api/projects/",
        json={"title": "citemon review", "label_config": (work / "ls" / "config.xml").read_text()},
    )
    assert reply.status_code == 201, reply.text
    project = int(reply.json()["id"])
    reply = api.post(
        f"/api/projects/{project}/import?return_task_ids=true",
        content=(work / "ls" / "tasks.json").read_bytes(),
        headers={"Content-Type": "application/json"},
    )
    assert reply.status_code == 201, reply.text
    task_ids = reply.json()["task_ids"]
    assert len(task_ids) == 8

    times: dict[tuple[str, int], str] = {}
    assert ANSWERS[0] == ("entailed", None)
    by_hand = _annotate_in_the_web_page(chromium, label_studio, project, task_ids[0])
    assert by_hand["result"][0]["value"] == {"choices": ["entailed"]}
    times[KEYS[0]] = by_hand["updated_at"]
    for task_id, key, answer in zip(task_ids[1:], KEYS[1:], ANSWERS[1:], strict=True):
        task = api.get(f"/api/tasks/{task_id}").json()
        assert (task["data"]["trace_id"], task["data"]["claim"]) == key
        result = []
        if answer is not None:
            label, checker = answer
            result.append(_choice("label", label, f"l{task_id}"))
            if checker:
                result.append(_choice("checker", checker, f"c{task_id}"))
        # the body Label Studio's labelling page posts when the annotator presses Submit/Skip
        reply = api.post(
            f"/api/tasks/{task_id}/annotations/?project={project}",
            json={
                "result": result,
                "lead_time": 7.5,
                "was_cancelled": answer is None,
                "draft_id": 0,
                "parent_prediction": None,
                "parent_annotation": None,
                "project": str(project),
            },
        )
        assert reply.status_code == 201, reply.text
        times[key] = reply.json()["updated_at"]
    return project, times


def _choice(tag: str, value: str, region: str) -> dict[str, object]:
    return {
        "id": region,
        "from_name": tag,
        "to_name": "claim_text",
        "type": "choices",
        "value": {"choices": [value]},
        "origin": "manual",
    }


def _expected(reviewer: str) -> list[tuple[object, ...]]:
    verdicts = {(r.trace_id, c.claim): c.verdict for r in review_records() for c in r.claims}
    return [
        (key, answer[0], answer[1], verdicts[key], reviewer)
        for key, answer in zip(KEYS, ANSWERS, strict=True)
        if answer is not None
    ]


@pytest.mark.parametrize("export_type", ["JSON", "JSON_MIN"])
def test_export_annotate_in_label_studio_and_import_gives_the_exact_labels(
    label_studio: LabelStudio,
    annotated: tuple[int, dict[tuple[str, int], str]],
    tmp_path: Path,
    export_type: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project, times = annotated
    reply = label_studio.client.get(f"/api/projects/{project}/export?exportType={export_type}")
    assert reply.status_code == 200, reply.text
    export = tmp_path / f"export-{export_type}.json"
    export.write_bytes(reply.content)

    labels = tmp_path / "labels.jsonl"
    assert main(["review", "import", str(export), "--labels", str(labels)]) == 0
    skipped = "1 cancelled" if export_type == "JSON" else "0 cancelled"  # JSON_MIN leaves it out
    assert f"7 labels → {labels} (skipped: {skipped}, 0 without a label)" in capsys.readouterr().out

    lines = [json.loads(line) for line in labels.read_text().splitlines()]
    reviewer = lines[0]["reviewer"]
    assert reviewer.startswith("label-studio:")  # the annotator's user ID
    got = sorted(
        ((x["trace_id"], x["claim"]), x["label"], x["checker"], x["verdict"], x["reviewer"])
        for x in lines
    )
    assert got == sorted(_expected(reviewer))  # each annotated claim once; the skipped one not
    assert {(x["trace_id"], x["claim"]): x["labelled_at"] for x in lines} == {
        key: at for key, at in times.items() if key != (D, 0)
    }
    by_key = {label.key: label for label in read_labels(labels)}
    assert by_key[(A, 1)].text == "It was completed in 1889."
    assert (by_key[(C, 0)].cited_ids, by_key[(C, 0)].version) == (["r-1", "r-9"], "v3")


def test_the_exported_config_is_accepted_and_keeps_passage_text_as_data(
    label_studio: LabelStudio, annotated: tuple[int, dict[tuple[str, int], str]]
) -> None:
    project, _ = annotated
    reply = label_studio.client.get(f"/api/projects/{project}")
    assert reply.status_code == 200
    config = reply.json()["label_config"]
    assert '<Paragraphs name="passages" value="$passages"' in config
    tasks = label_studio.client.get(f"/api/projects/{project}/export?exportType=JSON").json()
    # the hostile passage went in and came back as the same string
    first = next(t for t in tasks if t["data"]["trace_id"] == A and t["data"]["claim"] == 0)
    (records,) = [r for r in review_records() if r.trace_id == A]
    assert first["data"]["passages"] == [{"id": "p-1", "text": records.passages["p-1"]}]
