"""``gen_ai.evaluation.result`` events (``citemon run --evaluation-events``): what they say, the
trace context they carry, and the bounded, counted, never-blocking way they leave.

The exporters are real: the SDK's in-memory log exporter where only the records matter, the
OTLP/HTTP log exporter against real loopback sockets where the network's behaviour matters (a
port nobody listens on; a listener that never accepts, so a request hangs until the test closes
it). The Collector path is ``tests/integration/test_evaluation_events.py``.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
from prometheus_client import CollectorRegistry

from citemon._core.errors import ConfigError
from citemon._core.records import VERDICTS, AnswerScore, ClaimResult
from citemon._demo.data import specimen
from citemon._engine.scoring import Scorer
from citemon._metrics import Metrics
from citemon._service.evaluation_events import (
    ACCURACY,
    EVENT_NAME,
    FAITHFULNESS,
    MAX_EXPLANATION_CHARS,
    EvaluationEvents,
    evaluation_events,
    otlp_log_exporter,
)
from citemon._service.settings import settings_from_args
from citemon.cli import build_parser, main
from tests.oracles import SPECIMEN_TRUTH, OracleJudge

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"
ZERO_VERDICTS = {f"citemon.verdicts.{v}": 0 for v in VERDICTS}


async def _specimen_score(trace_id: str = TRACE_ID) -> AnswerScore:
    record = specimen().model_copy(update={"trace_id": trace_id, "span_id": SPAN_ID})
    return await Scorer(OracleJudge(SPECIMEN_TRUTH)).score(record)


def _claim(verdict: str, faithful: bool | None, cited: list[str]) -> ClaimResult:
    return ClaimResult(sentence=0, text="x", cited_ids=cited, verdict=verdict, faithful=faithful)  # type: ignore[arg-type]


def _metric(registry: CollectorRegistry, outcome: str) -> float | None:
    return registry.get_sample_value("citemon_evaluation_events_total", {"outcome": outcome})


async def _until(condition: object, timeout_s: float, what: str) -> None:
    """Poll ``condition()`` until true (synchronising on a state, with a deadline)."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


# -- what the events say -------------------------------------------------------------------------


async def test_the_specimen_gives_accuracy_one_third_fail_and_faithfulness_one_pass() -> None:
    score = await _specimen_score()
    accuracy, faithfulness = evaluation_events(score, SPAN_ID)
    verdicts = ZERO_VERDICTS | {"citemon.verdicts.correct": 1, "citemon.verdicts.misattributed": 2}
    assert accuracy.attributes == verdicts | {
        "gen_ai.evaluation.name": ACCURACY,
        "gen_ai.evaluation.score.value": 1 / 3,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": (
            "2 of 3 cited claims failed: claim 2: misattributed (first_retrieved) [p-3310]; "
            "claim 3: misattributed (other) [p-3312]"
        ),
    }
    assert faithfulness.attributes == verdicts | {
        "gen_ai.evaluation.name": FAITHFULNESS,
        "gen_ai.evaluation.score.value": 1.0,
        "gen_ai.evaluation.score.label": "pass",
        "gen_ai.evaluation.explanation": "all 3 judged claims supported by the retrieved passages",
    }
    assert {(e.trace_id, e.span_id) for e in (accuracy, faithfulness)} == {(TRACE_ID, SPAN_ID)}


def test_no_citations_and_nothing_judged_have_no_score_value() -> None:
    uncited = AnswerScore(claims=[_claim("uncited", False, []), _claim("uncited", True, [])])
    accuracy, faithfulness = evaluation_events(uncited, None)
    assert accuracy.attributes["gen_ai.evaluation.score.label"] == "no_citations"
    assert "gen_ai.evaluation.score.value" not in accuracy.attributes
    assert faithfulness.attributes["gen_ai.evaluation.score.value"] == 0.5
    assert faithfulness.attributes["gen_ai.evaluation.explanation"] == (
        "1 of 2 judged claims not supported by the retrieved passages: claim 1"
    )
    unjudged = AnswerScore(claims=[_claim("unjudged", None, ["p1"])])
    accuracy, faithfulness = evaluation_events(unjudged, None)
    assert accuracy.attributes["gen_ai.evaluation.score.label"] == "no_citations"
    assert faithfulness.attributes == ZERO_VERDICTS | {
        "citemon.verdicts.unjudged": 1,
        "gen_ai.evaluation.name": FAITHFULNESS,
        "gen_ai.evaluation.explanation": "no claim was judged",
    }


def test_the_explanation_is_capped_and_names_at_most_eight_claims() -> None:
    long_id = "p-" + "9" * 300
    score = AnswerScore(claims=[_claim("unsupported", False, [long_id]) for _ in range(20)])
    accuracy, faithfulness = evaluation_events(score, None)
    text = str(accuracy.attributes["gen_ai.evaluation.explanation"])
    assert len(text) == MAX_EXPLANATION_CHARS and text.endswith("…")
    assert text.startswith("20 of 20 cited claims failed: claim 1: unsupported [p-999")
    assert accuracy.attributes["gen_ai.evaluation.score.value"] == 0.0
    assert faithfulness.attributes["gen_ai.evaluation.explanation"] == (
        "20 of 20 judged claims not supported by the retrieved passages: "
        "claim 1, 2, 3, 4, 5, 6, 7, 8 and 12 more"
    )


# -- the records the SDK sends -------------------------------------------------------------------


async def test_each_event_carries_the_answer_spans_trace_context_and_is_counted_sent() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    exporter = InMemoryLogRecordExporter()
    events = EvaluationEvents(metrics.evaluation_events, exporter=exporter, schedule_delay_ms=10)
    assert {_metric(registry, o) for o in ("sent", "dropped", "failed")} == {0.0}
    scores = [await _specimen_score(f"{i + 1:032x}") for i in range(3)]
    for score in scores:
        events.answer_counted(score, SPAN_ID)
    # An answer whose IDs are not W3C's still gets its events, without a trace context.
    events.answer_counted(AnswerScore(trace_id="not-hex"), "nope")
    await events.aclose()
    records = [r.log_record for r in exporter.get_finished_logs()]
    assert len(records) == 8
    assert {r.event_name for r in records} == {EVENT_NAME}
    with_context = [(r.trace_id, r.span_id) for r in records if r.trace_id]
    assert sorted(with_context) == sorted(
        (int(s.trace_id or "", 16), int(SPAN_ID, 16)) for s in scores for _ in range(2)
    )
    assert [r.trace_id for r in records if not r.trace_id] == [0, 0]  # the "not-hex" answer
    assert all(r.timestamp for r in records)
    names = [r.attributes["gen_ai.evaluation.name"] for r in records if r.attributes]
    assert names == [ACCURACY, FAITHFULNESS] * 4
    assert events.totals == {"sent": 8, "dropped": 0, "failed": 0}
    assert _metric(registry, "sent") == 8
    events.answer_counted(scores[0], SPAN_ID)  # after close: nothing, not even a count
    assert events.totals["sent"] == 8 and len(exporter.get_finished_logs()) == 8


# -- a slow or absent endpoint -------------------------------------------------------------------


@pytest.fixture
def silent_endpoint() -> Iterator[socket.socket]:
    """A loopback listener that never accepts: the kernel completes the TCP handshake, so an
    OTLP request is sent and then waits for an answer until the socket is closed."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock
    finally:
        sock.close()


def _http_exporter(port: int, timeout_s: float) -> OTLPLogExporter:
    return OTLPLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs", timeout=timeout_s)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_a_full_queue_drops_and_counts_without_waiting(
    silent_endpoint: socket.socket,
) -> None:
    """Queue of 4, an endpoint that hangs: 4 events are admitted, the next 16 are refused at
    once and counted ``dropped``; the 4 fail when the endpoint goes, none is counted twice."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    port = silent_endpoint.getsockname()[1]
    events = EvaluationEvents(
        metrics.evaluation_events, exporter=_http_exporter(port, 2.0), max_queue=4
    )
    score = await _specimen_score()
    for _ in range(10):
        events.answer_counted(score, SPAN_ID)
    # Counted as they were refused, while the first batch still hangs on the endpoint.
    assert events.totals == {"sent": 0, "dropped": 16, "failed": 0}
    assert events.pending == 4
    assert _metric(registry, "dropped") == 16
    silent_endpoint.close()  # the hanging request is reset; the retry finds nobody listening
    await _until(lambda: events.pending == 0, 30, "the admitted events to fail")
    assert events.totals == {"sent": 0, "dropped": 16, "failed": 4}
    await events.aclose()
    assert events.totals == {"sent": 0, "dropped": 16, "failed": 4}
    assert (_metric(registry, "sent"), _metric(registry, "failed")) == (0, 4)


async def test_an_unreachable_endpoint_counts_every_event_failed() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    events = EvaluationEvents(
        metrics.evaluation_events,
        exporter=_http_exporter(_closed_port(), 1.0),
        schedule_delay_ms=10,
    )
    score = await _specimen_score()
    for _ in range(3):
        events.answer_counted(score, SPAN_ID)
    await _until(lambda: events.pending == 0, 30, "the events to fail")
    await events.aclose()
    assert events.totals == {"sent": 0, "dropped": 0, "failed": 6}
    assert _metric(registry, "failed") == 6


async def test_closing_gives_up_on_a_stuck_endpoint_and_counts_the_rest_dropped(
    silent_endpoint: socket.socket,
) -> None:
    port = silent_endpoint.getsockname()[1]
    events = EvaluationEvents(
        lambda outcome, n: None, exporter=_http_exporter(port, 3.0), schedule_delay_ms=10
    )
    events.answer_counted(await _specimen_score(), SPAN_ID)
    await _until(lambda: events.pending == 2, 5, "both events admitted")
    await events.aclose(timeout_s=0.3)
    # Had it waited for the export, the events would be counted failed, not dropped.
    assert events.totals == {"sent": 0, "dropped": 2, "failed": 0}
    assert events.pending == 0
    silent_endpoint.close()  # the abandoned export fails now…
    (closing,) = [t for t in threading.enumerate() if t.name == "citemon-events-close"]
    await asyncio.to_thread(closing.join, 30)
    assert not closing.is_alive()
    assert events.totals == {"sent": 0, "dropped": 2, "failed": 0}  # …and is not counted again


# -- configuration -------------------------------------------------------------------------------


def test_the_flag_and_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    assert settings_from_args(parser.parse_args(["run"])).evaluation_events is False
    on = settings_from_args(parser.parse_args(["run", "--evaluation-events"]))
    assert on.evaluation_events is True and on.evaluation_events_max_queue == 2048
    monkeypatch.setenv("CITEMON_EVALUATION_EVENTS", "true")
    monkeypatch.setenv("CITEMON_EVALUATION_EVENTS_MAX_QUEUE", "16")
    parser = build_parser()  # a flag's default is its variable, read as the parser is built
    from_env = settings_from_args(parser.parse_args(["run"]))
    assert (from_env.evaluation_events, from_env.evaluation_events_max_queue) == (True, 16)
    with pytest.raises(ConfigError, match="evaluation_events_max_queue"):
        settings_from_args(parser.parse_args(["run", "--evaluation-events-max-queue", "0"]))


class _Receiver:
    """A real OTLP/HTTP endpoint on loopback: answers 200 and keeps each request's path and
    decoded ``ExportLogsServiceRequest``."""

    def __init__(self) -> None:
        self.received: list[tuple[str, ExportLogsServiceRequest]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path, ExportLogsServiceRequest.FromString(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_the_standard_variables_choose_the_endpoint_and_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = _Receiver()
    try:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "citemon-eu-1")
        events = EvaluationEvents(lambda outcome, n: None, exporter=otlp_log_exporter())
        events.answer_counted(await _specimen_score(), SPAN_ID)
        await events.aclose()
        assert events.totals == {"sent": 2, "dropped": 0, "failed": 0}
    finally:
        receiver.close()
    ((path, request),) = receiver.received
    assert path == "/v1/logs"  # OTLP/HTTP by default, the signal path after the base endpoint
    (resource_logs,) = request.resource_logs
    resource = {a.key: a.value.string_value for a in resource_logs.resource.attributes}
    assert resource["service.name"] == "citemon-eu-1"
    records = [r for scope in resource_logs.scope_logs for r in scope.log_records]
    assert [(r.event_name, r.trace_id.hex(), r.span_id.hex()) for r in records] == [
        (EVENT_NAME, TRACE_ID, SPAN_ID)
    ] * 2
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
        OTLPLogExporter as GrpcExporter,
    )

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "grpc")
    assert isinstance(otlp_log_exporter(), GrpcExporter)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="unsupported OTLP protocol 'http/json'"):
        otlp_log_exporter()


def test_without_the_exporter_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", raising=False)
    # As if opentelemetry-exporter-otlp-proto-http were not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http._log_exporter", None)
    with pytest.raises(ConfigError) as err:
        otlp_log_exporter()
    assert str(err.value) == (
        "--evaluation-events needs the OTLP log exporter (opentelemetry-exporter-otlp-proto-http:"
        " opentelemetry.exporter.otlp.proto.http._log_exporter is not installed): "
        "pip install 'citemon[events]'"
    )
    # `citemon run` says so and exits 2 before it touches Kafka (nothing listens on port 1).
    argv = ["run", "--evaluation-events", "--bootstrap-servers", "127.0.0.1:1"]
    assert main([*argv, "--metrics-port", "0"]) == 2
    assert "pip install 'citemon[events]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "citemon"),
        (
            {"OTEL_RESOURCE_ATTRIBUTES": "service.name=rag-evals,deployment.environment=eu"},
            "rag-evals",
        ),
        ({"OTEL_SERVICE_NAME": "citemon-eu-1"}, "citemon-eu-1"),
    ],
)
async def test_the_service_name_is_citemon_unless_the_resource_variables_say_otherwise(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exporter = InMemoryLogRecordExporter()
    events = EvaluationEvents(lambda outcome, n: None, exporter=exporter)
    events.answer_counted(AnswerScore(), None)
    await events.aclose()
    (first, _) = exporter.get_finished_logs()
    assert first.resource.attributes["service.name"] == expected
