"""Native citations, read from traces the real provider SDKs and instrumentations make
(docs/dialects.md, "Native citations").

Each case is the specimen without markers, answered by a provider's real SDK pointed at a local
HTTP server that returns the provider's documented response JSON, traced by a real
instrumentation (:mod:`tests.integration.native_traces`, run once per module in a child
process). The OpenInference traces record the whole response, citations included: each scores
the specimen exactly, offline and through Kafka (0.33, faithfulness 1.00, 2 misattributed). The
URL citations carry no page text: judged from a passage store keyed by URL, else unjudged. The
instrumentations that drop the citations the request asked for give ``citations_not_recorded``,
explained, never uncited claims.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.conftest import REPO, need_server
from tests.integration.conftest import TopicFactory
from tests.integration.dialect_traces import PASSAGES
from tests.integration.monitor_support import metric_sum
from tests.integration.native_traces import URLS
from tests.integration.trace_cases import (
    assert_specimen_metrics,
    generate,
    kafka_leg,
    score_offline,
    score_specimen,
    traces_fixture,
)

#: The OpenInference traces that are the whole specimen, and the IDs each cites by (the
#: application's where the request carries them: a document title, a search result's source,
#: a Cohere document ID, file attributes, Gemini custom metadata).
SPECIMEN_CASES = {
    "openinference-anthropic-documents": ["p-3310", "p-3310", "p-3312"],
    "openinference-anthropic-search-results": [URLS["p-3310"], URLS["p-3310"], URLS["p-3312"]],
    "openinference-openai-responses": ["p-3310", "p-3310", "p-3312"],
    "openinference-cohere": ["p-3310", "p-3310", "p-3312"],
    "openinference-google-genai": ["p-3310", "p-3310", "p-3312"],
}
#: The passages reach the model as p-3311, p-3310, p-3312: the second claim repeats the first's
#: citation, the third cites the last passage where the first supports it.
PATTERNS = ["previous_citation", "other"]
DROPPED = {
    "openllmetry-anthropic": (
        "opentelemetry.instrumentation.anthropic",
        "3 document/search-result block(s) with citations enabled",
    ),
    "otel-google-genai": ("opentelemetry.instrumentation.google_genai", "(file_search)"),
}
#: opentelemetry-instrumentation-openai-v2 2.4b0 needs opentelemetry-util-genai 1.1b0, the main
#: venv 1.3b0: its trace is made in a venv of its own, `make otel-openai-v2`
#: (scripts/otel_openai_v2.sh), found by the same key, the pins' sha256.
OPENAI_V2_LOCK = REPO / "tests" / "otel-openai-v2" / "requirements.txt"


real_traces = traces_fixture("native_traces", "real_traces")


@pytest.fixture(scope="module")
def openai_v2_trace(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The trace of opentelemetry-instrumentation-openai-v2 2.4b0 (OTLP protobuf), made by the
    same case of native_traces.py against the same local server, in its own venv."""
    key = hashlib.sha256(OPENAI_V2_LOCK.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("CITEMON_CACHE", Path.home() / ".cache" / "citemon"))
    python = cache / "otel-openai-v2" / key / "bin" / "python"
    if not (python.parent.parent / ".installed").exists():
        need_server("the opentelemetry-instrumentation-openai-v2 venv", "run `make otel-openai-v2`")
    command = [str(python), "-m", "tests.integration.native_traces"]
    out = generate(tmp_path_factory, "openai-v2-trace", command, "otel-openai-v2")
    versions = json.loads((out / "versions.json").read_text())
    assert versions["opentelemetry-instrumentation-openai-v2"] == "2.4b0"
    assert versions["opentelemetry-util-genai"] == "1.1b0"
    return (out / "otel-openai-v2.pb").read_bytes()


@pytest.mark.parametrize("case", SPECIMEN_CASES)
def test_each_providers_citations_score_the_specimen_offline(
    real_traces: dict[str, bytes], case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claims = score_specimen(tmp_path, capsys, real_traces[case], PATTERNS)["claims"]
    assert [c["cited_ids"] for c in claims] == [[pid] for pid in SPECIMEN_CASES[case]]
    assert not any("quote_mismatch" in c for c in claims)  # every quote is in its passage


def test_file_citations_resolve_to_the_search_results_by_file_id(
    real_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The claim cites the application's ID (the file's ``passage_id`` attribute); the
    passages are the search results, named by file ID."""
    _, out, _ = score_offline(
        tmp_path, capsys, [real_traces["openinference-openai-responses"]], "--format", "json"
    )
    claims = out["answers"][0]["claims"]
    assert [c["resolved_ids"] for c in claims] == [
        ["file-3310aa"],
        ["file-3310aa"],
        ["file-3312aa"],
    ]
    assert [c["supported_by"] for c in claims] == [
        ["file-3310aa"],
        ["file-3312aa"],
        ["file-3311aa"],
    ]
    # Without the metadata keys the citations are the provider's own IDs, same verdicts.
    _, bare, _ = score_offline(
        tmp_path,
        capsys,
        [real_traces["openinference-openai-responses"]],
        "--format",
        "json",
        "--passage-id-keys",
        "",
    )
    assert [c["cited_ids"] for c in bare["answers"][0]["claims"]] == [
        ["file-3310aa"],
        ["file-3310aa"],
        ["file-3312aa"],
    ]
    assert bare["summary"]["citation_accuracy"] == 0.3333


def test_url_citations_are_judged_from_a_store_keyed_by_url(
    real_traces: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = real_traces["openinference-openai-chat-url"]
    code, out, err = score_offline(tmp_path, capsys, [payload], "--format", "json")
    claims = out["answers"][0]["claims"]
    assert [(c["verdict"], c["unjudged_cause"]) for c in claims] == [
        ("unjudged", "no_passage_text")
    ] * 3
    assert code == 1 and "no_passage_text" in err and "--passage-store" in err
    store = tmp_path / "pages.jsonl"
    store.write_text(
        "".join(json.dumps({"id": URLS[p], "text": PASSAGES[p]}) + "\n" for p in PASSAGES),
        encoding="utf-8",
    )
    code, out, err = score_offline(
        tmp_path, capsys, [payload], "--format", "json", "--passage-store", str(store)
    )
    assert (code, err) == (0, "")
    claims = out["answers"][0]["claims"]
    # Only the cited pages are known: the third sentence's support (p-3311) was never cited.
    assert [c["verdict"] for c in claims] == ["correct", "misattributed", "unsupported"]
    assert claims[1]["supported_by"] == [URLS["p-3312"]]
    assert out["answers"][0]["text_source"] == {URLS["p-3310"]: "store", URLS["p-3312"]: "store"}


@pytest.mark.parametrize("case", DROPPED)
def test_dropped_citations_are_explained_not_uncited(
    real_traces: dict[str, bytes], case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = score_offline(tmp_path, capsys, [real_traces[case]], "--format", "json")
    assert code == 1
    assert out["summary"]["answers"] == 0
    assert out["summary"]["verdicts"]["uncited"] == 0
    scope, asked = DROPPED[case]
    assert "gave no answer (citations_not_recorded)" in err
    assert f"{asked}, and {scope} records the answer's text without its" in err
    assert "openinference-instrumentation-" in err and "citemon_instrumentation.record_" in err


def test_openai_v2s_search_model_answer_is_citations_not_recorded(
    openai_v2_trace: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """opentelemetry-instrumentation-openai-v2 records the search model's answer without its
    url_citation annotations: explained, never uncited claims."""
    code, out, err = score_offline(tmp_path, capsys, [openai_v2_trace], "--format", "json")
    assert code == 1
    assert out["summary"]["answers"] == 0
    assert out["summary"]["verdicts"]["uncited"] == 0
    assert "gave no answer (citations_not_recorded)" in err
    assert (
        "the request asked OpenAI's search model gpt-4o-search-preview, which cites the pages "
        "it searched (url_citation annotations), and opentelemetry.util.genai.handler records "
        "the answer's text without them" in err
    )


async def test_every_provider_through_kafka(
    real_traces: dict[str, bytes], kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    """``citemon run`` on the real broker, one monitor for every trace: the specimen five
    times, the URL citations unjudged, the dropped citations counted by outcome."""
    cases = [*SPECIMEN_CASES, "openinference-openai-chat-url", *DROPPED]
    n = len(SPECIMEN_CASES)
    async with kafka_leg(
        kafka_bootstrap,
        kafka_topic,
        {case: real_traces[case] for case in cases},
        answers=n + 1,
        outcomes={"citations_not_recorded": len(DROPPED)},
        results=True,
    ) as leg:
        r = leg.registry
        assert_specimen_metrics(r, n, {pattern: n for pattern in PATTERNS})
        assert metric_sum(r, "citemon_claims_total", verdict="unjudged") == 3  # the URLs
        assert metric_sum(r, "citemon_claims_total", verdict="uncited") == 0
        assert metric_sum(r, "citemon_quote_mismatches_total") == 0
        assert metric_sum(r, "citemon_traces_total", outcome="no_passages") == 0
    bodies = await leg.results()
    assert len(bodies) == n + 1
    for case, cited in SPECIMEN_CASES.items():
        claims = bodies[leg.trace_ids[case]]["claims"]
        assert [c["cited_ids"] for c in claims] == [[pid] for pid in cited]
        assert [c["verdict"] for c in claims] == ["correct", "misattributed", "misattributed"]
