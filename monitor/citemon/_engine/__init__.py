"""The scoring engine: claim extraction, per-answer scoring, excerpts (the base types it
reads and writes are :mod:`citemon._core`).

Pure: no I/O, no Kafka, no metrics. It asks a judge (:mod:`citemon.judges`) whether passages
entail a claim and turns the verdicts into an :class:`~citemon._core.records.AnswerScore`.
"""
