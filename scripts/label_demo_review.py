"""Label the demo's review set with the demo's known truth, as a careful reviewer would.

    .venv/bin/citemon demo --offline --review /tmp/review   # or the live demo with --review
    .venv/bin/python scripts/label_demo_review.py /tmp/review/review-set.jsonl \
        /tmp/review/labels.jsonl

For the worked example only (``docs/review.md``): real labels come from people
(``citemon review serve``, or Label Studio). Every cited claim of the set gets the label
:func:`citemon._demo.review.truth_label` gives it, and, where the label contradicts citemon's
verdict (as the review page asks), the checker cause the demo planted (``overlap``, ``fused``);
reviewer ``demo-truth``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from citemon._demo.review import truth_label
from citemon._review.model import Label, append_label, read_review_records

__all__ = ["label_review_set"]


def label_review_set(review_set: Path, labels: Path, *, reviewer: str = "demo-truth") -> int:
    """Append a label per cited claim of ``review_set`` to ``labels``; returns how many."""
    written = 0
    for record in read_review_records(review_set):
        for claim in record.claims:
            if not claim.cited_ids:
                continue  # nothing to check: the review page shows cited claims
            truth = truth_label(claim.text, claim.cited_ids)
            if truth is None:
                raise SystemExit(f"{record.trace_id} claim {claim.claim}: not a demo claim")
            label, cause = truth
            # The review page asks why only where the label contradicts the verdict (and always
            # for not_a_claim); the reviewer then names the cause the demo planted.
            disagrees = label == "not_a_claim" or (label == "entailed") != (
                claim.verdict == "correct"
            )
            append_label(
                labels,
                Label(
                    trace_id=record.trace_id,
                    claim=claim.claim,
                    text=claim.text,
                    cited_ids=claim.cited_ids,
                    label=label,
                    checker=cause if disagrees else None,
                    reviewer=reviewer,
                    verdict=claim.verdict,
                    service=record.service,
                    version=record.version,
                ),
            )
            written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("review_set", type=Path)
    parser.add_argument("labels", type=Path, help="labels file to append to")
    args = parser.parse_args(argv)
    n = label_review_set(args.review_set, args.labels)
    print(f"{n} labels appended to {args.labels}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
