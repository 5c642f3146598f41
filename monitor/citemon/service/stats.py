"""What the pipeline did, counted as it goes and logged at shutdown."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PipelineStats"]


@dataclass(slots=True)
class PipelineStats:
    """What the pipeline did; logged at shutdown (the metrics hold the same, per label)."""

    records: int = 0
    answers_started: int = 0
    answers_committed: int = 0
    sampled_out: int = 0
    skipped: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    answer_retries: int = 0
    unjudged_after_retries: int = 0
    commits: int = 0
    commit_failures: int = 0
    cancelled_at_drain: int = 0
    cancelled_at_revoke: int = 0
    rebalances: int = 0
    undecodable_batches: int = 0
    rewound_partitions: int = 0
    partitions_lost: int = 0
