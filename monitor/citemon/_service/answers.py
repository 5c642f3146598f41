"""The answer jobs: admit an answer (dedupe, sampling), score it until judged, finish it.

An admitted answer holds the Kafka records it came from in the ledger until its job ends, so no
offset commits past an answer that is not scored. The job ends in exactly one of three ways:
:meth:`Ledger.finish_answer <citemon._service.ledger.Ledger.finish_answer>` (scored: it rides on
its last record to that offset's commit), :meth:`Ledger.fail_answer
<citemon._service.ledger.Ledger.fail_answer>` (the scorer raised: dead-lettered), or cancelled
(drain deadline, revoke), leaving its records unfinished so the next owner scores it again. At
most ``max_inflight_answers`` jobs score at once (a semaphore).

An answer that comes back with judge failures is not finished: it is tried again. When *no*
judge request succeeded during its attempt, the judge is taken to be down
(:class:`~citemon._service.answers.JudgeGate`): the attempt is not charged and the gate holds it
until a probe gets through. Only failures while the judge is otherwise answering spend
``max_answer_attempts``, with exponential backoff; after them the answer is recorded with its
``unjudged`` claims.

A scored answer the shuffle probe picks by trace ID (``--probe-rate``,
:mod:`citemon._checks.shuffle_probe`) is then checked again with its citations rotated, in a task
of its own that holds no record: at most ``max_inflight`` probes (more are dropped, counted),
one attempt, every error caught and counted, cancelled at shutdown, skipped while the judge is
down. It cannot fail, delay or change the real answer; its scores reach only the probe's own
metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from citemon._checks.shuffle_probe import probe_selected, shuffled_check
from citemon._core.errors import JudgeError
from citemon._core.judge import JudgeObserver
from citemon._core.probe import cited_counts
from citemon._core.records import AnswerRecord, AnswerScore
from citemon._engine.scoring import Scorer
from citemon._metrics import Metrics
from citemon._service.ledger import Entry, Finished, Ledger
from citemon._service.lifecycle import Signal
from citemon._service.outputs import dead_letter
from citemon._service.settings import Settings

__all__ = [
    "OUTAGE_CAUSES",
    "TRACE_ID_LIMIT",
    "AnswerCounts",
    "AnswerJobs",
    "JudgeGate",
    "Sampler",
    "ShuffleProbes",
    "TokenBucket",
    "judge_failed",
    "ratio_bound",
    "score_with_retries",
    "trace_id_sampled",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AnswerCounts:
    """What the answer stage counted (:attr:`AnswerJobs.counts` hands out copies)."""

    started: int = 0
    sampled_out: int = 0
    duplicates: int = 0
    """Answers already counted when they came again (re-read after a rebalance, say)."""
    retries: int = 0
    unjudged_after_retries: int = 0
    cancelled_at_revoke: int = 0
    cancelled_at_drain: int = 0


class AnswerJobs:
    """The scoring jobs in flight, each with the partitions of the records it holds."""

    def __init__(
        self,
        settings: Settings,
        scorer: Scorer,
        gate: JudgeGate,
        metrics: Metrics,
        ledger: Ledger,
        *,
        sampler: Sampler,
        probes: ShuffleProbes,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._scorer = scorer
        self._gate = gate
        self._metrics = metrics
        self._ledger = ledger
        self._counts = AnswerCounts()
        self._sampler = sampler
        self._probes = probes
        self._clock = clock
        self._slots = asyncio.Semaphore(settings.max_inflight_answers)
        self._jobs: dict[asyncio.Task[None], frozenset[Any]] = {}
        self._traces: dict[asyncio.Task[None], str] = {}  # a job's trace ID, if any
        self._ended = Signal()

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def counts(self) -> AnswerCounts:
        """What this stage counted so far (a copy)."""
        return dataclasses.replace(self._counts)

    @property
    def jobs(self) -> dict[asyncio.Task[None], frozenset[Any]]:
        """Each job with the partitions of the records it holds (a copy)."""
        return dict(self._jobs)

    def admit(
        self,
        record: AnswerRecord,
        entries: list[Entry],
        timestamp_ms: int,
        *,
        assembled: bool = False,
    ) -> None:
        """Start scoring ``record`` unless it was counted already or sampling leaves it out.
        A self-contained answer span is counted in ``citemon_spans_total`` here; an
        ``assembled`` trace's spans were counted when read (``part``)."""
        key = (record.trace_id, record.span_id)
        if self._ledger.seen(key):
            if not assembled:
                self._metrics.span("skipped")
            self._counts.duplicates += 1
            return
        now_s = timestamp_ms / 1000 if timestamp_ms >= 0 else time.time()
        if not self._sampler.by_trace_id(record.trace_id) or not self._sampler.by_budget(
            record.service, record.version, now_s
        ):
            if not assembled:
                self._metrics.span("sampled_out")
            self._counts.sampled_out += 1
            return
        if not assembled:
            self._metrics.span("answer")
        self._counts.started += 1
        for e in entries:
            self._ledger.hold(e)
        task = asyncio.create_task(self.score(record, entries))
        self._jobs[task] = frozenset(e.tp for e in entries)
        if record.trace_id:
            self._traces[task] = record.trace_id
        task.add_done_callback(self._done)

    def ended(self) -> Coroutine[Any, Any, bool]:
        """Await this to return when a job ends (scored, failed or cancelled) after the call."""
        return self._ended.wait()

    def in_partitions(self, tps: set[Any]) -> bool:
        """Whether a job holds a record of ``tps``."""
        return any(job_tps & tps for job_tps in self._jobs.values())

    def cancel(self, tps: set[Any]) -> set[str]:
        """Cancel the jobs holding records of ``tps``; returns their trace IDs."""
        dropped: set[str] = set()
        for task, job_tps in list(self._jobs.items()):
            if job_tps & tps:
                task.cancel()
                self._counts.cancelled_at_revoke += 1
                if task in self._traces:
                    dropped.add(self._traces[task])
        return dropped

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for every job, then cancel the rest (counted)."""
        if not self._jobs:
            return
        log.info("draining %d answers in flight (up to %.0f s)", len(self._jobs), timeout_s)
        _, pending = await asyncio.wait(list(self._jobs), timeout=timeout_s)
        for task in pending:
            task.cancel()
        self._counts.cancelled_at_drain += len(pending)
        await asyncio.gather(*pending, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._jobs.pop(task, None)
        self._traces.pop(task, None)
        self._ended.notify()
        if not task.cancelled() and task.exception() is not None:
            log.error("answer job failed", exc_info=task.exception())

    async def score(self, record: AnswerRecord, entries: list[Entry]) -> None:
        """One job: score ``record`` and finish it in the ledger, then maybe start its probe.

        Cancelled (drain deadline, revoke), it finishes nothing: its records stay unfinished,
        so their offsets never commit and the next owner scores them."""
        async with self._slots:
            try:
                score = await score_with_retries(
                    record,
                    scorer=self._scorer,
                    gate=self._gate,
                    settings=self._settings,
                    counts=self._counts,
                    clock=self._clock,
                )
            except Exception as exc:  # a scorer bug must not stop the stream
                log.exception("scoring failed; dead-lettering the answer")
                last = entries[-1] if entries else None
                message = dead_letter(
                    self._settings.dlq_topic,
                    (last.tp.topic, last.tp.partition, last.offset) if last else ("", -1, -1),
                    (record.trace_id or "").encode() or None,
                    record.model_dump_json().encode(),
                    "score_error",
                    repr(exc),
                )
                self._ledger.fail_answer(entries, message, "score_error")
                return
        self._ledger.finish_answer(entries, Finished(score, record.span_id))
        self._probes.maybe_start(record, score)


async def score_with_retries(
    record: AnswerRecord,
    *,
    scorer: Scorer,
    gate: JudgeGate,
    settings: Settings,
    counts: AnswerCounts,
    clock: Callable[[], float],
) -> AnswerScore:
    """``record``'s score once the judge answered for it (or its attempts ran out); its
    retries counted in ``counts``."""
    s = settings
    attempts = 0
    while True:
        probe = await gate.acquire()
        started = clock()
        try:
            score = await scorer.score(record)
        except asyncio.CancelledError:
            if probe:
                gate.report(ok=False, started=float("inf"), probe=True)
            raise
        failed = judge_failed(score)
        if not failed and score.judge_calls == 0:
            # Nothing was asked (no claims, nothing retrieved): no evidence either way.
            gate.release(probe)
            return score
        outage = gate.report(ok=not failed, started=started, probe=probe)
        if not failed:
            return score
        if outage:
            continue  # the gate holds us until the judge answers again; no attempt spent
        attempts += 1
        if attempts >= s.max_answer_attempts:
            counts.unjudged_after_retries += 1
            return score
        counts.retries += 1
        delay = min(s.answer_retry_backoff_s * 2 ** (attempts - 1), s.answer_retry_backoff_max_s)
        await asyncio.sleep(delay)


class ShuffleProbes:
    """The shuffle probes in flight; :meth:`maybe_start` after each scored answer."""

    def __init__(
        self, scorer: Scorer, gate: JudgeGate, metrics: Metrics, *, rate: float, max_inflight: int
    ) -> None:
        self._scorer = scorer
        self._gate = gate
        self._metrics = metrics
        self._rate = rate
        self._max_inflight = max_inflight
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._ended = Signal()

    def __len__(self) -> int:
        """Probes in flight."""
        return len(self._tasks)

    async def idle(self) -> None:
        """Return once no probe is in flight."""
        await self._idle.wait()

    def ended(self) -> Coroutine[Any, Any, bool]:
        """Await this to return when a probe ends after the call."""
        return self._ended.wait()

    def maybe_start(self, record: AnswerRecord, score: AnswerScore) -> None:
        """Start the probe of a scored answer when its trace ID picks it."""
        if not probe_selected(record.trace_id, self._rate):
            return
        if judge_failed(score) or self._gate.down:
            self._metrics.probe("failed", trace_id=record.trace_id)
            return
        if len(self._tasks) >= self._max_inflight:
            self._metrics.probe("dropped", trace_id=record.trace_id)
            return
        task = asyncio.create_task(self._probe(record, score), name="citemon-probe")
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()
        self._ended.notify()

    async def stop(self) -> None:
        """Cancel probes still running: they hold no offsets, so nothing is lost."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _probe(self, record: AnswerRecord, score: AnswerScore) -> None:
        try:
            shuffled = await shuffled_check(self._scorer, record)
        except JudgeError as exc:
            log.info("shuffle probe: judge failed (%s); not counted", type(exc).__name__)
            self._metrics.probe("failed", trace_id=record.trace_id)
            return
        except Exception:  # the probe must never take anything down with it
            log.warning("shuffle probe failed", exc_info=True)
            self._metrics.probe("failed", trace_id=record.trace_id)
            return
        if shuffled is None:
            self._metrics.probe("skipped", trace_id=record.trace_id)
        else:
            original = cited_counts(score)
            self._metrics.record_probe(original, shuffled, trace_id=record.trace_id)


# -- sampling ---------------------------------------------------------------------------------
# Which answers get scored: a deterministic trace-ID ratio, then a per-version budget.
#
# Two decisions, in this order:
#
# 1. **Ratio by trace ID** — exactly OpenTelemetry's ``TraceIdRatioBased``: keep the trace when its
#    low 64 bits are below ``round(rate · 2⁶⁴)``. Every replica, every replay and every SDK that
#    samples the same way agree on the same traces, so a replayed topic scores the same answers
#    and a trace the service kept at rate r is kept here at any rate ≥ r.
# 2. **A token bucket per (service, version)**: at most ``budget_per_minute`` answers per minute
#    of *traffic*, with a burst of one minute's budget. Per version, so a flood from one deploy
#    cannot spend the judge budget of a new, quiet one. The bucket's clock is the record's own
#    timestamp (the Kafka record time the producer set), not the wall clock: a backlog drained
#    after a judge outage is sampled as it would have been live, instead of being mostly thrown
#    away because it arrives all at once. The budget is per replica.
#
# Both drops count as ``sampled_out``; :class:`Sampler` keeps them apart in ``dropped_by_ratio``
# and ``dropped_by_budget`` for the shutdown log.


TRACE_ID_LIMIT: Final = (1 << 64) - 1
"""The low 64 bits of a trace ID are what ``TraceIdRatioBased`` compares."""


def ratio_bound(rate: float) -> int:
    """The bound ``TraceIdRatioBased`` derives from ``rate`` (same rounding)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"sample rate must be within [0, 1], not {rate}")
    return round(rate * (TRACE_ID_LIMIT + 1))


def trace_id_sampled(trace_id: int | str, bound: int) -> bool:
    """Whether a trace (int, or 32 hex digits) is kept under ``bound`` (:func:`ratio_bound`)."""
    tid = int(trace_id, 16) if isinstance(trace_id, str) else trace_id
    return tid & TRACE_ID_LIMIT < bound


@dataclass(slots=True)
class TokenBucket:
    """``capacity`` tokens, refilled at ``rate_per_s``; time is whatever clock the caller uses.

    A timestamp earlier than the last one seen refills nothing (partitions interleave, so record
    times are not monotonic across them).
    """

    capacity: float
    rate_per_s: float
    tokens: float
    last_s: float

    def take(self, now_s: float) -> bool:
        if now_s > self.last_s:
            self.tokens = min(self.capacity, self.tokens + (now_s - self.last_s) * self.rate_per_s)
            self.last_s = now_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Sampler:
    """The two decisions above. ``budget_per_minute=0`` disables the budget.

    At most ``max_keys`` (service, version) buckets are kept; the least recently used one is
    forgotten beyond that (it starts again full), so memory is bounded whatever the labels.
    """

    def __init__(
        self, *, rate: float = 1.0, budget_per_minute: float = 0.0, max_keys: int = 1000
    ) -> None:
        if budget_per_minute < 0:
            raise ValueError("budget_per_minute must be >= 0")
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.rate = rate
        self.bound = ratio_bound(rate)
        self.budget_per_minute = budget_per_minute
        self.max_keys = max_keys
        self._buckets: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()
        self.dropped_by_ratio = 0
        self.dropped_by_budget = 0

    def by_trace_id(self, trace_id: int | str | None) -> bool:
        """The ratio decision; an answer without a trace ID is kept only at rate 1."""
        if trace_id is None or trace_id == "":
            keep = self.bound > TRACE_ID_LIMIT
        else:
            try:
                keep = trace_id_sampled(trace_id, self.bound)
            except ValueError:
                keep = self.bound > TRACE_ID_LIMIT
        if not keep:
            self.dropped_by_ratio += 1
        return keep

    def by_budget(self, service: str | None, version: str | None, now_s: float) -> bool:
        """Take one answer from the (service, version) bucket at time ``now_s`` (seconds)."""
        if self.budget_per_minute <= 0:
            return True
        key = (service or "", version or "")
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(
                capacity=self.budget_per_minute,
                rate_per_s=self.budget_per_minute / 60.0,
                tokens=self.budget_per_minute,
                last_s=now_s,
            )
            self._buckets[key] = bucket
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        keep = bucket.take(now_s)
        if not keep:
            self.dropped_by_budget += 1
        return keep

    def __repr__(self) -> str:
        return (
            f"Sampler(rate={self.rate:g}, budget_per_minute={self.budget_per_minute:g}, "
            f"dropped_by_ratio={self.dropped_by_ratio}, dropped_by_budget={self.dropped_by_budget})"
        )


# -- the judge gate ---------------------------------------------------------------------------
# The judge gate: while the judge is down, answers wait instead of being scored ``unjudged``.
#
# An outage is told from an answer's own failure by timing: an attempt that failed while no judge
# request succeeded means the dependency is down, and counting its answers ``unjudged`` would put
# an outage into the accuracy metric. The gate then holds every attempt (and, as work fills up,
# intake: partitions pause) and lets one probe through at a time until one succeeds
# (``docs/running.md``, "A judge outage delays, it does not degrade"). Any dependency an
# attempt needs can report through :meth:`JudgeGate.report`; the gate is also one of the judge's
# observers (beside the judge metrics), so it hears of every request that succeeds.


OUTAGE_CAUSES: Final[frozenset[str]] = frozenset({"judge_failure"})
"""The ``unjudged_cause`` values that are evidence about a dependency the answer needs (the
judge), not about the input: an answer with one is retried, and counts toward an outage."""


def judge_failed(score: AnswerScore) -> bool:
    """Whether any claim lacks a verdict because a dependency failed (:data:`OUTAGE_CAUSES`;
    a truncated answer or a cut search is no evidence about the judge)."""
    return any(c.unjudged_cause in OUTAGE_CAUSES for c in score.claims)


class JudgeGate(JudgeObserver):
    """Decides whether a judge failure is an outage, and meters the judge while it is down.

    A :class:`~citemon._core.judge.JudgeObserver` of the judge's transport (its other events
    are no-ops here): every successful judge request (:meth:`request_done`) and every cleanly
    scored answer (:meth:`report`) counts as the judge answering (:meth:`request_ok`). A
    failed attempt during which nothing succeeded means the judge is down: :meth:`acquire`
    then holds every caller and releases one *probe* at a time, first come first served, every
    ``backoff`` seconds (doubling up to ``backoff_max_s``). A probe that succeeds reopens the
    gate for all.
    """

    def __init__(
        self,
        *,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._clock = clock
        self._last_ok = float("-inf")
        self.down_since: float | None = None
        self._backoff = backoff_s
        self._next_probe = 0.0
        self._probing = False
        self._waiters: deque[asyncio.Future[bool]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.outages = 0
        self.probes = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def request_done(self, outcome: str, seconds: float) -> None:
        """A judge request ended (the transport tells its observers): a success reopens the
        gate."""
        if outcome == "ok":
            self.request_ok()

    def request_ok(self) -> None:
        self._last_ok = self._clock()
        if self.down_since is not None:
            log.warning(
                "judge is answering again after %.1f s down; resuming",
                self._clock() - self.down_since,
            )
            self.down_since = None
            self._probing = False
            self._backoff = self._backoff_s
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_result(False)

    async def acquire(self) -> bool:
        """Wait until the judge may be called; True when the caller is the outage's probe."""
        if self.down_since is None:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._dispatch()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result():
                self._probing = False  # the probe was cancelled: let another go
                self._dispatch()
            raise

    def release(self, probe: bool) -> None:
        """An attempt that called no judge ended: as a probe it proved nothing, so let the
        next probe go (at the time already set)."""
        if probe:
            self._probing = False
            self._dispatch()

    def report(self, *, ok: bool, started: float, probe: bool) -> bool:
        """An attempt begun at ``started`` ended; returns whether its failure is an outage."""
        if probe:
            self._probing = False
        if ok:
            self.request_ok()
            return False
        if self._last_ok >= started:
            return False  # the judge answered others meanwhile: this answer's own failure
        now = self._clock()
        if self.down_since is None:
            self.down_since = now
            self.outages += 1
            self._backoff = self._backoff_s
            log.warning("judge is failing every request; holding answers and probing it")
        elif probe:
            self._backoff = min(self._backoff * 2, self._backoff_max_s)
        self._next_probe = now + self._backoff
        self._dispatch()
        return True

    def _dispatch(self) -> None:
        if self.down_since is None or self._probing:
            return
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        if not self._waiters:
            return
        delay = self._next_probe - self._clock()
        if delay > 0:
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
            return
        self._probing = True
        self.probes += 1
        self._waiters.popleft().set_result(True)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()
