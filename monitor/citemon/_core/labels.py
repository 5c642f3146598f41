"""The label values every layer agrees on: what an unknown or overflowing label reads as."""

from __future__ import annotations

from typing import Final

__all__ = ["OTHER", "UNKNOWN"]

OTHER: Final = "other"
"""The label value overflowing services, versions and environments are folded into."""

UNKNOWN: Final = "unknown"
"""The label value for an answer whose span carried no service, version or environment.

Not the empty string: Prometheus treats ``service=""`` as a missing label, which breaks
``sum by (service, …)`` joins in the rules.
"""
