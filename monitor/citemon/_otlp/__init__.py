"""OpenTelemetry input: OTLP decoding, span → answer mapping, trace assembly, OTLP files.

Spans in (protobuf from Kafka, OTLP JSON lines from a file), answer records
(:class:`~citemon._core.records.AnswerRecord`) out.
"""
