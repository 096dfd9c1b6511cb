"""The scheduler's pass: each ``tick()`` emits the sessions that schedules have due.

A tick lists the due schedules once, with their checkpoints, and counts the attempts
running or waiting for every schedule beside its first batches; it claims the listed
schedules in batches by id (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so replicas, and a
tick's own workers, share the work and never handle one schedule at once), plans each one from its
checkpoint with :func:`tickwork.shared.domain.catchup.plan_pass`, applies the overlap policy, and
in one transaction per batch inserts the sessions (``ON CONFLICT DO NOTHING`` on the
session's idempotency key) and advances the checkpoints. A crash before the commit
changes nothing; a crash after it left nothing undone. Either way, every session time is
emitted once.

The overlap policy reads the counts taken when the pass began. A schedule whose
checkpoint moved since (another replica emitted for it) is counted again in its batch;
attempts that finished since only make the policy hold back a session that
``_start_waiting`` then releases at the end of the tick.

On PostgreSQL a tick then writes the sessions of the soonest due time, if it is at most
:data:`PREPARE_SECONDS` away, ahead of it, and commits them when it comes
(:mod:`tickwork.services.scheduler.ahead`): a busy minute's sessions appear as it begins.

Looping, waiting and back-off are the shared runner's (:mod:`tickwork.shared.runner`, driven by
:mod:`tickwork.services.scheduler.main`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import assert_never

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.scheduler.ahead import ahead_pass
from tickwork.services.scheduler.listing import PASS_BATCHES, DueList, counts_to_apply
from tickwork.services.scheduler.metrics import SchedulerMetrics
from tickwork.services.scheduler.report import Emission, TickReport, Written

__all__ = ["PREPARE_SECONDS", "Scheduler", "TickReport"]
from tickwork.shared.clock import Clock, SystemClock
from tickwork.shared.domain.catchup import MissedRange, Pass, Span, plan_pass
from tickwork.shared.domain.schedule import DEFAULT_MAX_ACTIVE, ScheduleSpec
from tickwork.shared.domain.schedule_policies import MissedReason, Overlap
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.health import LoopHealth
from tickwork.shared.store import emission as emission_store
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.emission import NewSession, Progress
from tickwork.shared.store.engine import notify_work
from tickwork.shared.store.schedules import ScheduleRow
from tickwork.shared.store.tables import backfills, schedules

log = logging.getLogger(__name__)

BATCH_SCHEDULES = 1000
"""Schedules claimed per transaction."""

TIMES_PER_PASS = 1000
"""Session times one schedule emits per batch: a long catch-up yields to other schedules
between batches instead of holding them up."""

WORKERS = 2
"""Batches handled at once on PostgreSQL when more than one is due, each in its own
transaction and connection: while one batch waits for the database the next is planned.
They share the due schedules as replicas do, through ``SKIP LOCKED``."""

IDLE_SECONDS = 1.0
"""The longest sleep between ticks: how soon a new or changed schedule is noticed."""

MAX_BACKOFF_SECONDS = 300.0
"""The longest a failing schedule waits before it is tried again."""

PREPARE_SECONDS = 3.0
"""How long before the soonest due time a pass starts on its sessions (PostgreSQL): it
claims, plans and inserts them in transactions that commit once the database's clock has
reached that time, so that a busy minute's sessions appear as it begins, not over the
seconds after. A change to one of the schedules it holds waits for that commit."""


class Scheduler:
    """Turns schedules into sessions; any number of instances may run against one store."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock | None = None,
        metrics: SchedulerMetrics | None = None,
        batch_size: int = BATCH_SCHEDULES,
        times_per_pass: int = TIMES_PER_PASS,
        workers: int = WORKERS,
        prepare_seconds: float = PREPARE_SECONDS,
        health: LoopHealth | None = None,
    ) -> None:
        self.engine = engine
        self.health = health or LoopHealth()
        self.clock = clock
        self.metrics = metrics or SchedulerMetrics()
        self.batch_size = batch_size
        self.times_per_pass = times_per_pass
        # SQLite has one writer at a time: a second worker would only wait for the first.
        self.workers = workers if dialect_of(engine).concurrent_writers else 1
        # ... and a transaction held open for seconds would hold every other writer.
        self.prepare_seconds = prepare_seconds if dialect_of(engine).concurrent_writers else 0.0
        self.stopping = threading.Event()  # set by stop(): the runner's stop event
        self._connections_open = False

    def now(self, conn: Connection) -> datetime:
        """What time it is: the given clock, else the database's, else this machine's."""
        if self.clock is not None:
            return self.clock.now()
        return emission_store.database_now(conn) or SystemClock().now()

    def tick(self, now: datetime | None = None) -> TickReport:
        """Emit everything due (at ``now``, default the database's clock), pass by pass;
        on the database's clock, then the soonest due time's sessions ahead of it (see
        :data:`PREPARE_SECONDS`), returning once that time has come."""
        started = time.perf_counter()
        report = TickReport()
        # A pass handles each schedule due when it began once: a long catch-up yields to
        # the others until the next tick. Another pass follows only when the first could
        # not list everything that was due.
        while not self.stopping.is_set() and self._pass(now, report):
            pass
        self.metrics.due_schedules.set(report.due)
        report.started_waiting = self._start_waiting()
        held_seconds = None
        if now is None and self.clock is None and self.prepare_seconds > 0:
            held_seconds = ahead_pass(self, report)
        # What a pass ahead had no time to prepare, or could not write, is due now.
        report.more_ready = held_seconds is not None
        self.metrics.tick_duration.observe(time.perf_counter() - started - (held_seconds or 0.0))
        return report

    def _pass(self, now: datetime | None, report: TickReport) -> bool:
        """List the due schedules and their running attempts, then claim and emit them
        batch by batch, on up to :attr:`workers` connections; whether more may be due."""
        limit = self.batch_size * PASS_BATCHES
        counts: Future[dict[int, tuple[int, int]]] = Future()
        with self.engine.connect() as conn:
            due = emission_store.list_due(conn, now or self.now(conn), limit)
            if due and self.workers <= 1:  # one connection at a time (SQLite)
                counts.set_result(emission_store.active_counts(conn, None))
        if not report.due:
            report.due = len(due)  # the first pass's listing: what was due at the tick
        if not due:
            return False
        workers = min(self.workers, -(-len(due) // self.batch_size))
        with ThreadPoolExecutor(workers + 1, thread_name_prefix="scheduler-batch") as pool:
            if not counts.done():
                # Counted beside the first batches, which wait for the counts only once
                # they have claimed and planned: their sessions commit that much sooner.
                # Read after the list: a schedule emitted in between shows a new
                # checkpoint when it is claimed, and is counted again (see _counts).
                counts = pool.submit(self.active_counts)
            listing = DueList(due, counts, self.batch_size, workers)
            parts = [TickReport() for _ in range(workers)]
            drained = [pool.submit(self._drain, now, listing, part) for part in parts]
            claimed = sum(done.result() for done in drained)
        for part in parts:
            report.add(part)
        return len(due) == limit and claimed > 0

    def active_counts(self) -> dict[int, tuple[int, int]]:
        """Running and waiting attempts of every schedule that has any."""
        with self.engine.connect() as conn:
            return emission_store.active_counts(conn, None)

    def _drain(self, now: datetime | None, listing: DueList, report: TickReport) -> int:
        """Handle the listing's batches until none is left; how many schedules were claimed."""
        claimed = 0
        while not self.stopping.is_set() and (batch := listing.next_batch()):
            claimed += self._batch(now, batch, listing, report)
        return claimed

    def _batch(
        self, now: datetime | None, batch: list[int], listing: DueList, report: TickReport
    ) -> int:
        """Claim and handle one batch of listed schedules; returns how many were claimed."""
        rows: list[ScheduleRow] = []
        try:
            with self.engine.begin() as conn:
                at = now or self.now(conn)
                rows = emission_store.claim_listed(conn, batch, at)
                written = self.emit(conn, rows, at, report, listing)
            self.count(written, _emitted_at(at, written), report)
            return len(rows)
        except SQLAlchemyError as exc:
            if not rows:
                raise
            # One schedule broke the batch: handle them one by one to find it.
            log.warning("scheduler batch failed (%s); retrying schedule by schedule", exc)
            return self._one_by_one(now, [row.id for row in rows], report)

    def _one_by_one(self, now: datetime | None, ids: list[int], report: TickReport) -> int:
        with self.engine.connect() as conn:
            at = now or self.now(conn)
        for schedule_id in ids:
            try:
                with self.engine.begin() as conn:
                    written = self.emit(conn, _claim_one(conn, schedule_id, at), at, report)
                self.count(written, _emitted_at(at, written), report)
            except SQLAlchemyError as exc:
                self._fail(schedule_id, at, str(exc).splitlines()[0], report)
        return len(ids)

    def emit(
        self,
        conn: Connection,
        rows: Sequence[ScheduleRow],
        now: datetime,
        report: TickReport,
        listing: DueList | None = None,
        *,
        ahead: bool = False,
    ) -> Written:
        """Plan every claimed schedule and write the outcome in the caller's transaction;
        what it wrote is for :meth:`count` once that has committed. ``ahead`` (a pass
        ahead of the due time) leaves out the schedules whose overlap policy would record
        a time as missed: an attempt may end before the due time comes, so the pass at it
        decides them."""
        started = time.perf_counter()
        report.schedules += len(rows)
        spans = emission_store.inactive_spans(conn, [row.id for row in rows])
        emissions: list[Emission] = []
        plans: dict[tuple[ScheduleSpec, datetime], Pass] = {}
        for row in rows:
            try:
                emissions.append(self._plan(row, now, spans.get(row.id, []), plans))
            except Exception as exc:
                log.exception("schedule %s/%s failed", row.project_name, row.workflow_name)
                self._record_failure(conn, row.id, now, f"{type(exc).__name__}: {exc}", report)
        counts = counts_to_apply(conn, [e.row for e in emissions if e.plan.emit], listing)
        if ahead:
            emissions = [e for e in emissions if not _may_miss(e, counts.get(e.row.id, (0, 0)))]
        for emission in emissions:
            _apply_overlap(emission, counts.get(emission.row.id, (0, 0)))
        new = [item for emission in emissions for item in emission.new]
        created = emission_store.insert_sessions(conn, new, now)
        if created:
            notify_work(conn)  # executors start the new attempts when this commits
        for emission in emissions:
            report.missed += schedule_store.record_missed(
                conn, emission.row.id, emission.missed, now
            )
        emission_store.save_progress(conn, [_progress(e) for e in emissions], now)
        return Written(emissions, new, len(created), started)

    def _plan(
        self,
        row: ScheduleRow,
        now: datetime,
        spans: list[Span],
        plans: dict[tuple[ScheduleSpec, datetime], Pass],
    ) -> Emission:
        """The schedule's pass; ``plans`` holds those of its batch to share (read-only)."""
        spec = row.schedule
        checkpoint = row.last_session_time or now
        inactive = row.inactive_since
        all_spans = [*spans, Span(inactive)] if inactive is not None else spans
        # Thousands of schedules share a spec and a checkpoint at a busy minute, and their
        # passes are the same: the seed only matters with jitter, the spans when there are.
        key = (spec, checkpoint) if not all_spans and not spec.jitter_seconds else None
        plan = plans.get(key) if key is not None else None
        if plan is None:
            plan = plan_pass(
                spec, checkpoint, now, seed=row.seed, spans=all_spans, limit=self.times_per_pass
            )
            if key is not None:
                plans[key] = plan
        return Emission(row, plan, missed=list(plan.missed))

    def count(self, written: Written, emitted_at: datetime, report: TickReport) -> None:
        """Count what a committed batch wrote; its sessions' lag is ``emitted_at`` (when
        the batch committed) minus their run time."""
        created, new = written.created, written.new
        report.emitted += created
        report.duplicates += len(new) - created
        self.metrics.sessions_emitted.inc(created)
        self.metrics.duplicates_suppressed.inc(len(new) - created)
        for emission in written.emissions:
            spec = emission.row.schedule
            for missed in emission.missed:
                self.metrics.missed.labels(missed.reason).inc(missed.count or 1)
            for item in emission.new:
                run = spec.run_time(item.session_time, emission.row.seed)
                lag = (emitted_at - run).total_seconds()
                self.metrics.emission_lag.observe(max(lag, 0.0))
                report.lags.append(lag)

    def _record_failure(
        self, conn: Connection, schedule_id: int, now: datetime, error: str, report: TickReport
    ) -> None:
        failures = emission_store.record_failure(
            conn, schedule_id, error, now, max_backoff_seconds=MAX_BACKOFF_SECONDS
        )
        log.warning("schedule %s failed %d time(s) in a row: %s", schedule_id, failures, error)
        report.failures += 1
        self.metrics.failures.inc()

    def _fail(self, schedule_id: int, now: datetime, error: str, report: TickReport) -> None:
        log.error("schedule %s failed: %s", schedule_id, error)
        with self.engine.begin() as conn:
            self._record_failure(conn, schedule_id, now, error, report)

    def _start_waiting(self) -> int:
        """Release waiting attempts as running ones finish, oldest session time first."""
        with self.engine.begin() as conn:
            waiting = emission_store.waiting_attempts(conn, limit=5000)
            if not waiting:
                return 0
            schedule_ids = {w.schedule_id for w in waiting if w.schedule_id and not w.backfill_id}
            backfill_ids = {w.backfill_id for w in waiting if w.backfill_id}
            held_schedules = emission_store.lock_rows(conn, schedules, schedule_ids)
            held_backfills = emission_store.lock_rows(conn, backfills, backfill_ids)
            room = _room(conn, held_schedules, held_backfills)
            chosen: list[int] = []
            for item in waiting:
                key = _Owner.of(item.schedule_id, item.backfill_id)
                if room.get(key, 0) > 0:
                    room[key] -= 1
                    chosen.append(item.attempt_id)
            started = emission_store.start_waiting(conn, chosen)
            if started:
                notify_work(conn)
        self.metrics.attempts_started.inc(started)
        return started

    def stop(self) -> None:
        """Make the runner return after the current tick (and a tick after its batch)."""
        self.stopping.set()

    def seconds_until_due(self) -> float:
        """How long to sleep: until the soonest due schedule (less
        :data:`PREPARE_SECONDS`), at most :data:`IDLE_SECONDS`."""
        with self.engine.connect() as conn:
            due = emission_store.earliest_due(conn)
            now = self.now(conn)
        if due is None:
            return IDLE_SECONDS
        # A pass ahead starts on a due time that close before it.
        ahead = (due - now).total_seconds() - self.prepare_seconds
        return min(max(ahead, 0.0), IDLE_SECONDS)

    def wait(self, _idle_seconds: float) -> None:
        """Sleep until the soonest due schedule (the runner's wait; at most
        :data:`IDLE_SECONDS`, whatever the runner's idle time), or until stopped."""
        if not self._connections_open:
            self.open_connections()
        self.stopping.wait(self.seconds_until_due())

    def open_connections(self) -> None:
        """Open the connections a busy pass holds at once (its workers' and the count's)
        while idle, so that a busy minute does not wait for the server to start them.
        The engine's pool keeps them (five by default)."""
        with ExitStack() as held:
            for _ in range(self.workers + 1 if self.workers > 1 else 1):
                held.enter_context(self.engine.connect())
        self._connections_open = True


def _emitted_at(now: datetime, written: Written) -> datetime:
    """When a batch that began at ``now`` committed: its lag counts its own work too."""
    return now + timedelta(seconds=time.perf_counter() - written.started)


def _claim_one(conn: Connection, schedule_id: int, now: datetime) -> list[ScheduleRow]:
    if not emission_store.lock_rows(conn, schedules, [schedule_id]):
        return []  # another replica has it
    row = schedule_store.get_schedule(conn, schedule_id)
    due = row.next_run_time is not None and row.next_run_time <= now
    return [row] if due else []


def _may_miss(emission: Emission, counts: tuple[int, int]) -> bool:
    """Whether the overlap policy could record one of the times as missed because of the
    attempts counted (active, waiting): ``skip`` and ``buffer_one`` with any of them."""
    return emission.row.schedule.overlap is not Overlap.ALLOW and counts != (0, 0)


def _apply_overlap(emission: Emission, counts: tuple[int, int]) -> None:
    """Decide each due time: start it, let it wait, or record it as missed."""
    row, spec = emission.row, emission.row.schedule
    active, waiting = counts
    skipped: list[datetime] = []
    for session_time in emission.plan.emit:
        match spec.overlap:
            case Overlap.ALLOW:
                start = active < spec.max_active and waiting == 0
            case Overlap.SKIP:
                start = active + waiting == 0
                if not start:
                    skipped.append(session_time)
                    continue
            case Overlap.BUFFER_ONE:
                start = active == 0 and waiting == 0
                if not start and waiting > 0:
                    skipped.append(session_time)
                    continue
            case unknown:
                assert_never(unknown)
        state = AttemptState.CREATED if start else AttemptState.WAITING
        active, waiting = (active + 1, waiting) if start else (active, waiting + 1)
        emission.new.append(NewSession.of(row, session_time, state))
    if skipped:
        emission.missed.extend(_ranges(skipped, MissedReason.OVERLAP))


def _ranges(times: Sequence[datetime], reason: MissedReason) -> list[MissedRange]:
    """Missed times as one range each (overlap skips are rarely consecutive)."""
    return [MissedRange(t, t, 1, reason) for t in times]


def _progress(emission: Emission) -> Progress:
    plan = emission.plan
    return Progress(emission.row.id, plan.checkpoint, plan.next_session_time, plan.next_run_time)


@dataclass(frozen=True)
class _Owner:
    """What a waiting attempt counts against: its backfill if it has one, else its schedule."""

    schedule_id: int | None = None
    backfill_id: int | None = None

    @classmethod
    def of(cls, schedule_id: int | None, backfill_id: int | None) -> _Owner:
        return cls(backfill_id=backfill_id) if backfill_id else cls(schedule_id=schedule_id)


def _room(conn: Connection, schedule_ids: set[int], backfill_ids: set[int]) -> dict[_Owner, int]:
    """How many more attempts each schedule and backfill may start now."""
    room: dict[_Owner, int] = {}
    counts = emission_store.active_counts(conn, schedule_ids)
    for schedule_id, row in schedule_store.schedules_by_id(conn, schedule_ids).items():
        spec = row.schedule
        limit = spec.max_active if spec.overlap is Overlap.ALLOW else 1
        room[_Owner(schedule_id=schedule_id)] = limit - counts.get(schedule_id, (0, 0))[0]
    active = emission_store.backfill_active_counts(conn, backfill_ids)
    parallel = emission_store.backfill_parallel(conn, backfill_ids)
    for backfill_id in backfill_ids:
        limit = DEFAULT_MAX_ACTIVE if parallel.get(backfill_id) else 1
        room[_Owner(backfill_id=backfill_id)] = limit - active.get(backfill_id, 0)
    return room
