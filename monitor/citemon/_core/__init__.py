"""The bottom layer: the base types every other part of citemon builds on.

Records and verdicts (:mod:`~citemon._core.records`), the judge protocols
(:mod:`~citemon._core.judge`), the errors (:mod:`~citemon._core.errors`), the counts behind every
ratio and the ratios (:mod:`~citemon._core.tally`), interval maths and Cohen's κ
(:mod:`~citemon._core.stats`), the calibration file and its correction
(:mod:`~citemon._core.calibration`), text utilities (:mod:`~citemon._core.text`), the label values
(:mod:`~citemon._core.labels`), the shuffle probe's counts (:mod:`~citemon._core.probe`) and the
settings mechanism (:mod:`~citemon._core.settings`).

Imports nothing of citemon above it (``tests/unit/test_layers.py`` keeps it so).
"""
