"""Is the judge right: calibration against human labels, the offline self-test, and the online
shuffle probe (the judge's checks; deploy statistics are :mod:`citemon._rollout`).
"""
