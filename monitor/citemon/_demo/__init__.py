"""The demo (``citemon demo``, the tests, the benchmarks): a synthetic help centre with known
citation faults, and a small fake RAG service that records its answers with the shim.

Not used by the monitor itself.
"""
