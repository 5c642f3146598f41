"""Measuring the instrument on production traffic: review records, blind labels, estimates.

DESIGN.md, "Measuring the instrument on production traffic". :mod:`citemon.review.model` holds
the two shapes everything here passes around: the review record (one sampled answer, with the
text a reviewer needs) and the label (one person's answer about one claim).
"""
