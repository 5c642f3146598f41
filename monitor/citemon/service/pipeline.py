"""The monitor's state machine: fetch → decode → sample → judge → deliver with the commit → count.

:class:`Pipeline` holds intake, commit and rebalance; ``docs/internals-pipeline.md`` draws the
machine and its parts. Guarantees, and where each is kept:

* **Bounded work** (:mod:`~citemon.service.backpressure`): answers in flight and uncommitted
  records are capped; with no free slot every partition is paused, and memory stays flat.
* **Nothing lost, nothing counted twice.** Offsets commit only over the finished prefix of a
  partition (:mod:`~citemon.service.offsets`); results and dead letters go out *with* the
  commit (:mod:`~citemon.service.delivery`), and the counters move only after the commit
  succeeded, with no ``await`` in between (:meth:`Pipeline.commit`): a crash can undercount
  one commit, never overcount. Redeliveries within a process are dropped by (trace ID, span
  ID) (:mod:`~citemon.service.dedupe`).
* **A judge outage holds the line** (:mod:`~citemon.service.retries`).
* **Poison goes aside** (:mod:`~citemon.service.decoding`, :mod:`~citemon.service.recovery`).
* **The shuffle probe stays out of the way** (:mod:`~citemon.service.shuffle_probe`).
* **Nothing fails silently** (:mod:`~citemon.service.supervision`): a background loop that
  ends early turns ``/healthz`` to 503, drains and makes :meth:`Pipeline.run` raise.
* **Rebalances and shutdown.** On revoke: stop taking those partitions' records, discard the
  traces held with a part there (:mod:`~citemon.service.held_parts`), wait up to
  ``revoke_timeout_s`` for their answers, commit what is finished, cancel the rest (the next
  owner redoes it). On stop: drain up to ``drain_timeout_s``, commit, close within
  ``close_timeout_s`` (:mod:`~citemon.service.shutdown`).
* **Counted exactly once across owners** (DESIGN "Counting guarantee"): each input
  partition's transactional producer is opened at assignment, fencing a replaced owner before
  the committed offset is read (:meth:`Pipeline.on_partitions_assigned`); a fenced commit drops
  that partition's work uncounted (:meth:`Pipeline.lose`). The commit is the check.

Why these stay together: intake, the ordered commit, the rebalance callbacks and the drain
read and write the same per-partition state under one invariant (a record's output is
produced, and its offset committed, only after every earlier record of its partition).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.errors import KafkaConnectionError, KafkaError, ProducerFenced

from citemon.core.errors import KafkaUnavailable
from citemon.core.records import AnswerScore
from citemon.engine.scoring import Scorer
from citemon.metrics import Metrics
from citemon.otlp.assembly import TraceAssembler
from citemon.service.answers import AnswerJobs
from citemon.service.backpressure import Backpressure
from citemon.service.batches import UNDECODABLE, disable_codecs
from citemon.service.catch_up import CatchUp
from citemon.service.decoding import RecordDecoder
from citemon.service.dedupe import DedupeWindow
from citemon.service.delivery import KafkaDelivery
from citemon.service.entries import Ready
from citemon.service.fitting import RecordLimits
from citemon.service.gate import GateObserver, JudgeGate
from citemon.service.held_parts import HeldParts
from citemon.service.hooks import FAULT_ENV, LoopFaults, PipelineHooks
from citemon.service.kafka_internals import request_rejoin
from citemon.service.lag import LagReporter
from citemon.service.messages import (
    ERROR_HEADER,
    Counted,
    commit_outputs,
)
from citemon.service.offsets import OffsetTracker
from citemon.service.opening import open_partitions
from citemon.service.partitions import PartitionStates
from citemon.service.recovery import BatchRecovery, Scanner
from citemon.service.rekey import RekeyStage
from citemon.service.sampling import Sampler
from citemon.service.settings import Settings
from citemon.service.shuffle_probe import ShuffleProbes
from citemon.service.shutdown import close_within, stop_between_commits
from citemon.service.stats import PipelineStats
from citemon.service.supervision import Supervisor
from citemon.service.topics import TopicWatch, check_topics

__all__ = ["ERROR_HEADER", "FAULT_ENV", "Pipeline", "PipelineHooks", "PipelineStats"]

log = logging.getLogger(__name__)

_RESUME_FRACTION: Final = 0.75  # resume partitions when work falls below this share of a cap
_POLL_MS: Final = 200
_CLOSE_GRACE_S: Final = 1.0  # per client, once the close deadline has passed


class Pipeline(ConsumerRebalanceListener):  # type: ignore[misc]
    """``citemon run``'s engine. ``await pipeline.run(stop)`` until ``stop`` is set, or
    ``await pipeline.run(until_caught_up=True)`` to stop once the backlog seen at start is
    committed (as arq's burst mode; what the tests use).

    ``metrics``, ``scorer`` and the judge inside it are passed in; when the judge was built with
    ``observer=pipeline.judge_observer(metrics.judge)`` the outage detection sees every request.
    ``hooks`` are the test hooks (:class:`~citemon.service.hooks.PipelineHooks`; inert by
    default); ``scan`` replaces the bad-batch re-read (:mod:`citemon.service.recovery`).
    """

    def __init__(
        self,
        settings: Settings,
        scorer: Scorer,
        metrics: Metrics,
        *,
        sampler: Sampler | None = None,
        assembler: TraceAssembler | None = None,
        gate: JudgeGate | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_inflight_canaries: int | None = None,
        close_timeout_s: float = 10.0,
        hooks: PipelineHooks | None = None,
        on_counted: Callable[[AnswerScore, str | None], None] | None = None,
        scan: Scanner | None = None,
    ) -> None:
        self.settings = settings
        self.scorer = scorer
        self.metrics = metrics
        self.sampler = sampler or Sampler(
            rate=settings.sample_rate,
            budget_per_minute=settings.budget_per_minute,
            max_keys=settings.max_budget_keys,
        )
        self.assembler = (
            assembler if assembler is not None else TraceAssembler(window_s=settings.trace_window_s)
        )
        self.gate = gate or JudgeGate(
            backoff_s=settings.answer_retry_backoff_s,
            backoff_max_s=settings.answer_retry_backoff_max_s,
            clock=clock,
        )
        self.stats = PipelineStats()
        self.hooks = hooks or PipelineHooks.from_env()
        self._clock = clock
        self._tracker: OffsetTracker[Any] = OffsetTracker()
        self._dedupe = DedupeWindow(settings.dedupe_window)
        self._work_changed = asyncio.Event()
        self._progress = asyncio.Event()  # set after each intake round and each commit
        self._parts = PartitionStates()
        self._held = HeldParts(self._tracker, self.assembler, clock)
        self._lag = LagReporter(self._tracker, self._parts, metrics)
        self._recovery = BatchRecovery(
            settings,
            self._parts,
            self.stats,
            self._tracker,
            take=self.take,
            on_change=self._work_changed.set,
            hooks=self.hooks,
            **({} if scan is None else {"scan": scan}),
        )
        self._probes = ShuffleProbes(
            scorer,
            self.gate,
            metrics,
            rate=settings.probe_rate,
            max_inflight=max_inflight_canaries or settings.max_inflight_answers,
        )
        self._answers = AnswerJobs(
            settings,
            scorer,
            self.gate,
            metrics,
            sampler=self.sampler,
            dedupe=self._dedupe,
            tracker=self._tracker,
            stats=self.stats,
            probes=self._probes,
            clock=clock,
            on_change=self._changed,
        )
        self._decoder = RecordDecoder(
            settings,
            metrics,
            self.stats,
            assembler=self.assembler,
            held=self._held,
            answers=self._answers,
            tracker=self._tracker,
            on_change=self._work_changed.set,
        )
        self._supervisor = Supervisor(on_fatal=self._changed)
        self._faults = LoopFaults(self.hooks, clock)
        self._pressure = Backpressure(settings, self._parts)
        self._commit_lock = asyncio.Lock()
        self._consumer: Any = None
        self._delivery: KafkaDelivery | None = None
        self._started = False
        self._limits = RecordLimits()  # read from the broker at start (service.topics)
        metrics.watch_traces(self._trace_outcomes)
        # After the drain: the last commit and closing the clients. aiokafka retries both for
        # as long as the broker is away, so without a deadline a SIGTERM during a broker
        # restart waited for the broker (drain 30 s + this 10 s stays inside Kubernetes' 45 s).
        self._close_timeout_s = close_timeout_s
        self._skip_final_commit = False
        # Called with each answer (and its span ID) once counted: the evaluation events.
        self._on_counted = on_counted

    # -- probes and what tests may read --------------------------------------------------------

    def judge_observer(self, inner: Any) -> GateObserver:
        return GateObserver(inner, self.gate)

    @property
    def ready(self) -> bool:
        """For ``/readyz``: running, with partitions assigned."""
        parts = self._parts
        return self._started and bool(parts.assigned - parts.opening) and self.live

    @property
    def live(self) -> bool:
        return self._supervisor.fatal is None

    @property
    def inflight(self) -> int:
        return len(self._answers)

    @property
    def jobs(self) -> Mapping[asyncio.Task[None], frozenset[Any]]:
        """The answers being scored, each with the partitions of the records it holds."""
        return self._answers.jobs

    @property
    def offsets(self) -> OffsetTracker[Any]:
        """The records fetched and not yet committed, per partition (read, do not change)."""
        return self._tracker

    @property
    def answers(self) -> AnswerJobs:
        """The answers being scored (``score(record, entries)`` runs one job directly)."""
        return self._answers

    @property
    def shuffle_probes(self) -> ShuffleProbes:
        """The shuffle probes in flight (``await pipeline.shuffle_probes.idle()``)."""
        return self._probes

    @property
    def paused(self) -> bool:
        """Whether intake paused the partitions because work is full (bounded work)."""
        return self._pressure.paused

    @property
    def assigned(self) -> frozenset[Any]:
        """The partitions this replica owns."""
        return frozenset(self._parts.assigned)

    def tick(self) -> None:
        """Score traces the assembler settled by time and release the records of traces it
        let go (the commit loop does this every ``commit_interval_s``)."""
        self._decoder.tick()

    def _changed(self) -> None:
        self._work_changed.set()
        self._progress.set()

    def _trace_outcomes(self) -> dict[str, int]:
        """The assembler's outcome counts, read at scrape time (``citemon_traces_total``)."""
        a = self.assembler
        return {
            "completed": a.completed,
            "settled": a.settled,
            "dropped_incomplete": a.dropped_incomplete,
            "evicted": a.evicted,
            "superseded": a.superseded,
            "unrecognized": a.unrecognized,
            "no_passages": a.no_passages,
            "no_answer": a.no_answer,
        }

    # -- supervision ---------------------------------------------------------------------------

    def supervise(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """Watch a task that must run until shutdown; its ending before then is fatal."""
        return self._supervisor.supervise(task)

    def stop_supervising(self) -> None:
        """Shutdown has begun: supervised tasks may end now (``run`` calls it itself)."""
        self._supervisor.stop()

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(
        self,
        stop: asyncio.Event | None = None,
        *,
        until_caught_up: bool = False,
        ends: Mapping[Any, int] | None = None,
    ) -> PipelineStats:
        """Consume until ``stop`` is set (or a fatal error), then drain and commit.

        With ``until_caught_up``, also stop once :meth:`caught_up` returns (with ``ends``):
        every record up to the log end seen then is committed and counted.
        """
        s = self.settings
        stop = stop or asyncio.Event()
        # Every topic exists and may be used, or exit 1 naming what is missing (service.topics).
        self._limits = await check_topics(s)
        disable_codecs()  # test-only hook; a no-op unless CITEMON_TEST_DISABLE_CODECS is set
        consumer = AIOKafkaConsumer(
            **s.kafka_options(),
            group_id=s.group,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            fetch_max_bytes=s.fetch_max_bytes,
            max_partition_fetch_bytes=s.max_partition_fetch_bytes,
            max_poll_records=s.max_poll_records,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=max(100, s.session_timeout_ms // 4),
        )
        delivery = KafkaDelivery(s, consumer)
        # Set before the consumer starts: the assignment callback opens producers with them.
        self._consumer = consumer
        self._delivery = delivery
        try:
            await delivery.start()
            consumer.subscribe([s.rekey_topic or s.topic], listener=self)
            await consumer.start()
        except KafkaConnectionError as exc:
            await delivery.stop()
            await consumer.stop()
            raise KafkaUnavailable.connecting(s.bootstrap_servers, exc) from exc
        except BaseException:
            await delivery.stop()
            await consumer.stop()
            raise
        self._started = True
        log.info(
            "consuming %s as group %s (%s)",
            s.topic,
            s.group,
            "exactly-once results" if delivery.transactional else "at-least-once",
        )
        background = [
            self.supervise(asyncio.create_task(self._commit_loop(), name="citemon-commit")),
            self.supervise(asyncio.create_task(self._lag_loop(), name="citemon-lag")),
            self.supervise(
                asyncio.create_task(
                    TopicWatch(s, interval_s=s.lag_interval_s).run(), name="citemon-topics"
                )
            ),
        ]
        if s.rekey_topic is not None:
            rekey = RekeyStage(s)
            background.append(
                self.supervise(asyncio.create_task(rekey.run(), name="citemon-rekey"))
            )
        if until_caught_up:
            background.append(asyncio.create_task(self._stop_when_caught_up(stop, ends)))
        try:
            await self._intake(consumer, stop)
        finally:
            self._started = False
            await self._drain()
            await self._probes.stop()
            self._supervisor.stop()
            deadline = asyncio.get_running_loop().time() + self._close_timeout_s
            cut_short = not await stop_between_commits(background, self._commit_lock, deadline)
            self._skip_final_commit = cut_short
            await self._close(background, delivery, consumer, deadline)
            log.info("citemon run stopped: %s; %r", asdict(self.stats), self.sampler)
        if self._supervisor.fatal is not None:
            raise self._supervisor.fatal
        return self.stats

    async def caught_up(self, ends: Mapping[Any, int] | None = None) -> dict[Any, int]:
        """Return once every partition this replica owns is committed up to ``ends`` (by
        default each one's log end, read when this call first sees it) and no answer or shuffle
        probe is in flight; returns the ends it waited for (:mod:`citemon.service.catch_up`).
        Every answer up to them is then counted in the metrics. Each call has ends of its own:
        a later call waits for what was written since the earlier one returned."""
        catch_up = CatchUp(self._parts, self._tracker)
        while True:
            if self._supervisor.fatal is not None:
                raise self._supervisor.fatal
            if self._started and self.ready:
                done = await catch_up.check(self._consumer, ends)
                if done is not None and not self._answers and not len(self._probes):
                    return done
            self._progress.clear()
            await self._progress.wait()

    async def _stop_when_caught_up(
        self, stop: asyncio.Event, ends: Mapping[Any, int] | None
    ) -> None:
        await self.caught_up(ends)
        stop.set()

    async def _close(
        self,
        background: list[asyncio.Task[None]],
        delivery: KafkaDelivery,
        consumer: Any,
        deadline: float,
    ) -> None:
        """The final commit within ``close_timeout_s``, then close the clients
        (:func:`~citemon.service.shutdown.close_within`)."""
        clients = [("producer", delivery.stop), ("consumer", consumer.stop)]
        if self._recovery.client is not None:
            clients.append(("batch re-read client", self._recovery.close))
        await close_within(
            deadline,
            background,
            final_commit=self._final_commit,
            clients=clients,
            uncommitted=lambda: len(self._tracker),
            timeout_s=self._close_timeout_s,
        )

    async def _drain(self) -> None:
        if self._consumer is not None and self._parts.assigned:
            with contextlib.suppress(Exception):
                self._consumer.pause(*self._parts.assigned)
        await self._answers.drain(self.settings.drain_timeout_s)

    async def _final_commit(self) -> None:
        if self._skip_final_commit:
            log.warning("a commit was cut short at shutdown: skipping the final commit")
            return
        for _ in range(3):
            if await self.commit():
                return
            await asyncio.sleep(0.2)

    # -- intake --------------------------------------------------------------------------------

    async def _intake(self, consumer: Any, stop: asyncio.Event) -> None:
        max_poll = self.settings.max_poll_records
        while not stop.is_set() and self._supervisor.fatal is None:
            self._progress.set()
            free = self._pressure.adjust(consumer, len(self._answers), len(self._tracker))
            try:
                batches = await consumer.getmany(
                    timeout_ms=_POLL_MS, max_records=max(1, min(max_poll, free))
                )
            except UNDECODABLE as exc:
                self._parts.moved += 1
                self._parts.taking = True
                try:
                    await self._recovery.recover(consumer, exc)
                finally:
                    self._parts.taking = False
                continue
            self._parts.moved += 1
            await self.take_all(batches)

    async def take_all(self, batches: Mapping[Any, list[Any]]) -> None:
        """Take one fetch (``getmany``'s result), as intake does, yielding to the loop every
        ``hooks.decode_slice_s``: a full fetch (``fetch_max_bytes``, 8 MB of small spans) is up
        to ~0.2 s of decoding, which would stall heartbeats and ``/healthz``. A rebalance
        during a yield drops the rest of the fetch: it revokes every partition (eager protocol)
        and the new assignment fetches from the committed offsets, so nothing is lost and
        nothing is taken twice.

        A partition sought during a yield (:meth:`_open_partitions`) has the rest of its
        records dropped: the next fetch delivers them again from where it was sought. Only
        that partition's (the others' positions are past their records), and only seeks
        after the fetch returned: aiokafka itself drops records fetched before a seek when
        ``getmany`` drains them, and those it returns after one are from the new position
        (dropping them too would lose them)."""
        loop = asyncio.get_running_loop()
        slice_s = self.hooks.decode_slice_s
        rebalances = self.stats.rebalances
        seeks = dict(self._parts.seeks)  # no await since getmany returned
        until = loop.time() + slice_s
        self._parts.taking = True
        try:
            for tp, records in batches.items():
                for record in records:
                    if loop.time() >= until:
                        await asyncio.sleep(0)
                        if self.stats.rebalances != rebalances:
                            return
                        until = loop.time() + slice_s
                    if self._parts.seeks.get(tp, 0) != seeks.get(tp, 0):
                        break
                    self.take(tp, record)
        finally:
            self._parts.taking = False

    def take(self, tp: Any, rec: Any) -> None:
        """Take one fetched record of ``tp`` (a ``ConsumerRecord``: ``offset``, ``key``,
        ``value``, ``timestamp``), as intake does with each record ``getmany`` returns.
        Records of a partition not readable now, or below its floor, are ignored."""
        if not self._parts.readable(tp):
            return  # fetched before a revoke: the next owner reads it from the committed offset
        if rec.offset < self._parts.floor.get(tp, -1):
            return  # fetched before the seek to the offset committed under the last owner
        self.stats.records += 1
        self._parts.taken_to[tp] = rec.offset + 1
        entry = self._tracker.add(tp, rec.offset, rec.timestamp)
        try:
            self._decoder.decode_into(entry, rec)
        finally:
            self._tracker.release(entry)
            self._work_changed.set()

    # -- commits -------------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            self._faults.check("citemon-commit")
            self._decoder.tick()
            if self._parts.opening:
                await self._open_partitions()
            await self.commit()

    async def commit(self) -> bool:
        """Deliver and commit every partition's finished prefix; count it once committed.

        Each partition commits on its own (its own transaction with a results topic); returns
        False when any failed (retried on the next tick). A partition whose producer was
        fenced has a new owner: its uncommitted work is dropped, uncounted (:meth:`lose`).
        """
        delivery = self._delivery
        if delivery is None:
            return True
        async with self._commit_lock:
            ready = [
                r
                for r in self._tracker.ready()
                if r.tp in self._parts.assigned and delivery.is_open(r.tp)
            ]
            if not ready:
                return True
            batches = commit_outputs(ready, self._dedupe, self.settings, self.stats, self._limits)
            outcomes = await delivery.deliver([(r, messages) for r, messages, _ in batches])
            ok = True
            fenced: set[Any] = set()
            broken: set[Any] = set()
            for r, _, counted in batches:
                error = outcomes.get(r.tp)
                if isinstance(error, ProducerFenced):
                    fenced.add(r.tp)
                    continue
                if error is not None and delivery.broken(r.tp):
                    broken.add(r.tp)
                    continue
                if error is not None:
                    ok = False
                    self.stats.commit_failures += 1
                    log.warning(
                        "commit failed, will retry (partition %d): %s",
                        r.tp.partition,
                        type(error).__name__,
                    )
                    if not isinstance(error, KafkaError | OSError | TimeoutError):
                        log.error("unexpected commit error", exc_info=error)
                    continue
                self._confirmed(r, counted)
            if fenced:
                self.lose(fenced, "have a new owner (our transactional producer was fenced)")
                ok = False
            if broken:
                self.lose(broken, "lost their transactional producer to a fatal client error")
                ok = False
            self._lag.publish()
            self._work_changed.set()
            self._progress.set()
            return ok

    def _confirmed(self, r: Ready[Any], counted: Counted) -> None:
        """``r`` committed: forget its entries and count what it carried (no ``await``)."""
        self._tracker.confirm([r])
        self.stats.commits += 1
        for score, key in counted:
            self._dedupe.add(key)
            self.metrics.record_answer(score)
            if self._on_counted is not None:
                self._on_counted(score, key[1])
        self.stats.answers_committed += len(counted)
        for e in r.entries:
            for reason in e.dead_letters:
                self.metrics.dead_letter(reason)
                self.stats.dead_letters += 1
        for record, why in r.cuts:
            self.metrics.record_cut(record, why)

    # -- rebalances ----------------------------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
        """Before a rebalance (aiokafka's listener callback): finish what is in flight for
        ``revoked`` (up to ``revoke_timeout_s``), commit it, and forget the rest, traces held
        for assembly included, so nothing of those partitions is ever counted here afterwards."""
        self.stats.rebalances += 1
        gone = set(revoked)
        if not gone:
            return
        self._parts.revoking |= gone
        self._held.drop(gone)
        deadline = self._clock() + self.settings.revoke_timeout_s
        while self._answers.in_partitions(gone) and self._clock() < deadline:
            self._work_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._work_changed.wait(), max(0.01, deadline - self._clock())
                )
        await self.commit()
        self._forget(gone)
        if self._delivery is not None:
            async with self._commit_lock:
                await self._delivery.close(gone)
        self._parts.remove(gone)
        for tp in gone:
            self._lag.forget(tp)
        log.info("partitions revoked: %s", sorted(tp.partition for tp in gone))

    def _forget(self, tps: set[Any]) -> None:
        """Cancel the answers of ``tps`` and drop their uncommitted records (uncounted).

        The assembler forgets those answers' trace IDs (cancelled jobs, and scores finished
        but not committed): otherwise, when a partition comes back to this replica, its
        re-read parts would be ignored as "already answered" and committed past, unscored.
        Only these IDs: the assembler does not know partitions, and forgetting every answered
        ID would let late parts of traces answered elsewhere (or by a self-contained
        ``rag.answer`` span, under another span ID) be scored a second time."""
        dropped = self._answers.cancel(tps)
        for entry in self._tracker.revoke(tps):
            dropped.update(score.trace_id for score, _ in entry.scores if score.trace_id)
        self.assembler.forget_answered(dropped)

    def lose(self, tps: set[Any], why: str) -> None:
        """Our producer of ``tps`` can no longer commit: fenced (another replica owns them
        now; we were frozen or cut off past the session timeout) or broken for good. Drop
        their work uncounted, take no more of their records, and ask the group for a fresh
        assignment: a partition assigned to us again gets a new producer there, the one place
        where initialising its transactional ID cannot fence its real owner."""
        log.error(
            "partitions %s %s: dropping their uncommitted work, uncounted, and rejoining the group",
            sorted(tp.partition for tp in tps),
            why,
        )
        self.stats.partitions_lost += len(tps)
        self._parts.revoking |= tps
        self._held.drop(tps)
        self._forget(tps)
        if self._consumer is not None:
            request_rejoin(self._consumer)

    async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        """After a rebalance (aiokafka's listener callback): take ``assigned``, opening their
        transactional producers first when there is a results topic."""
        assigned = list(assigned)
        fresh = set(assigned)
        transactional = self._delivery is not None and self._delivery.transactional
        self._parts.assign(fresh, opening=transactional)
        self._tracker.assign(assigned)
        if self._pressure.paused and self._consumer is not None and assigned:
            self._consumer.pause(*assigned)
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))
        if self._parts.opening:
            await self._open_partitions()

    async def _open_partitions(self) -> None:
        """Open the producers of newly assigned partitions, then seek each to its committed
        offset (:func:`~citemon.service.opening.open_partitions`)."""
        if self._delivery is None or self._consumer is None:
            return
        async with self._commit_lock:
            await open_partitions(self._delivery, self._consumer, self._parts, self._tracker)
            self._work_changed.set()

    # -- lag -----------------------------------------------------------------------------------

    async def _lag_loop(self) -> None:
        while True:
            self._faults.check("citemon-lag")
            try:
                await self.update_lag()
            except (KafkaError, OSError, TimeoutError) as exc:
                log.info("lag update failed: %s", type(exc).__name__)
            await asyncio.sleep(self.settings.lag_interval_s)

    async def update_lag(self) -> dict[Any, int]:
        """Set ``citemon_consumer_lag`` for every assigned partition: log end − committed."""
        return await self._lag.update(self._consumer)
