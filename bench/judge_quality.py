"""Judge quality on the labelled data sets: the learned judge (on pairs it was not trained on)
vs lexical. The data sets are found by ``tests/labelled_data.py`` (``CITEMON_LABELLED_DATA``).

Balanced accuracy against human labels (WiCE: supported vs partially/not supported; ExpertQA:
Complete vs Partial/Incomplete, cited passages with text only). ``learned_cv``: grouped 5-fold
CV within the dataset; ``learned_pooled_cv``: CV over both datasets pooled (how the shipped
weights are trained), scored on this dataset's folds; ``learned_trained_on_other``: trained on
the other dataset only; ``lexical``: the heuristic judge, which has nothing to train.
"""

from __future__ import annotations

from bench._training import quality_report
from citemon.judges.lexical import LexicalJudge
from tests.labelled_data import labelled_data_dir

DATA = labelled_data_dir()


def run() -> None:
    if not DATA.is_dir():
        print(f"skipped: no labelled data at {DATA}")
        return
    figures = quality_report(DATA, baseline=LexicalJudge())
    print(f"balanced accuracy, grouped {figures['k']}-fold CV, partial → {figures['partial']}")
    columns = ("learned_cv", "learned_pooled_cv", "learned_trained_on_other", "baseline")
    header = ("dataset", "pairs", "entailed", "learned CV", "pooled CV", "other→this", "lexical")
    print("  ".join(f"{h:>11}" for h in header))
    for name, row in figures["datasets"].items():
        cells = [name, str(row["pairs"]), str(row["entailed"])]
        cells += [f"{row[c]:.3f}" for c in columns]
        print("  ".join(f"{c:>11}" for c in cells))
