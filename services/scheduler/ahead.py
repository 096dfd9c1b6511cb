"""The pass ahead: the soonest due time's sessions written before it, committed at it.

A busy minute brings thousands of schedules due at one instant, and the last of their
sessions lands as late as the whole burst takes to write. On PostgreSQL a tick therefore
starts on a due time :data:`~tickwork.services.scheduler.loop.PREPARE_SECONDS` before it:
each worker claims batches of the schedules due then (``FOR UPDATE SKIP LOCKED``, as a
pass does), plans them as of that time, and inserts their sessions and advances their
checkpoints in one transaction, a savepoint per batch. It commits once the database's
clock has reached the due time, so the sessions appear at it, never before.

Exactly-once holds as in any pass: a batch's sessions and the checkpoints that account for
them commit together or not at all; the claimed rows stay locked until then, so another
replica skips them (and, once they commit, finds them no longer due); the sessions'
idempotency key refuses a second copy. A crash or a stop before the commit rolls it all
back, and the passes after the due time emit what is left, as they do what a worker had
no time to prepare. A schedule whose ``overlap: skip`` or ``buffer_one`` would record its
time as missed because an attempt still runs is left to the pass at the due time too: the
attempt may end before it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.scheduler.listing import PASS_BATCHES, DueList
from tickwork.services.scheduler.report import TickReport, Written
from tickwork.shared.store import emission as emission_store

if TYPE_CHECKING:
    from tickwork.services.scheduler.loop import Scheduler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Target:
    """The due time a pass ahead writes for, and when it comes on this machine's
    monotonic clock (never sooner than on the database's)."""

    due_at: datetime
    comes_at: float  # time.monotonic()

    def seconds_left(self) -> float:
        return self.comes_at - time.monotonic()


def ahead_pass(scheduler: Scheduler, report: TickReport) -> float | None:
    """Emit the soonest due time's sessions ahead of it if it is close enough, returning
    once it has come: the seconds spent waiting for it; None if none was close."""
    target = _soonest(scheduler)
    if target is None:
        return None
    with scheduler.engine.connect() as conn:
        due = emission_store.list_due(conn, target.due_at, scheduler.batch_size * PASS_BATCHES)
    workers = max(min(scheduler.workers, -(-len(due) // scheduler.batch_size)), 1)
    with ThreadPoolExecutor(workers + 1, thread_name_prefix="scheduler-ahead") as pool:
        counts = pool.submit(scheduler.active_counts)
        listing = DueList(due, counts, scheduler.batch_size, small_first=False)
        parts = [TickReport() for _ in range(workers)]
        held = [pool.submit(_prepare_and_commit, scheduler, target, listing, p) for p in parts]
        waited = max(done.result() for done in held)
    for part in parts:
        report.add(part)
    return waited


def _soonest(scheduler: Scheduler) -> _Target | None:
    """The soonest due time if it is at most ``prepare_seconds`` away (and not yet come)."""
    with scheduler.engine.connect() as conn:
        due_at = emission_store.earliest_due(conn)
        now = scheduler.now(conn)
    # The database read its clock before this: the due time comes no later than this
    # estimate says on the database's clock, so waiting for it is never too short.
    read_at = time.monotonic()
    if due_at is None or not now < due_at <= now + timedelta(seconds=scheduler.prepare_seconds):
        return None
    return _Target(due_at, read_at + (due_at - now).total_seconds())


def _prepare_and_commit(
    scheduler: Scheduler, target: _Target, listing: DueList, report: TickReport
) -> float:
    """One worker: batches in one transaction while there is time for another, then the
    commit at the due time; the seconds it waited. ``report`` gets what it committed."""
    mine = TickReport()
    written: list[Written] = []
    with scheduler.engine.connect() as conn, conn.begin() as transaction:
        batch_seconds = 0.0
        while (
            not scheduler.stopping.is_set()
            and target.seconds_left() > batch_seconds
            and (batch := listing.next_batch())
        ):
            started = time.monotonic()
            written += _prepare_batch(scheduler, conn, batch, target, listing, mine)
            batch_seconds = time.monotonic() - started
        waited_from = time.monotonic()
        if not _wait_for(scheduler, conn, target):
            transaction.rollback()  # stopping: the next scheduler emits them when due
            return time.monotonic() - waited_from
        waited = time.monotonic() - waited_from
    committed_at = target.due_at + timedelta(seconds=-target.seconds_left())
    for item in written:
        scheduler.count(item, committed_at, mine)
    report.add(mine)
    return waited


def _prepare_batch(
    scheduler: Scheduler,
    conn: Connection,
    batch: list[int],
    target: _Target,
    listing: DueList,
    report: TickReport,
) -> list[Written]:
    """Claim and write one batch under a savepoint: a batch the database refuses is
    rolled back alone, and left to the passes after the due time (which retry it
    schedule by schedule)."""
    try:
        with conn.begin_nested():
            rows = emission_store.claim_listed(conn, batch, target.due_at)
            return [scheduler.emit(conn, rows, target.due_at, report, listing, ahead=True)]
    except SQLAlchemyError as exc:
        log.warning("scheduler batch failed ahead of its due time (%s); retried when due", exc)
        return []


def _wait_for(scheduler: Scheduler, conn: Connection, target: _Target) -> bool:
    """Wait until the database's clock has reached the due time; False if stopped first."""
    if scheduler.stopping.wait(max(target.seconds_left(), 0.0)):
        return False
    # The estimate cannot come early, but the database's clock is the one every replica
    # and executor goes by: it has the last word.
    while (now := scheduler.now(conn)) < target.due_at:
        if scheduler.stopping.wait((target.due_at - now).total_seconds()):
            return False
    return True
