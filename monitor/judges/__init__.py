"""Judges: what decides whether passages entail a claim."""

from monitor.judges.base import Judge

__all__ = ["Judge"]
