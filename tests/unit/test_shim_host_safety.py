"""Review of the shim as a RAG service adopting it would see it (real OpenTelemetry SDK).

Two properties: the shim never breaks the host (no SDK, a failing exporter, odd values, huge or
non-UTF-8 text, the host's own exception), and it writes exactly the attributes of the span
contract (docs/spans.md), which round-trip through the monitor's decoder for 0, 1, 50 and 500
passages.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import subprocess
import sys
import textwrap
import traceback
import tracemalloc
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from citemon._core.records import AnswerRecord, Passage
from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import ShimStats, answer_span, record_answer
from tests.conftest import REPO

RESOURCE = Resource.create(
    {
        "service.name": "support-bot",
        "service.version": "2026.11.3",
        "deployment.environment.name": "prod",
    }
)

#: Every attribute name the shim may write (docs/spans.md,
#: instrumentation/src/citemon_instrumentation/attributes.py).
CONTRACT = re.compile(
    r"openinference\.span\.kind|input\.value|output\.value"
    r"|retrieval\.documents\.(0|[1-9][0-9]*)\.document\.(id|content|score|metadata)"
    r"|citemon\.(truncated|passages\.count|passages\.overflow|redaction_failed)"
)
#: The type each attribute must have on the span.
TYPES: dict[str, type] = {
    "openinference.span.kind": str,
    "input.value": str,
    "output.value": str,
    "id": str,
    "content": str,
    "score": float,
    "metadata": str,
    "citemon.truncated": bool,
    "citemon.passages.count": int,
    "citemon.passages.overflow": str,
    "citemon.redaction_failed": bool,
}


def _provider(**kwargs: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE, **kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _records(spans: Sequence[ReadableSpan]) -> list[AnswerRecord]:
    batch = decode_otlp_proto(encode_spans(spans).SerializeToString())
    assert batch.errors == []
    return batch.records


def _passages(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"p-{i}", "text": f"passage {i} says {i * 7} things. " * 3, "score": 1 - i / 1000}
        | ({"source": f"docs/{i}.md"} if i % 3 == 0 else {})
        for i in range(n)
    ]


def _expected(passages: list[dict[str, Any]]) -> list[Passage]:
    return [
        Passage(
            id=p["id"],
            text=p["text"],
            score=p["score"],
            source=p.get("source"),
            metadata={"source": p["source"]} if "source" in p else None,
        )
        for p in passages
    ]


# -- 1. the shim never breaks the host ------------------------------------------------------------


class RaisingExporter(SpanExporter):
    """The host's own exporter, broken (a bug, a full disk): it raises on every call."""

    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += len(spans)
        raise OSError("disk full")

    def shutdown(self) -> None:
        pass  # the host's shutdown path is not the shim's (the SDK lets it raise)


def test_no_sdk_configured_costs_nothing_and_says_nothing() -> None:
    # A fresh interpreter with only the API: the global tracer is the no-op one.
    script = textwrap.dedent(
        """
        from citemon_instrumentation import STATS, answer_span, record_answer
        with answer_span("q") as s:
            s.set_passages([("p-1", "t"), {"id": 2, "text": None}])
            s.set_answer("a [p-1]")
        record_answer(question="q", answer="a", passages=[("p-1", "t")])
        try:
            with answer_span("q") as s:
                raise KeyError("host")
        except KeyError as exc:
            assert exc.args == ("host",)
        print(STATS.answers, STATS.errors, STATS.truncated, type(s.span).__name__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "0", "NonRecordingSpan"]
    assert done.stderr == ""


def test_the_apis_no_op_provider_passed_explicitly() -> None:
    stats = ShimStats()
    with answer_span("q", tracer_provider=trace.NoOpTracerProvider(), stats=stats) as s:
        s.set_passages(_passages(3))
        s.set_answer("a")
    record_answer(question="q", answer="a", passages=[], tracer_provider=trace.NoOpTracerProvider())
    assert not s.span.is_recording()
    assert (stats.answers, stats.errors) == (0, 0)


@pytest.mark.parametrize("processor", [SimpleSpanProcessor, BatchSpanProcessor])
def test_an_exporter_that_raises_never_reaches_the_host(
    processor: type[SimpleSpanProcessor] | type[BatchSpanProcessor],
) -> None:
    exporter = RaisingExporter()
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    provider.add_span_processor(processor(exporter))
    stats = ShimStats()
    done = []
    for i in range(5):
        with answer_span(f"q{i}", tracer_provider=provider, stats=stats) as s:
            s.set_passages(_passages(2))
            s.set_answer("a [p-1]")
        record_answer(question="q", answer="a", passages=[], tracer_provider=provider, stats=stats)
        done.append(i)
    provider.force_flush()
    assert done == [0, 1, 2, 3, 4]
    assert exporter.calls == 10  # every span reached it; its failure stayed in the SDK
    assert (stats.answers, stats.errors) == (10, 0)
    provider.shutdown()


class Weird:
    def __str__(self) -> str:
        return "weird"


def test_non_string_and_none_fields_are_recorded_sensibly() -> None:
    provider, exporter = _provider()
    stats = ShimStats()
    passages: list[Any] = [
        {"id": 7, "text": "int id"},
        {"id": 2.5, "text": "float id", "score": 1},
        {"id": None, "text": "no id: positional"},
        {"id": "p-4", "text": None},
        {"id": Weird(), "text": Weird(), "score": "0.9"},  # a score that is not a number: omitted
        (5, 6),
        {"id": "p-7", "text": "t", "metadata": {"when": dt.date(2026, 1, 2), "source": "s.md"}},
    ]
    record_answer(
        question="q", answer="a [1]", passages=passages, tracer_provider=provider, stats=stats
    )
    assert (stats.errors, stats.truncated) == (0, 0)
    (record,) = _records(exporter.get_finished_spans())
    assert [(p.id, p.text, p.score) for p in record.passages] == [
        ("7", "int id", None),
        ("2.5", "float id", 1.0),
        ("3", "no id: positional", None),
        ("p-4", "", None),
        ("weird", "weird", None),
        ("5", "6", None),
        ("p-7", "t", None),
    ]
    assert record.passages[6].metadata == {"when": "2026-01-02", "source": "s.md"}
    assert not record.truncated


def test_none_question_and_answer_are_not_recorded_as_the_text_none() -> None:
    provider, exporter = _provider()
    stats = ShimStats()
    with answer_span(None, tracer_provider=provider, stats=stats) as s:  # type: ignore[arg-type]
        s.set_passages([("p-1", "t")])
        s.set_answer(None)  # nothing was generated
    (span,) = exporter.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert (attrs["input.value"], attrs["output.value"]) == ("", "")
    (record,) = _records([span])  # an empty answer (no claims), never the text "None"
    assert (record.question, record.answer, record.truncated) == ("", "", False)
    assert stats.errors == 0


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(None, id="passages-None"),
        pytest.param(42, id="not-iterable"),
        pytest.param([{"id": "x", "text": "t", "metadata": "cycle"}], id="circular-metadata"),
    ],
)
def test_passages_the_shim_cannot_record_mark_the_answer_truncated(bad: Any) -> None:
    if bad and isinstance(bad, list):
        cycle: dict[str, Any] = {}
        cycle["self"] = cycle
        bad[0]["metadata"] = cycle
    provider, exporter = _provider()
    stats = ShimStats()
    with answer_span("q", tracer_provider=provider, stats=stats) as s:
        s.set_passages(bad)
        s.set_answer("a [x]")
    (record,) = _records(exporter.get_finished_spans())
    # Without the mark the monitor would score `[x]` dangling: a citation error that is ours.
    assert record.truncated
    assert (stats.errors, stats.truncated, stats.answers) == (1, 1, 1)


def test_huge_texts_are_recorded_fast_and_limits_mark_them_truncated() -> None:
    big = "x" * 20_000_000
    provider, exporter = _provider()
    tracemalloc.start()
    record_answer(question=big, answer=big, passages=[("p-1", big)], tracer_provider=provider)
    peak_mb = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    assert peak_mb < 5, peak_mb  # no copy, no encode of 60 MB on the request path
    (span,) = exporter.get_finished_spans()
    assert len((span.attributes or {})["retrieval.documents.0.document.content"]) == 20_000_000

    limited, exporter = _provider(span_limits=SpanLimits(max_span_attribute_length=1000))
    stats = ShimStats()
    record_answer(
        question="q", answer="a", passages=[("p-1", big)], tracer_provider=limited, stats=stats
    )
    (record,) = _records(exporter.get_finished_spans())
    assert record.truncated and stats.truncated == 1
    assert len(record.passages[0].text) == 1000  # the SDK cut it; the mark says so


@pytest.mark.parametrize("redact", [None, str.upper], ids=["plain", "redacted"])
def test_lone_surrogates_become_replacement_characters_and_the_answer_survives(
    redact: Any, caplog: pytest.LogCaptureFixture
) -> None:
    provider, exporter = _provider(span_limits=SpanLimits(max_span_attributes=12))
    caplog.set_level(logging.DEBUG)
    raw = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # a filename read the POSIX way
    passages = [(f"p-{i}\ud800", f"text {i} {raw}") for i in range(8)]  # some go to overflow
    passages.append({"id": "m", "text": "t", "source": f"dir/{raw}"})  # type: ignore[arg-type]
    record_answer(
        question=f"q {raw}",
        answer=f"a \udcff [1] {raw}",
        passages=passages,
        tracer_provider=provider,
        redact=redact,
    )
    (span,) = exporter.get_finished_spans()
    assert "citemon.passages.overflow" in (span.attributes or {})
    (record,) = _records([span])
    up = redact or (lambda s: s)
    assert record.question == up("q caf\ufffd \ufffd")
    assert record.answer == up("a \ufffd [1] caf\ufffd \ufffd")
    assert [p.id for p in record.passages][:3] == ["p-0\ufffd", "p-1\ufffd", "p-2\ufffd"]
    assert record.passages[7].text == up("text 7 caf\ufffd \ufffd")
    assert record.passages[8].source == "dir/caf\ufffd \ufffd"
    assert not record.truncated
    # The OTLP encoder had nothing to drop (it logs "Failed to encode key …" when it does).
    assert not [r for r in caplog.records if "Failed to encode" in r.getMessage()]


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


@pytest.mark.parametrize("exc", [ValueError("host failed"), Unprintable()], ids=type)
def test_the_hosts_exception_propagates_unchanged_and_the_span_ends_in_error(
    exc: Exception,
) -> None:
    provider, exporter = _provider()
    stats = ShimStats()

    def handler() -> None:
        with answer_span("q", tracer_provider=provider, stats=stats) as s:
            s.set_passages([("p-1", "t")])
            raise exc

    with pytest.raises(type(exc)) as caught:
        handler()
    assert caught.value is exc  # the same object, not a wrapper
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert frames[-1].name == "handler" and frames[-1].line == "raise exc"
    (span,) = exporter.get_finished_spans()
    assert span.end_time is not None
    assert span.status.status_code is StatusCode.ERROR
    if isinstance(exc, ValueError):
        assert span.status.description == "ValueError: host failed"
        assert [e.name for e in span.events] == ["exception"]
        assert span.events[0].attributes is not None
        assert span.events[0].attributes["exception.type"] == "ValueError"
        assert stats.errors == 0
    else:
        # str(exc) raises: the status still says what it was; the SDK's record_exception (which
        # calls str() too) failed, was counted and swallowed.
        assert span.status.description == "Unprintable"
        assert stats.errors == 1


def test_a_host_exception_with_a_raising_exporter_is_still_only_the_hosts() -> None:
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(RaisingExporter()))
    err = KeyError("k")
    with pytest.raises(KeyError) as caught, answer_span("q", tracer_provider=provider):
        raise err
    assert caught.value is err and caught.value.__context__ is None


# -- 2. the attribute contract --------------------------------------------------------------------


def _check_contract(attrs: dict[str, Any]) -> None:
    for key, value in attrs.items():
        assert CONTRACT.fullmatch(key), f"{key} is not in the span contract"
        want = TYPES.get(key) or TYPES[key.rsplit(".", 1)[1]]
        assert type(value) is want, f"{key} is {type(value).__name__}, not {want.__name__}"
    assert attrs["openinference.span.kind"] == "CHAIN"
    for key, value in attrs.items():
        if key.endswith(".metadata"):
            assert isinstance(json.loads(value), dict)


def test_every_attribute_is_in_the_contract_with_its_type_and_nothing_secret() -> None:
    provider, exporter = _provider()
    secret = "sk-live-0123456789abcdef"
    passages = [
        {
            "id": "p-1",
            "text": "t",
            "score": 0.5,
            "source": "a.md",
            "api_key": secret,
            "headers": {"Authorization": f"Bearer {secret}"},
        },
        ("p-2", "u"),
    ]
    with answer_span("q", tracer_provider=provider) as s:
        s.set_passages(passages)
        s.set_answer("a [p-1]")
    (span,) = exporter.get_finished_spans()
    attrs = dict(span.attributes or {})
    _check_contract(attrs)
    assert span.name == "rag.answer" and span.kind is trace.SpanKind.INTERNAL
    assert set(attrs) == {
        "openinference.span.kind",
        "input.value",
        "output.value",
        "citemon.passages.count",
        "citemon.truncated",
        *(f"retrieval.documents.0.document.{f}" for f in ("id", "content", "score", "metadata")),
        "retrieval.documents.1.document.id",
        "retrieval.documents.1.document.content",
    }
    assert secret not in repr(attrs) and "Authorization" not in repr(attrs)
    # Resource attributes are the host's (its TracerProvider's); the shim adds none.
    assert dict(span.resource.attributes) == dict(RESOURCE.attributes)


def _record_both(
    n: int, provider_kwargs: dict[str, Any], redact: Any = None
) -> tuple[ReadableSpan, ReadableSpan]:
    passages = _passages(n)
    p1, e1 = _provider(**provider_kwargs)
    with answer_span("the question", tracer_provider=p1, redact=redact) as s:
        s.set_passages(passages)
        s.set_answer("the answer [p-0]")
    p2, e2 = _provider(**provider_kwargs)
    record_answer(
        question="the question",
        answer="the answer [p-0]",
        passages=passages,
        tracer_provider=p2,
        redact=redact,
    )
    (a,) = e1.get_finished_spans()
    (b,) = e2.get_finished_spans()
    return a, b


@pytest.mark.parametrize("n", [0, 1, 50, 500])
def test_passages_round_trip_through_the_monitors_decoder(n: int) -> None:
    a, b = _record_both(n, {})
    assert dict(a.attributes or {}) == dict(b.attributes or {})
    attrs = dict(a.attributes or {})
    _check_contract(attrs)
    assert a.dropped_attributes == 0 and len(attrs) <= 128
    assert attrs["citemon.passages.count"] == n
    assert ("citemon.passages.overflow" in attrs) is (n >= 50)
    for span in (a, b):
        (record,) = _records([span])
        assert record.passages == _expected(_passages(n))
        assert not record.truncated
        assert (record.question, record.answer) == ("the question", "the answer [p-0]")
        assert (record.service, record.version, record.environment) == (
            "support-bot",
            "2026.11.3",
            "prod",
        )


@pytest.mark.parametrize("n", [1, 50, 500])
@pytest.mark.parametrize("max_attrs", [6, 7, 16])
def test_the_overflow_path_under_tight_attribute_limits(n: int, max_attrs: int) -> None:
    a, b = _record_both(n, {"span_limits": SpanLimits(max_span_attributes=max_attrs)})
    assert dict(a.attributes or {}) == dict(b.attributes or {})
    _check_contract(dict(a.attributes or {}))
    assert a.dropped_attributes == 0  # the shim planned within the limit: the SDK dropped nothing
    (record,) = _records([a])
    assert record.passages == _expected(_passages(n))
    assert not record.truncated


def test_a_value_length_limit_too_short_for_the_overflow_marks_truncated() -> None:
    limits = SpanLimits(max_span_attributes=10, max_span_attribute_length=2000)
    a, b = _record_both(50, {"span_limits": limits})
    assert dict(a.attributes or {}) == dict(b.attributes or {})
    attrs = dict(a.attributes or {})
    assert "citemon.passages.overflow" not in attrs and attrs["citemon.truncated"] is True
    (record,) = _records([a])
    assert record.truncated and 0 < len(record.passages) < 50


@pytest.mark.parametrize("n", [0, 1, 50, 500])
def test_record_answer_and_answer_span_agree_with_a_redact_hook(n: int) -> None:
    a, b = _record_both(n, {}, redact=lambda t: t.replace("says", "[redacted]"))
    assert dict(a.attributes or {}) == dict(b.attributes or {})
    assert (a.name, a.kind, a.status.status_code) == (b.name, b.kind, b.status.status_code)
    (record,) = _records([a])
    assert all("says" not in p.text for p in record.passages)
    assert len(record.passages) == n
