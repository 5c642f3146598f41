"""The monitor's state machine: intake → answers → commit with the outputs → count, and rebalances.

:class:`Pipeline` composes the stages (``docs/architecture.md`` draws one answer's path through
them) and holds what spans them: the commit, the rebalance callbacks, the background loops and
the shutdown. The invariant they share, and why they stay together: a record's outputs are
produced, and its offset committed, only after every earlier record of its partition is
finished; and an answer is counted only once its commit is confirmed, with no ``await`` in
between (:meth:`Pipeline.commit`): a crash can undercount one commit, never overcount.

Counted exactly once across owners (``docs/running.md#counting-guarantee``): each input
partition's transactional producer is opened at assignment, fencing a replaced owner before the
committed offset is read (:meth:`Pipeline.on_partitions_assigned`); a fenced commit drops that
partition's work uncounted (:meth:`Pipeline.lose`). The commit is the check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import IllegalStateError, KafkaConnectionError, KafkaError, ProducerFenced

from citemon._core.errors import KafkaUnavailable
from citemon._core.records import AnswerScore
from citemon._engine.scoring import Scorer
from citemon._metrics import Metrics
from citemon._otlp.assembly import TraceAssembler
from citemon._review.sample import review_selected
from citemon._service.answers import AnswerJobs, JudgeGate, Sampler, ShuffleProbes
from citemon._service.held import HeldParts, read_held
from citemon._service.intake import Intake
from citemon._service.kafka import KafkaClients, RecordLimits, request_rejoin
from citemon._service.ledger import Ledger, Ready
from citemon._service.lifecycle import Signal, Supervisor, close_within, stop_between_commits
from citemon._service.outputs import (
    Commit,
    KafkaDelivery,
    OutMessage,
    fit_dead_letter,
    result_message,
    review_message,
)
from citemon._service.rekey import RekeyStage
from citemon._service.settings import Settings

__all__ = ["AnswerSink", "Pipeline", "PipelineStats", "commit_messages"]

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 10.0
"""After the drain: the last commit and closing the clients, within this deadline (drain 30 s +
this 10 s stays inside Kubernetes' 45 s)."""
_TRACE_KEY = b"0" * 32
"""A trace ID as a held-parts record's key (its size counts against the topic's limit)."""


class AnswerSink(Protocol):
    """Where a counted answer goes (the metrics, the evaluation events): called in the commit's
    counting step, with no ``await`` between the confirmed commit and it, so it must not block
    and must not raise."""

    def answer_counted(self, score: AnswerScore, span_id: str | None) -> None: ...


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """What the monitor did so far, read from the stages that counted it (:attr:`Pipeline.stats`);
    logged at shutdown (the metrics hold the same, per label)."""

    records: int
    answers_started: int
    answers_committed: int
    sampled_out: int
    skipped: int
    duplicates: int
    dead_letters: int
    answer_retries: int
    unjudged_after_retries: int
    commits: int
    commit_failures: int
    cancelled_at_drain: int
    cancelled_at_revoke: int
    rebalances: int
    undecodable_batches: int
    rewound_partitions: int
    partitions_lost: int


class Pipeline(ConsumerRebalanceListener):  # type: ignore[misc]
    """``citemon run``'s engine. ``await pipeline.run(stop)`` until ``stop`` is set, or
    ``await pipeline.run(until_caught_up=True)`` to stop once the backlog seen at start is
    committed (as arq's burst mode; what the tests use).

    Its parts are handed in, each required (:func:`~citemon._service.monitor.build_monitor`,
    the one builder, makes them from the settings): the ``scorer`` and ``metrics``, the Kafka
    ``clients``, the ``sampler``, the trace ``assembler``, the judge ``gate`` (one of the judge's
    observers, beside the judge metrics, so outage detection sees every request), the ``clock``
    the windows and deadlines read, and the ``sinks`` each counted answer goes to after the
    metrics.
    """

    def __init__(
        self,
        settings: Settings,
        scorer: Scorer,
        metrics: Metrics,
        *,
        clients: KafkaClients,
        sampler: Sampler,
        assembler: TraceAssembler,
        gate: JudgeGate,
        clock: Callable[[], float],
        sinks: Sequence[AnswerSink],
    ) -> None:
        self.settings = settings
        self.scorer = scorer
        self.metrics = metrics
        self.clients = clients
        self.sampler = sampler
        self.assembler = assembler
        self._held = HeldParts(
            settings.held_topic_name,
            max_value_bytes=RecordLimits().value_budget(settings.held_topic_name, _TRACE_KEY),
        )
        self.gate = gate  # built once, with the judge reporting to it (build_monitor)
        self._clock = clock
        self._ledger = Ledger(dedupe_window=settings.dedupe_window)
        # What the commit counts (the other stages count their own: :attr:`stats`).
        self._commits = 0
        self._commit_failures = 0
        self._answers_committed = 0
        self._dead_letters = 0
        self._partitions_lost = 0
        self._probes = ShuffleProbes(
            scorer,
            self.gate,
            metrics,
            rate=settings.probe_rate,
            max_inflight=settings.max_inflight_answers,
        )
        self._answers = AnswerJobs(
            settings,
            scorer,
            self.gate,
            metrics,
            self._ledger,
            sampler=self.sampler,
            probes=self._probes,
            clock=clock,
        )
        self._intake = Intake(
            settings,
            self._ledger,
            self._answers,
            metrics,
            assembler=self.assembler,
            held=self._held,
            clients=clients,
            clock=clock,
        )
        self._supervisor = Supervisor()
        self._commit_lock = asyncio.Lock()
        self._consumer: Any = None
        self._delivery: KafkaDelivery | None = None
        self._started = False
        self._ended = False  # run() returned or raised: nothing more will be caught up
        self._end = Signal()
        self._lag_ends: dict[Any, int] = {}
        self._limits = RecordLimits()  # read from the broker at start (service.topics)
        metrics.watch_traces(self.assembler.outcomes)
        metrics.watch_held(
            lambda: (len(self.assembler), self.assembler.nbytes, self.assembler.oldest_age_s())
        )
        self._skip_final_commit = False
        # Each answer (and its span ID) goes to these once counted: the metrics first.
        self._sinks: tuple[AnswerSink, ...] = (metrics, *sinks)

    # -- what probes and tests read ------------------------------------------------------------

    @property
    def stats(self) -> PipelineStats:
        """What each stage counted so far, read now."""
        answers, ledger, intake = self._answers.counts, self._ledger, self._intake
        return PipelineStats(
            records=ledger.records,
            answers_started=answers.started,
            answers_committed=self._answers_committed,
            sampled_out=answers.sampled_out,
            skipped=intake.skipped,
            duplicates=ledger.duplicates + answers.duplicates,
            dead_letters=self._dead_letters,
            answer_retries=answers.retries,
            unjudged_after_retries=answers.unjudged_after_retries,
            commits=self._commits,
            commit_failures=self._commit_failures,
            cancelled_at_drain=answers.cancelled_at_drain,
            cancelled_at_revoke=answers.cancelled_at_revoke,
            rebalances=ledger.rebalances,
            undecodable_batches=intake.undecodable_batches,
            rewound_partitions=intake.rewound_partitions,
            partitions_lost=self._partitions_lost,
        )

    @property
    def ready(self) -> bool:
        """For ``/readyz``: running, with partitions assigned and open."""
        ledger = self._ledger
        return self._started and bool(set(ledger.assigned) - set(ledger.opening)) and self.live

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
    def offsets(self) -> Ledger:
        """The records fetched and not yet committed, per partition (read, do not change)."""
        return self._ledger

    @property
    def intake(self) -> Intake:
        """The intake stage: ``take``/``take_all`` take a fetch, ``tick`` settles traces by
        time, ``recover(consumer, exc)`` gets past a fetch that does not decode, as the loop
        and the commit loop do."""
        return self._intake

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
        return self._intake.paused

    @property
    def assigned(self) -> frozenset[Any]:
        """The partitions this replica owns."""
        return self._ledger.assigned

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
        try:
            return await self._run(stop, until_caught_up=until_caught_up, ends=ends)
        finally:
            self._ended = True
            self._end.notify()

    async def _run(
        self, stop: asyncio.Event | None, *, until_caught_up: bool, ends: Mapping[Any, int] | None
    ) -> PipelineStats:
        s = self.settings
        stop = stop or asyncio.Event()
        # Every topic exists and may be used, or exit 1 naming what is missing (service.topics).
        self._limits = await self.clients.check_topics(s)
        self._held.max_value_bytes = self._limits.value_budget(s.held_topic_name, _TRACE_KEY)
        consumer = self.clients.group_consumer(s, group_id=s.group, client_id=s.client_id)
        delivery = KafkaDelivery(s, consumer, self.clients)
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
                    self.clients.watch_topics(s, interval_s=s.lag_interval_s),
                    name="citemon-topics",
                )
            ),
        ]
        if s.rekey_topic is not None:
            rekey = RekeyStage(s, self.clients, metrics=self.metrics, limits=self._limits)
            background.append(
                self.supervise(asyncio.create_task(rekey.run(), name="citemon-rekey"))
            )
        if until_caught_up:
            background.append(asyncio.create_task(self._stop_when_caught_up(stop, ends)))
        try:
            await self._intake.run(
                consumer, lambda: not stop.is_set() and self._supervisor.fatal is None
            )
        finally:
            self._started = False
            await self._drain()
            await self._probes.stop()
            self._supervisor.stop()
            deadline = asyncio.get_running_loop().time() + _CLOSE_TIMEOUT_S
            cut_short = not await stop_between_commits(background, self._commit_lock, deadline)
            self._skip_final_commit = cut_short
            await self._close(background, delivery, consumer, deadline)
            log.info("pipeline stopped: %s; %r", asdict(self.stats), self.sampler)
        if self._supervisor.fatal is not None:
            raise self._supervisor.fatal
        return self.stats

    async def caught_up(self, ends: Mapping[Any, int] | None = None) -> dict[Any, int]:
        """Return once every partition this replica owns is committed up to ``ends`` (by
        default each one's log end, read when this call first sees it), no trace is held with
        parts (each is completed or settled by its window) and no answer or shuffle probe is in
        flight; returns the ends it waited for (:class:`CatchUp`). Every answer up to them is
        then counted in the metrics. Each call has ends of its own: a later call waits for what
        was written since the earlier one returned. Raises the fatal error that stops
        :meth:`run`, or ``RuntimeError`` when :meth:`run` ended first for another reason
        (stopped, or refused at start): it would never return."""
        catch_up = CatchUp(self._ledger)
        while True:
            if self._supervisor.fatal is not None:
                raise self._supervisor.fatal
            if self._ended:
                raise RuntimeError("the pipeline stopped before it caught up")
            # Armed before the check, which awaits: a change meanwhile wakes the wait below.
            # What the check reads, each told by its owner: the ledger (partitions, positions,
            # commits), the jobs and probes in flight, the traces held, a fatal ending, run's end.
            changes = [
                asyncio.ensure_future(change)
                for change in (
                    self._ledger.changed(),
                    self._answers.ended(),
                    self._probes.ended(),
                    self._intake.held_changed(),
                    self._supervisor.failed(),
                    self._end.wait(),
                )
            ]
            try:
                if self._started and self.ready:
                    done = await catch_up.check(self._consumer, ends)
                    idle = not self._answers and not len(self._probes) and not len(self.assembler)
                    if done is not None and idle:
                        return done
                await asyncio.wait(changes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for change in changes:
                    change.cancel()

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
        """The final commit within ``_CLOSE_TIMEOUT_S``, then close the clients."""
        clients = [
            ("producer", delivery.stop),
            ("consumer", consumer.stop),
            ("batch re-read client", self._intake.aclose),  # a no-op unless one was made
        ]
        await close_within(
            deadline,
            background,
            final_commit=self._final_commit,
            clients=clients,
            uncommitted=lambda: len(self._ledger),
            timeout_s=_CLOSE_TIMEOUT_S,
        )

    async def _drain(self) -> None:
        if self._consumer is not None and self._ledger.assigned:
            with contextlib.suppress(Exception):
                self._consumer.pause(*self._ledger.assigned)
        await self._answers.drain(self.settings.drain_timeout_s)

    async def _final_commit(self) -> None:
        if self._skip_final_commit:
            log.warning("a commit was cut short at shutdown: skipping the final commit")
            return
        for _ in range(3):
            if await self.commit():
                return
            await asyncio.sleep(0.2)

    # -- commits -------------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.commit_interval_s)
            self._intake.tick()
            if self._ledger.opening:
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
            ledger = self._ledger
            # Partitions being revoked included: what they finished commits before they go.
            ready = ledger.ready(tp for tp in ledger.assigned if delivery.is_open(tp))
            if not ready:
                return True
            outcomes = await delivery.deliver(
                [
                    Commit(r.tp, r.offset, commit_messages(r, self.settings, self._limits))
                    for r in ready
                ]
            )
            ok = True
            fenced: set[Any] = set()
            broken: set[Any] = set()
            for r in ready:
                error = outcomes.get(r.tp)
                if isinstance(error, ProducerFenced):
                    fenced.add(r.tp)
                    continue
                if error is not None and delivery.broken(r.tp):
                    broken.add(r.tp)
                    continue
                if error is not None:
                    ok = False
                    self._commit_failures += 1
                    log.warning(
                        "commit failed, will retry (partition %d): %s",
                        r.tp.partition,
                        type(error).__name__,
                    )
                    if not isinstance(error, KafkaError | OSError | TimeoutError):
                        log.error("unexpected commit error", exc_info=error)
                    continue
                self._count(r)
            if fenced:
                self.lose(fenced, "have a new owner (our transactional producer was fenced)")
                ok = False
            if broken:
                self.lose(broken, "lost their transactional producer to a fatal client error")
                ok = False
            self._publish_lag()
            return ok

    def _count(self, r: Ready) -> None:
        """``r`` committed: confirm it in the ledger and count what it carried (no ``await``)."""
        self._ledger.confirm(r)
        self._commits += 1
        for answer in r.counted:
            for sink in self._sinks:
                sink.answer_counted(answer.score, answer.span_id)
        self._answers_committed += len(r.counted)
        for e in r.entries:
            for reason in e.dead_letters:
                self.metrics.dead_letter(reason)
                self._dead_letters += 1
        for record, why in r.cuts:
            self.metrics.record_cut(record, why)

    # -- rebalances ----------------------------------------------------------------------------

    async def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
        """Before a rebalance (aiokafka's listener callback): finish what is in flight for
        ``revoked`` (up to ``revoke_timeout_s``), commit it, and forget the rest, traces held
        for assembly included, so nothing of those partitions is ever counted here afterwards."""
        self._ledger.rebalance()
        gone = set(revoked)
        if not gone:
            return
        self._ledger.start_revoking(gone)
        self._intake.drop(gone)
        deadline = self._clock() + self.settings.revoke_timeout_s
        while self._answers.in_partitions(gone) and self._clock() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._answers.ended(), max(0.01, deadline - self._clock()))
        await self.commit()
        self._forget(gone)
        if self._delivery is not None:
            async with self._commit_lock:
                await self._delivery.close(gone)
        self._ledger.remove(gone)
        for tp in gone:
            self._lag_ends.pop(tp, None)
            self.metrics.forget_partition(tp.topic, tp.partition)
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
        for entry in self._ledger.drop(tps):
            dropped.update(a.score.trace_id for a in entry.answers if a.score.trace_id)
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
        self._partitions_lost += len(tps)
        self._ledger.start_revoking(tps)
        self._intake.drop(tps)
        self._forget(tps)
        if self._consumer is not None:
            request_rejoin(self._consumer)

    async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        """After a rebalance (aiokafka's listener callback): take ``assigned``, opening their
        transactional producers first when there is a results topic."""
        assigned = list(assigned)
        # Opening: its producer opened (transactions), its committed offset read, and its held
        # trace parts read back, before any of its records is taken.
        self._ledger.assign(assigned, opening=self._delivery is not None)
        if self._consumer is not None:
            self._intake.pause_new(self._consumer, assigned)
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))
        if self._ledger.opening:
            await self._open_partitions()

    async def _open_partitions(self) -> None:
        """Open the producers of the partitions still opening, then read their committed
        offsets and seek there, then read their held trace parts back
        (:mod:`citemon._service.held`); one that fails (the broker is away) stays opening,
        retried on the next commit tick.

        The order closes the race with a frozen previous owner: ``init_transactions`` fences it
        and waits for its last transaction to complete or abort, so the committed offset read
        *afterwards* includes everything it managed to commit (aiokafka fetched a committed
        offset already, concurrently with the assignment callback, which may predate that
        commit). Intake ignores the partition's records until then, and records below the
        committed offset fetched before the seek."""
        delivery, consumer, s = self._delivery, self._consumer, self.settings
        if delivery is None or consumer is None:
            return
        async with self._commit_lock:
            tps = self._ledger.opening
            outcomes = await asyncio.gather(
                *(delivery.open(tp) for tp in tps), return_exceptions=True
            )
            committed: dict[Any, int | None] = {}
            for tp, out in zip(tps, outcomes, strict=True):
                if tp not in self._ledger.opening:
                    continue  # revoked meanwhile
                if isinstance(out, BaseException):
                    log.warning(
                        "opening the producer of partition %d failed, will retry: %s",
                        tp.partition,
                        type(out).__name__,
                    )
                    continue
                try:
                    committed[tp] = await consumer.committed(tp)
                except (KafkaError, OSError, TimeoutError) as exc:
                    log.warning(
                        "reading the committed offset of partition %d failed, will retry: %s",
                        tp.partition,
                        type(exc).__name__,
                    )
            if not committed:
                return
            # Read back before the seeks, all partitions at once: a fetch during this await
            # would move a position past records not taken (the partitions are not readable).
            try:
                held = await read_held(self.clients, s, list(committed), committed)
            except (KafkaError, OSError, TimeoutError) as exc:
                log.warning(
                    "reading the held trace parts of partitions %s failed, will retry: %s",
                    sorted(tp.partition for tp in committed),
                    type(exc).__name__,
                )
                return
            now = time.time()
            for tp, offset in committed.items():
                if tp not in self._ledger.opening:
                    continue  # revoked meanwhile
                try:
                    if offset is None:
                        await consumer.seek_to_beginning(tp)
                    else:
                        consumer.seek(tp, offset)
                except (KafkaError, OSError, TimeoutError, IllegalStateError) as exc:
                    log.warning("seeking partition %d failed, will retry: %r", tp.partition, exc)
                    continue
                self._ledger.sought(tp)
                restored = self._intake.restore(tp, held.get(tp, {}), now)
                if restored:
                    log.info("partition %d: %d held trace(s) read back", tp.partition, restored)
                self._ledger.opened(tp, offset)

    # -- lag -----------------------------------------------------------------------------------

    async def _lag_loop(self) -> None:
        while True:
            try:
                await self.update_lag()
            except (KafkaError, OSError, TimeoutError) as exc:
                log.info("lag update failed: %s", type(exc).__name__)
            await asyncio.sleep(self.settings.lag_interval_s)

    async def update_lag(self) -> dict[Any, int]:
        """Set ``citemon_consumer_lag`` for every assigned partition: log end − committed.

        Reads the log ends (and, where this process has committed nothing yet, the group's
        committed offset or the log start); every commit republishes the gauge against the ends
        last read, so it drops as soon as work commits."""
        consumer, ledger = self._consumer, self._ledger
        tps = ledger.partitions
        if consumer is None or not tps:
            return {}
        ends = await consumer.end_offsets(tps)
        missing = [tp for tp in tps if ledger.committed(tp) is None]
        if missing:
            starts = await consumer.beginning_offsets(missing)
            for tp in missing:
                committed = await consumer.committed(tp)
                ledger.set_committed(tp, starts[tp] if committed is None else committed)
        self._lag_ends = {tp: ends[tp] for tp in tps}
        return self._publish_lag()

    def _publish_lag(self) -> dict[Any, int]:
        lags: dict[Any, int] = {}
        for tp, end in self._lag_ends.items():
            committed = self._ledger.committed(tp)
            if tp in self._ledger.assigned and committed is not None:
                lags[tp] = max(0, end - committed)
                self.metrics.consumer_lag(tp.topic, tp.partition, lags[tp])
        return lags


def commit_messages(
    r: Ready, settings: Settings, limits: RecordLimits | None = None
) -> list[OutMessage]:
    """What to produce with ``r``'s commit: its dead letters, then the result and review
    records of the answers it counts, each fitting its topic's limit
    (:mod:`citemon._service.outputs`); what was cut to fit is noted in ``r.cuts``, to be
    counted once the commit succeeded."""
    limits = limits or RecordLimits()
    r.cuts = []
    messages = [fit_dead_letter(m, limits) for e in r.entries for m in e.messages]
    messages += [m for e in r.entries for m in e.held]  # sized when made (service.held)
    for answer in r.counted:
        result = result_message(settings, answer.score, answer.span_id, limits)
        if result is not None:
            messages.append(result)
        review = review_message(answer.score, answer.span_id, settings, limits)
        if review is not None:
            messages.append(review)
        elif review_selected(answer.score.trace_id, settings.review_rate):
            r.cuts.append(("review", "dropped"))
    r.cuts.extend(cut for m in messages for cut in m.cut)
    return messages


class CatchUp:
    """Whether intake has caught up: every owned partition read and committed to a target end.

    For each partition this replica owns, the target is the given end or, by default, its log
    end when first seen here (with ``read_committed``, the last stable offset). A partition has
    caught up when intake's position is at or past the target and nothing taken from it is
    uncommitted. The position, not the committed offset, is compared: a transaction marker at
    the end of the log has no record to commit, so the committed offset may stop one short of
    the end while the position passes it.

    The positions are read with ``await``; they move only when ``getmany`` returns (or raises)
    or a partition is sought, each counted in :attr:`Ledger.moved`. If that count stood still
    while they were read and no fetch is being taken, the ledger holds every record below them,
    so "nothing uncommitted" is exact.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self.targets: dict[Any, int] = {}

    async def check(self, consumer: Any, ends: Mapping[Any, int] | None) -> dict[Any, int] | None:
        """The targets of the owned partitions once all are reached; None before."""
        ledger = self._ledger
        if consumer is None or not ledger.settled:
            return None
        if ends is not None:
            self.targets.update({tp: e for tp, e in ends.items() if tp not in self.targets})
        owned = list(ledger.assigned)
        unknown = [tp for tp in owned if tp not in self.targets]
        if unknown:
            with contextlib.suppress(KafkaError, OSError, TimeoutError):
                self.targets.update(await consumer.end_offsets(unknown))
        moved = ledger.moved
        owned = list(ledger.assigned)
        positions: dict[Any, int] = {}
        for tp in owned:
            if tp not in self.targets:
                return None
            try:
                positions[tp] = await consumer.position(tp)
            except IllegalStateError:
                return None  # revoked meanwhile
        if ledger.moved != moved or ledger.taking or set(owned) != ledger.assigned:
            return None
        if all(positions[tp] >= self.targets[tp] and ledger.uncommitted(tp) == 0 for tp in owned):
            return {tp: self.targets[tp] for tp in owned}
        return None
