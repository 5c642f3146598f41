"""Serve the blind review page for one reviewer on a review set (127.0.0.1 unless --host).

One task per cited claim: the question, the claim in its answer, the cited passages with the
words the claim shares marked. Keys 1-4 give the label (entailed, partial, not entailed, not a
claim); citemon's verdict is shown only then, and where it disagrees, o/f/s/x say why (overlap,
fused, strict, other) or Enter gives no reason; u undoes. Each label is appended to the labels
file (fsynced) before the page moves on; reloading resumes at the first unlabelled claim.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from citemon._review.page import ReviewPage, ReviewServer
from citemon._review.tasks import load_review_set

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        required=True,
        type=Path,
        dest="review_set",
        metavar="SET.jsonl",
        help="the review set (review records, JSON lines)",
    )
    parser.add_argument(
        "--labels",
        required=True,
        type=Path,
        metavar="LABELS.jsonl",
        help="the labels file: labels are appended to it (made if missing)",
    )
    parser.add_argument("--reviewer", required=True, help="who is labelling (kept in each label)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default 0: any free port, printed)"
    )


def main(args: argparse.Namespace) -> int:
    page = ReviewPage(load_review_set(args.review_set), args.labels, args.reviewer)
    server = ReviewServer(page, host=args.host, port=args.port)
    total = len(page.review_set.tasks)
    print(
        f"review page: {server.url}  ({page.labelled} / {total} labelled by {args.reviewer};"
        " Ctrl-C to stop)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print(f"{page.labelled} / {total} labelled; labels in {args.labels}", file=sys.stderr)
    return 0
