"""A ``--passage-store package.module:factory`` plugin for the tests: the specimen's passages,
served from memory (a plugin is the team's own code; this one is the simplest there is)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tests.integration.dialect_traces import PASSAGES

__all__ = ["SpecimenStore", "specimen_store"]


class SpecimenStore:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]:
        self.asked.append(list(ids))
        return {pid: PASSAGES[pid] for pid in ids if pid in PASSAGES}


def specimen_store() -> SpecimenStore:
    return SpecimenStore()
