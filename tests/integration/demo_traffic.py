"""The demo's RAG service answering at a steady rate in a thread (paced by schedule, as
``citemon demo`` paces it), for the time-to-detect benchmark and the rollout-gate test."""

from __future__ import annotations

import threading
import time

from citemon._demo.service import FakeRAGService

__all__ = ["Traffic"]


class Traffic:
    """``with Traffic(bootstrap, topic, rate) as t:`` serves v1; ``t.service.deploy(...)``
    switches versions while it runs."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.service = FakeRAGService(bootstrap, topic)
        self.service.deploy("v1")
        self.rate = rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        start, n = time.monotonic(), 0
        while not self.stop.is_set():
            self.service.handle()
            n += 1
            # Pace by schedule, not by sleep-after-work, so the rate holds.
            self.stop.wait(max(0.0, start + n / self.rate - time.monotonic()))

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.service.shutdown()
