"""The OpenTelemetry shim a RAG service imports (see its own issue)."""

__all__: list[str] = []
