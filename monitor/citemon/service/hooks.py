"""Test hooks of the pipeline: one object, passed in, documented, and inert by default.

The process tests need a supervised loop to die on cue, and the unit tests need the intake to
yield before every record or to retry a failed re-read at once. Rather than monkeypatching
module globals, :class:`Pipeline <citemon.service.pipeline.Pipeline>` takes a
:class:`PipelineHooks` (``hooks=``); ``citemon run`` builds one from :data:`FAULT_ENV`
(:meth:`PipelineHooks.from_env`), which is how a test reaches a monitor in another process.
Nothing else reads that variable; unset, every hook is off and every timing is the default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["FAULT_ENV", "LoopFaults", "PipelineHooks"]

FAULT_ENV: Final = "CITEMON_TEST_FAULT"
"""Test-only fault hook: ``citemon-commit@S`` or ``citemon-lag@S`` makes that background loop
raise ``RuntimeError`` once S seconds have passed since start-up (how the process tests make a
supervised task die; nothing else reads it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineHooks:
    """What a test may change in a pipeline's behaviour; the defaults are production's.

    ``fail_loop`` / ``fail_after_s``: the background loop (``citemon-commit`` or
    ``citemon-lag``) that raises ``RuntimeError`` once ``fail_after_s`` seconds have passed
    since the pipeline was built. ``decode_slice_s``: how long decoding one fetch runs before
    it yields to the event loop (0: before every record). ``unlocated_backoff_s``: the wait
    before fetching again after an undecodable fetch whose bad batch a re-read did not find.
    """

    fail_loop: str | None = None
    fail_after_s: float = 0.0
    decode_slice_s: float = 0.02
    unlocated_backoff_s: float = 1.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> PipelineHooks:
        """The hooks :data:`FAULT_ENV` asks for (none when it is unset or empty)."""
        spec = environ.get(FAULT_ENV)
        if not spec:
            return cls()
        name, _, after = spec.partition("@")
        return cls(fail_loop=name, fail_after_s=float(after or 0))


class LoopFaults:
    """:class:`PipelineHooks`' fault, armed at construction: ``check(name)`` raises in the loop
    it names once its time has come."""

    def __init__(self, hooks: PipelineHooks, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._name = hooks.fail_loop
        self._at = clock() + hooks.fail_after_s

    def check(self, name: str) -> None:
        if name == self._name and self._clock() >= self._at:
            raise RuntimeError(f"fault injected by {FAULT_ENV} into {name}")
