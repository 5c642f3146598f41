"""OTLP JSON as the Collector's file exporter writes it, made from a protobuf export request."""

from __future__ import annotations

import base64
import json

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = ["otlp_json"]


def otlp_json(payload: bytes) -> str:
    """``payload`` (an ``ExportTraceServiceRequest``) as one line of OTLP JSON: hex IDs, camelCase
    (``MessageToDict`` writes IDs in base64, as protobuf's JSON mapping does)."""
    obj = MessageToDict(ExportTraceServiceRequest.FromString(payload))
    for rs in obj.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in sp:
                        sp[k] = base64.b64decode(sp[k]).hex()
    return json.dumps(obj)
