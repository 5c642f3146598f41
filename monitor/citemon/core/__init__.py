"""The bottom layer: the base types every other part of citemon builds on.

Records and verdicts (:mod:`~citemon.core.records`), the judge protocols
(:mod:`~citemon.core.judge`), the errors (:mod:`~citemon.core.errors`), the counts behind every
ratio and the ratios (:mod:`~citemon.core.tally`), interval maths and Cohen's κ
(:mod:`~citemon.core.stats`), the calibration file and its correction
(:mod:`~citemon.core.calibration`), text utilities (:mod:`~citemon.core.text`), the label values
(:mod:`~citemon.core.labels`), the shuffle probe's counts (:mod:`~citemon.core.probe`) and the
settings mechanism (:mod:`~citemon.core.settings`).

Imports nothing of citemon above it (``tests/unit/test_layers.py`` keeps it so).
"""
