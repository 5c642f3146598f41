"""The one shuffle of citations, used offline (``citemon selftest``) and online (the shuffle
probe of ``citemon run``): every cited claim of an answer gets the citations of another cited
claim (a rotation by a random shift from the caller's seeded RNG), so a judge that reads the
passages must score the shuffled answer worse.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from citemon._core.records import Claim

__all__ = ["rotate_citations", "shuffle_citations"]


def shuffle_citations(claims: Sequence[Claim], order: Sequence[int]) -> list[Claim]:
    """Give the i-th cited claim the citations of cited claim ``order[i]`` (uncited stay so)."""
    cited = [i for i, c in enumerate(claims) if c.cited_ids]
    if sorted(order) != list(range(len(cited))):
        raise ValueError(f"order must be a permutation of range({len(cited)})")
    out = list(claims)
    for slot, source in zip(cited, order, strict=True):
        donor = claims[cited[source]]
        out[slot] = claims[slot].model_copy(
            update={
                "cited_ids": donor.cited_ids,
                "dangling_ids": donor.dangling_ids,
                "resolved_ids": donor.resolved_ids,
                "resolution": donor.resolution,
            }
        )
    return out


def _derangement(n: int, rng: random.Random) -> list[int]:
    """A random permutation moving every element (the identity when n < 2)."""
    if n < 2:
        return list(range(n))
    shift = rng.randrange(1, n)
    return [(i + shift) % n for i in range(n)]


def rotate_citations(claims: Sequence[Claim], rng: random.Random) -> list[Claim] | None:
    """The claims with citations moved between cited sentences so none keeps its own, or
    ``None`` when that changes nothing: fewer than two distinct citation sets."""
    if len({tuple(c.cited_ids) for c in claims if c.cited_ids}) < 2:
        return None
    n_cited = sum(1 for c in claims if c.cited_ids)
    return shuffle_citations(claims, _derangement(n_cited, rng))
