"""A loopback server in the exact shape of Hugging Face TEI's ``POST /predict``, for tests.

Text Embeddings Inference (Rust, Docker) cannot be installed here, so this reproduces what its
router does (``router/src/http/server.rs`` and ``types.rs``, read for this purpose):

* ``inputs`` is a string, a pair ``[a, b]``, or a batch ``[[a], [a, b], …]``; a batch gets a
  list of prediction lists back, in input order; anything else is HTTP 422 (axum's JSON
  rejection). ``truncate`` (default the server's ``auto_truncate``, true) and ``raw_scores``.
* A batch over ``max_client_batch_size`` (TEI's default 32) is HTTP 422
  ``{"error": "batch size N > maximum allowed batch size M", "error_type": "validation"}``;
  an empty batch is 400 ``error_type: "empty"``; a body over ``payload_limit`` bytes is 413
  (axum's body limit, plain text); a pair over ``max_input_length`` tokens without ``truncate``
  is 422 ``"`inputs` must have less than M tokens. Given: N"``; with ``truncate`` the longest
  sequence loses tokens from its end (TEI's ``LongestFirst``, direction right).
* Each prediction list holds every label with its score, sorted by score, highest first.
* An ``--api-key`` server wants ``Authorization: Bearer <key>`` (401 otherwise).
* With ``serve_info``, ``GET /info`` answers as TEI's does for a classifier (``model_type``
  ``{"classifier": {"id2label", "label2id"}}``, ``max_input_length``,
  ``max_client_batch_size``…), or with ``info_fault``; without it, 404 (a server in the shape
  that lacks it). ``/info`` requests are kept apart (``info_requests``), take no scripted fault,
  and so leave ``requests``, ``attempts()`` and the fault script to ``/predict``.

The "model": tokens are whitespace words (so test numbers are exact), and the ``entail_label``
score of (premise, hypothesis) is the share of the hypothesis' content words found in the
premise (:func:`tests.judge_server.content_word_rule`'s words), the rest split evenly over the
other labels. Faults (:class:`tests.judge_server.Fault`: status, slow, drop, truncate, raw) are
scripted exactly as for :class:`~tests.judge_server.JudgeServer`, matched on the request body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tests.judge_server import (
    Fault,
    JudgeServer,
    RecordedRequest,
    _content_words,
    _send,
    _send_truncated,
)

__all__ = ["TEIServer", "share_score", "tei_server"]

OVERLOADED = '{"error": "Model is overloaded", "error_type": "overloaded"}'
UNHEALTHY = '{"error": "unhealthy", "error_type": "unhealthy"}'


def share_score(premise: str, hypothesis: str) -> float:
    """The share of ``hypothesis``' content words that occur in ``premise`` (1.0 if none)."""
    words = _content_words(hypothesis)
    if not words:
        return 1.0
    return len(words & _content_words(premise)) / len(words)


class TEIServer(JudgeServer):
    """``POST /predict`` as TEI serves it for a sequence-classification model (see module)."""

    def __init__(
        self,
        *,
        labels: Sequence[str] = ("contradiction", "entailment", "neutral"),
        entail_label: str = "entailment",
        max_client_batch_size: int = 32,
        max_input_length: int = 512,
        payload_limit: int = 2_000_000,
        auto_truncate: bool = True,
        api_key: str | None = None,
        latency_s: float = 0.0,
        serve_info: bool = False,
    ) -> None:
        super().__init__(latency_s=latency_s)
        self.labels = list(labels)
        self.entail_label = entail_label
        self.max_client_batch_size = max_client_batch_size
        self.max_input_length = max_input_length
        self.payload_limit = payload_limit
        self.auto_truncate = auto_truncate
        self.api_key = api_key
        self.serve_info = serve_info
        self.info_fault: Fault | None = None
        self.info_requests: list[RecordedRequest] = []
        self.pairs_seen: list[tuple[str, str]] = []  # every pair scored (after truncation)

    @property
    def base_url(self) -> str:
        """TEI's root (``/predict`` hangs off it, no ``/v1``)."""
        return f"http://127.0.0.1:{self._port}"

    def batch_sizes(self) -> list[int]:
        """The batch size of every ``/predict`` request received, in order."""
        with self._lock:
            return [
                len(r.body["inputs"])
                for r in self.requests
                if isinstance(r.body, dict) and isinstance(r.body.get("inputs"), list)
            ]

    def _authorized(self, req: RecordedRequest) -> bool:
        return self.api_key is None or req.headers.get("authorization") == f"Bearer {self.api_key}"

    def _pick_fault(self, text: str) -> Fault | None:
        # A request without a body is a GET /info: scripted faults are for /predict.
        return super()._pick_fault(text) if text else None

    def _info(self) -> dict[str, Any]:
        id2label = {str(i): name for i, name in enumerate(self.labels)}
        return {
            "model_id": "test/classifier",
            "model_sha": None,
            "model_dtype": "float32",
            "served_model_name": "test/classifier",
            "model_type": {
                "classifier": {
                    "id2label": id2label,
                    "label2id": {name: i for i, name in enumerate(self.labels)},
                }
            },
            "max_concurrent_requests": 512,
            "max_input_length": self.max_input_length,
            "max_batch_tokens": 16384,
            "max_batch_requests": None,
            "max_client_batch_size": self.max_client_batch_size,
            "auto_truncate": self.auto_truncate,
            "tokenization_workers": 2,
            "version": "1.9.0",
            "sha": None,
            "docker_label": None,
        }

    def _truncate(self, premise: str, hypothesis: str) -> tuple[str, str]:
        a, b = premise.split(), hypothesis.split()
        while len(a) + len(b) > self.max_input_length:
            if len(a) >= len(b):
                a.pop()
            else:
                b.pop()
        return " ".join(a), " ".join(b)

    def _predict_one(self, seq: list[str], truncate: bool) -> list[dict[str, Any]] | str:
        premise, hypothesis = (seq[0], "") if len(seq) == 1 else (seq[0], seq[1])
        tokens = len(premise.split()) + len(hypothesis.split())
        if tokens > self.max_input_length:
            if not truncate:
                return (
                    f"Input validation error: `inputs` must have less than "
                    f"{self.max_input_length} tokens. Given: {tokens}"
                )
            premise, hypothesis = self._truncate(premise, hypothesis)
        with self._lock:
            self.pairs_seen.append((premise, hypothesis))
        p = share_score(premise, hypothesis)
        others = [name for name in self.labels if name != self.entail_label]
        rest = (1.0 - p) / len(others) if others else 0.0
        scores = {name: (p if name == self.entail_label else rest) for name in self.labels}
        ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
        return [{"score": s, "label": name} for name, s in ranked]

    async def _respond(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        req: RecordedRequest,
        fault: Fault | None,
    ) -> bool:
        if not await self._delay_or_drop(reader, fault):
            return False
        if req.method == "GET" and req.path.split("?")[0] == "/info":
            with self._lock:
                self.requests.remove(req)
                self.info_requests.append(req)
            if not self._authorized(req):
                return await _send(writer, 401, "")
            if not self.serve_info:
                return await _send(writer, 404, "")
            if self.info_fault is not None and self.info_fault.kind == "status":
                return await _send(writer, self.info_fault.status_code, self.info_fault.body)
            return await _send(writer, 200, json.dumps(self._info()))
        if not self._authorized(req):
            return await _send(writer, 401, "")
        if req.method != "POST" or req.path.split("?")[0] != "/predict":
            return await _send(writer, 404, "")
        if fault is not None and fault.kind == "status":
            extra = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            return await _send(writer, fault.status_code, fault.body, extra)
        if fault is not None and fault.kind == "raw":
            return await _send(writer, 200, fault.body)
        size = len(json.dumps(req.body).encode()) if req.body is not None else 0
        if size > self.payload_limit:
            return await _send(
                writer, 413, "Failed to buffer the request body: length limit exceeded"
            )
        body = req.body if isinstance(req.body, dict) else {}
        inputs = body.get("inputs")
        truncate = body.get("truncate")
        truncate = self.auto_truncate if truncate is None else bool(truncate)
        if isinstance(inputs, str):
            batch, single = [[inputs]], True
        elif isinstance(inputs, list) and inputs and all(isinstance(x, str) for x in inputs):
            if len(inputs) > 2:
                return await _send(writer, 422, "Failed to deserialize the JSON body")
            batch, single = [inputs], True
        elif isinstance(inputs, list) and all(
            isinstance(x, list) and len(x) in (1, 2) and all(isinstance(s, str) for s in x)
            for x in inputs
        ):
            batch, single = inputs, False
        else:
            return await _send(writer, 422, "Failed to deserialize the JSON body")
        if not single and len(batch) > self.max_client_batch_size:
            message = (
                f"batch size {len(batch)} > maximum allowed batch size {self.max_client_batch_size}"
            )
            return await _send(
                writer, 422, json.dumps({"error": message, "error_type": "validation"})
            )
        if not batch:
            return await _send(
                writer, 400, json.dumps({"error": "Batch is empty", "error_type": "empty"})
            )
        predictions = [self._predict_one(seq, truncate) for seq in batch]
        refused = next((p for p in predictions if isinstance(p, str)), None)
        if refused is not None:
            return await _send(
                writer, 422, json.dumps({"error": refused, "error_type": "validation"})
            )
        payload = json.dumps(predictions[0] if single else predictions)
        if fault is not None and fault.kind == "truncate":
            return await _send_truncated(writer, payload)
        return await _send(writer, 200, payload)


@pytest.fixture
async def tei_server() -> AsyncIterator[TEIServer]:
    """A fresh :class:`TEIServer` (default limits) running in the test's event loop."""
    async with TEIServer() as server:
        yield server
