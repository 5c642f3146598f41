"""A small review set for the review page and Label Studio tests.

Four answers, eight cited claims (and one uncited claim, which gets no task), with every verdict
kind a reviewer meets, a passage cut at the cap, a cited ID without text, and a passage whose
text is hostile markup (a ``<script>`` and an ``<img onerror>`` that would set
``window.__pwned`` if the page ever put passage text in as HTML).
"""

from __future__ import annotations

from pathlib import Path

from citemon._review.model import ReviewClaim, ReviewRecord

__all__ = ["HOSTILE", "review_records", "write_long_answer_set", "write_review_set"]

HOSTILE = (
    'Ignore the claim. <script>window.__pwned = "script"</script>'
    "<img src=x onerror=\"window.__pwned = 'img'\"> The Eiffel Tower is 330 metres tall."
)


def review_records() -> list[ReviewRecord]:
    return [
        ReviewRecord(
            trace_id="a" * 32,
            service="docs-rag",
            version="v2",
            question="How tall is the Eiffel Tower, and when was it built?",
            answer="The Eiffel Tower is 330 metres tall [p-1]. It was completed in 1889 [p-2].",
            passages={
                "p-1": HOSTILE,
                "p-2": "Construction finished in March 1889, for the World's Fair.",
            },
            claims=[
                ReviewClaim(
                    claim=0,
                    sentence=0,
                    text="The Eiffel Tower is 330 metres tall.",
                    cited_ids=["p-1"],
                    verdict="correct",
                ),
                ReviewClaim(
                    claim=1,
                    sentence=1,
                    text="It was completed in 1889.",
                    cited_ids=["p-2"],
                    verdict="unsupported",
                    reason="the passage does not name the tower",
                ),
            ],
        ),
        ReviewRecord(
            trace_id="b" * 32,
            service="docs-rag",
            version="v2",
            question="What does the retry policy do?",
            answer=(
                "Requests are retried three times with exponential backoff [d-7]. "
                "The client gives up after 30 seconds and logs the error [d-8]. "
                "Retries are safe."
            ),
            passages={
                "d-7": "Failed requests are retried up to three times, with exponential backoff.",
                "d-8": "After 30 seconds without an answer the client stops waiting. " * 8,
                "d-9": "Every error the client gives up on is logged at WARNING.",
            },
            passages_cut=["d-8"],
            claims=[
                ReviewClaim(
                    claim=0,
                    sentence=0,
                    text="Requests are retried three times with exponential backoff.",
                    cited_ids=["d-7"],
                    verdict="correct",
                ),
                ReviewClaim(
                    claim=1,
                    sentence=1,
                    text="The client gives up after 30 seconds and logs the error.",
                    cited_ids=["d-8"],
                    verdict="multi_hop",
                    supported_by=["d-8", "d-9"],
                ),
                ReviewClaim(claim=2, sentence=2, text="Retries are safe.", verdict="uncited"),
            ],
        ),
        ReviewRecord(
            trace_id="c" * 32,
            service="docs-rag",
            version="v3",
            question="Which regions is the service available in?",
            answer="It runs in eu-west-1 and us-east-2 [r-1][r-9].",
            passages={
                "r-1": "The service is deployed in eu-west-1.",
                "r-2": "A second deployment serves us-east-2 and eu-west-1.",
            },
            claims=[
                ReviewClaim(
                    claim=0,
                    sentence=0,
                    text="It runs in eu-west-1 and us-east-2.",
                    cited_ids=["r-1", "r-9"],
                    verdict="dangling",
                ),
            ],
        ),
        ReviewRecord(
            trace_id="d" * 32,
            service="docs-rag",
            version="v3",
            question="How is the cache invalidated?",
            answer=(
                "Entries expire after ten minutes [c-1]. A write to a key evicts it at once [c-1]. "
                "See the cache guide [c-2]."
            ),
            passages={
                "c-1": "Cache entries expire ten minutes after they are written.",
                "c-2": "The cache guide covers eviction: writing a key evicts it immediately.",
            },
            claims=[
                ReviewClaim(
                    claim=0,
                    sentence=0,
                    text="Entries expire after ten minutes.",
                    cited_ids=["c-1"],
                    verdict="correct",
                ),
                ReviewClaim(
                    claim=1,
                    sentence=1,
                    text="A write to a key evicts it at once.",
                    cited_ids=["c-1"],
                    verdict="misattributed",
                    supported_by=["c-2"],
                    overlap=True,
                ),
                ReviewClaim(
                    claim=2,
                    sentence=2,
                    text="See the cache guide.",
                    cited_ids=["c-2"],
                    verdict="unjudged",
                    unjudged_cause="judge_failure",
                ),
            ],
        ),
    ]


def write_review_set(path: Path) -> Path:
    path.write_text("".join(r.to_json() + "\n" for r in review_records()), encoding="utf-8")
    return path


def write_long_answer_set(path: Path) -> Path:
    """One answer of 200 sentences whose cited claims are sentences 150 and 151."""
    sentences = [f"Filler sentence {i} says nothing the reviewer needs." for i in range(200)]
    sentences[150] = "The Eiffel Tower is 330 metres tall [p-1]."
    sentences[151] = "It was completed in 1889 [p-2]."
    record = ReviewRecord(
        trace_id="a" * 32,
        question="How tall is the Eiffel Tower, and when was it built?",
        answer=" ".join(sentences),
        passages={
            "p-1": "The Eiffel Tower is 330 metres tall, antennas included. " * 3,
            "p-2": "Construction finished in March 1889, for the World's Fair.",
        },
        claims=[
            ReviewClaim(claim=0, sentence=150, text=sentences[150].replace(" [p-1]", ""),
                        cited_ids=["p-1"], verdict="correct"),
            ReviewClaim(claim=1, sentence=151, text=sentences[151].replace(" [p-2]", ""),
                        cited_ids=["p-2"], verdict="unsupported"),
        ],
    )  # fmt: skip
    path.write_text(record.to_json() + "\n", encoding="utf-8")
    return path
