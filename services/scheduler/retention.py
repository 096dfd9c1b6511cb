"""The scheduler's retention pass: each ``tick()`` prunes history the policy says is old.

Every scheduler replica runs the loop; a pass first tries the PostgreSQL advisory lock
:data:`~tickwork.shared.store.retention.RETENTION_LOCK_KEY` on a connection of its own, so one
replica prunes at a time and the others skip their pass (on SQLite the one process
prunes). A pass removes batch by batch
(:class:`~tickwork.shared.store.retention_batches.BatchLimits`:
at most 200 sessions or 5,000 tasks a transaction; between two, three times as long as the
last one took) until nothing
old is left or the scheduler stops; passes start every :data:`PRUNE_EVERY_SECONDS`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.scheduler.metrics import SchedulerMetrics
from tickwork.shared.clock import Clock, SystemClock
from tickwork.shared.store.retention import (
    PruneResult,
    RetentionPolicy,
    oldest_session_age_seconds,
    prune_history,
    pruning_lock,
)
from tickwork.shared.store.retention_batches import BatchLimits

log = logging.getLogger(__name__)

PRUNE_EVERY_SECONDS = 600.0
"""Time between the starts of two retention passes."""

FIRST_PASS_SECONDS = 60.0
"""Wait before the first pass after start: a restart loop does not prune at each start."""


@dataclass
class PruneReport:
    """What one retention pass did."""

    held_lock: bool = False
    result: PruneResult = field(default_factory=PruneResult)

    @property
    def removed(self) -> int:
        """Rows deleted over every table."""
        return self.result.total


class Pruner:
    """Applies a retention policy to the store, one pass per :meth:`tick`."""

    def __init__(
        self,
        engine: Engine,
        policy: RetentionPolicy,
        *,
        metrics: SchedulerMetrics | None = None,
        clock: Clock | None = None,
        limits: BatchLimits | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.engine = engine
        self.policy = policy
        self.metrics = metrics or SchedulerMetrics()
        self.clock = clock or SystemClock()
        self.limits = limits or BatchLimits()
        self.stopping = stopping or threading.Event()

    def tick(self, now: datetime | None = None) -> PruneReport:
        """One pass at ``now`` (default: the clock's): prune if this replica gets the lock."""
        report = PruneReport()
        if self.policy.keeps_everything:
            return report
        at = now or self.clock.now()
        started = time.perf_counter()
        with pruning_lock(self.engine) as held:
            report.held_lock = held
            if held:
                report.result = prune_history(
                    self.engine, self.policy, at, limits=self.limits, stop=self.stopping.is_set
                )
        self._count(report, at, time.perf_counter() - started)
        return report

    def _count(self, report: PruneReport, now: datetime, seconds: float) -> None:
        for table, rows in report.result.removed.items():
            if rows:
                self.metrics.rows_pruned.labels(table).inc(rows)
        if report.held_lock:
            self.metrics.prune_duration.observe(seconds)
            self.metrics.oldest_session_age.set(oldest_session_age_seconds(self.engine, now))
        if report.removed or report.result.logs_pruned:
            removed = {t: n for t, n in report.result.per_table().items() if n}
            log.info(
                "retention removed %d rows in %.1fs (%s); logs pruned=%d",
                report.removed,
                seconds,
                " ".join(f"{table}={rows}" for table, rows in removed.items()),
                report.result.logs_pruned,
            )

    def run_forever(self, every_seconds: float = PRUNE_EVERY_SECONDS) -> None:
        """A pass every ``every_seconds`` until :attr:`stopping` is set; a store that
        fails a pass is tried again at the next one."""
        wait = min(FIRST_PASS_SECONDS, every_seconds)
        while not self.stopping.wait(wait):
            started = time.monotonic()
            try:
                self.tick()
            except SQLAlchemyError as exc:
                log.warning("retention pass failed, trying again later: %s", exc)
            wait = max(every_seconds - (time.monotonic() - started), 0.0)


def start_pruner(pruner: Pruner) -> threading.Thread:
    """Run ``pruner`` in a daemon thread of its own (it stops with its ``stopping`` event)."""
    thread = threading.Thread(target=pruner.run_forever, name="retention", daemon=True)
    thread.start()
    return thread
