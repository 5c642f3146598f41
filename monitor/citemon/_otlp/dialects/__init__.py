"""Trace dialects: where each family of instrumentations keeps the passages and the answer
(docs/dialects.md). A new dialect is one module with a class implementing
:class:`~citemon._otlp.dialects.base.Dialect`, added to :data:`DIALECTS`.

Every span is offered to the dialects in this order; the first that reads something from it
wins. OpenInference comes first (it is also the citemon shim's), the OpenTelemetry GenAI
conventions last (other dialects emit some ``gen_ai.*`` attributes too: the Vercel AI SDK's
model turns, for one).
"""

from __future__ import annotations

from typing import Final

from citemon._otlp.dialects.base import Dialect
from citemon._otlp.dialects.genai import GenAI
from citemon._otlp.dialects.mlflow import MLflow
from citemon._otlp.dialects.openinference import OpenInference
from citemon._otlp.dialects.openllmetry import OpenLLMetry
from citemon._otlp.dialects.vercel import Vercel

__all__ = ["DIALECTS", "Dialect"]

DIALECTS: Final[tuple[Dialect, ...]] = (
    OpenInference(),
    OpenLLMetry(),
    MLflow(),
    Vercel(),
    GenAI(),
)
"""The dialects citemon reads, in the order they are tried on each span."""
