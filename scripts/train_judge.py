"""Train the ``learned`` judge on the labelled data sets and write its weights (and honest figures).

    .venv/bin/python scripts/train_judge.py [--data DIR] [--partial not_entailed]

(``--data`` defaults to ``$CITEMON_LABELLED_DATA``: see ``tests/labelled_data.py``.)

Prints grouped k-fold cross-validated balanced accuracy per dataset (answers grouped for
ExpertQA, cited pages for WiCE), the same on the pooled data, train-on-one/test-on-the-other,
and the lexical judge on the same pairs; then fits on ALL the development data and writes
``monitor/citemon/data/learned_judge.json`` with those figures in its ``meta``. The CV figures
describe models that never saw the pairs they scored; the shipped weights saw everything.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "monitor"), str(REPO)]  # citemon from monitor/, without installing

from bench._training import (  # noqa: E402
    load_expertqa,
    load_wice,
    quality_report,
    train,
)
from citemon.judges.learned import WEIGHTS_RESOURCE  # noqa: E402 (path set above)
from citemon.judges.lexical import LexicalJudge  # noqa: E402
from tests.labelled_data import labelled_data_dir  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=labelled_data_dir())
    parser.add_argument(
        "--partial", choices=("entailed", "not_entailed", "exclude"), default="not_entailed"
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-idf-terms", type=int, default=12000, help="IDF table size cap")
    parser.add_argument(
        "--output", type=Path, default=REPO / "monitor" / "citemon" / "data" / WEIGHTS_RESOURCE
    )
    args = parser.parse_args()

    figures = quality_report(
        args.data, partial=args.partial, k=args.folds, seed=args.seed, baseline=LexicalJudge()
    )
    print(json.dumps(figures, indent=2))

    examples = load_wice(args.data / "wice" / "dev.jsonl", partial=args.partial)
    examples += load_expertqa(args.data / "expertqa" / "val.jsonl", partial=args.partial)
    model = train(examples, max_idf_terms=args.max_idf_terms)
    model.meta = {
        "trained": dt.date.today().isoformat(),
        "trained_on": "WiCE dev.jsonl + ExpertQA val.jsonl",
        "pairs": len(examples),
        "entailed": sum(ex.entailed for ex in examples),
        "partial": args.partial,
        "balanced_accuracy": figures,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(model.to_json(), separators=(",", ":")) + "\n")
    size = args.output.stat().st_size
    print(f"wrote {args.output} ({size / 1024:.0f} KiB, {len(model.idf)} IDF terms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
