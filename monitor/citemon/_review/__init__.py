"""Measuring the instrument on production traffic: review records, blind labels, estimates.

docs/design.md, "Review loop and estimates". :mod:`citemon._review.model` holds
the two shapes everything here passes around: the review record (one sampled answer, with the
text a reviewer needs) and the label (one person's answer about one claim).
"""
