"""The scoring engine: records, claim extraction, per-answer scoring, statistics, excerpts.

Pure: no I/O, no Kafka, no metrics. It asks a judge (:mod:`citemon.judges`) whether passages
entail a claim and turns the verdicts into an :class:`~citemon.engine.records.AnswerScore`.
"""
