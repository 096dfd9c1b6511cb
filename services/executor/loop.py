"""The executor's pass: one ``tick()`` starts attempts, applies results and dispatches tasks.

A pass is a fixed sequence of steps in one transaction (see :meth:`WorkflowExecutor.tick`);
the steps live beside this module: :mod:`~tickwork.services.executor.events` (agents' events),
:mod:`~tickwork.services.executor.recovery` (the reaper and kills),
:mod:`~tickwork.services.executor.dispatch` (starting attempts, groups and operator tasks) and
:mod:`~tickwork.services.executor.sla`. Looping, waiting and back-off are the shared runner's
(:mod:`tickwork.shared.runner`, driven by :mod:`tickwork.services.executor.main`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, Engine

from tickwork.services.executor.dispatch import (
    ATTEMPTS_PER_PASS,
    EXECUTOR_OPERATORS,
    start_and_dispatch,
    start_created_attempts,
    write_run_logs,
)
from tickwork.services.executor.events import apply_events
from tickwork.services.executor.graph import TaskGraph
from tickwork.services.executor.recovery import kill_canceling_attempts, reap
from tickwork.services.executor.report import (
    RESCAN_SECONDS,
    Pass,
    PassPlan,
    Recovery,
    TickReport,
    Timers,
)
from tickwork.services.executor.require import wake_requiring_tasks
from tickwork.services.executor.scope import MAX_TASKS_PER_ATTEMPT, Scope
from tickwork.services.executor.sla import fire_missed_slas
from tickwork.shared.clock import Clock, SystemClock
from tickwork.shared.dispatch.messages import TaskEvent, TaskFinished, TaskStarted
from tickwork.shared.dispatch.seam import Dispatcher
from tickwork.shared.domain.states import TIMED_TASK_STATES
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.logs import notify_log_readers
from tickwork.shared.store.partitions import AttemptFilter

__all__ = [
    "ATTEMPTS_PER_PASS",
    "EXECUTOR_OPERATORS",
    "MAX_TASKS_PER_ATTEMPT",
    "RESCAN_SECONDS",
    "STARTED_COALESCE_SECONDS",
    "Recovery",
    "TickReport",
    "WorkflowExecutor",
]

log = logging.getLogger(__name__)

STARTED_COALESCE_SECONDS = 0.005
"""After only "started" events arrived, how long to wait for the matching results, so a
short task costs one pass instead of two."""
RESULT_BATCH_BACKLOG = 32
"""Runs queued here and not yet started, from which results wait for one another (low
enough that a pool's fan-out, with at most its slots queued, is applied in batches too:
bench/pools.py)."""
RESULT_BATCH_SECONDS = 0.02
"""How long results wait for others while agents have that many runs still to start."""

WAKE_BATCH = 1000
"""Waiting tasks of one state one pass wakes, at most."""


class WorkflowExecutor:
    """Walks attempts' task graphs and hands ready operator tasks to a dispatcher.

    ``attempt_ids`` limits it to those attempts (an embedded run); None means all of them.

    Between full rescans (every :data:`RESCAN_SECONDS`) a pass only follows what it
    changed itself: tasks it promoted, retries it scheduled. That keeps a pass for one
    finished task down to a handful of statements.
    """

    def __init__(
        self,
        engine: Engine,
        dispatcher: Dispatcher,
        *,
        clock: Clock | None = None,
        dispatch_batch_size: int = 1000,
        task_timeout_seconds: float | None = None,
        attempt_ids: Collection[int] | None = None,
        recovery: Recovery | None = None,
        max_tasks_per_attempt: int = MAX_TASKS_PER_ATTEMPT,
    ) -> None:
        self.engine = engine
        self.recovery = recovery
        self.dispatcher = dispatcher
        self.clock = clock or SystemClock()
        self.scope = Scope(
            attempt_ids=None if attempt_ids is None else frozenset(attempt_ids),
            task_timeout_seconds=task_timeout_seconds,
            max_tasks_per_attempt=max_tasks_per_attempt,
            dispatch_batch_size=dispatch_batch_size,
        )
        self._pending: list[TaskEvent] = []
        self._conn: Connection | None = None  # kept across passes where the store allows
        self._limits: dict[int, int | None] = {}  # parent id -> _parallel limit
        self._sibling_edges: dict[int, bool] = {}  # plain group id -> a child waits for one
        self._timers = Timers()

    @property
    def attempt_ids(self) -> frozenset[int] | AttemptFilter | None:
        """The attempts this executor runs; None: all of them."""
        return self.scope.attempt_ids

    def keep_to(self, attempts: AttemptFilter) -> None:
        """Run only ``attempts`` from the next pass on (the partitions this executor
        holds changed); that pass rescans, reaps and looks for attempts, as a first one."""
        self.scope.attempt_ids = attempts
        self.scope.runs.clear()
        self._timers = Timers()

    @property
    def max_tasks_per_attempt(self) -> int:
        """Tasks one attempt may have, generated ones included."""
        return self.scope.max_tasks_per_attempt

    @max_tasks_per_attempt.setter
    def max_tasks_per_attempt(self, limit: int) -> None:
        self.scope.max_tasks_per_attempt = limit

    # -- one pass ----------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> TickReport:
        """One pass over the store; messages are published after the commit."""
        now = now or self.clock.now()
        # Events just waited for are applied at once: a second read would cost every hop
        # a round trip to Redis for what arrived meanwhile (the next wait reads that).
        fresh = [] if self._pending else self.dispatcher.poll_events(0)
        events, self._pending = [*self._pending, *fresh], []
        plan = self._timers.plan(now, events, reaping=self.recovery is not None)
        began = time.perf_counter()
        work = self._run_pass(now, plan, events)
        committed = time.perf_counter()
        self.dispatcher.acknowledge()
        reap_every = self.recovery.every_seconds if self.recovery is not None else None
        self._timers.after_commit(work, reap_every, work.graph.earliest_wake)
        if work.revoked:
            self.dispatcher.revoke(work.revoked)
            for task_id, _token in work.revoked:  # a revoked run may never report
                self.scope.runs.forget(task_id)
        self.dispatcher.publish(work.messages)
        report = work.report
        report.phase_seconds = {
            "statements": work.statements_seconds,
            "commit": committed - began - work.statements_seconds,
            "publish": time.perf_counter() - committed,
        }
        report.tasks_dispatched = len(work.messages)
        report.moves = work.graph.moves
        if work.graph.triggered_attempts:  # start what triggers started, at once
            self._timers.look_again = True
        report.more_ready = report.more_ready or bool(self._pending) or self._timers.look_again
        for attempt_id, _state in report.finished_attempts:
            self.scope.contexts.forget(attempt_id)
        return report

    def _run_pass(self, now: datetime, plan: PassPlan, events: list[TaskEvent]) -> Pass:
        """The pass's steps in one transaction; its events are redelivered if it fails."""
        began = time.perf_counter()
        try:
            with self._transaction() as conn:
                graph = TaskGraph(conn, now, self._limits, self._sibling_edges)
                work = Pass(conn, graph, now, plan)
                if plan.look:
                    self._look_for_attempts(work)
                apply_events(work, self.scope, events)
                if plan.rescan:
                    self._fire_missed_slas(work)
                if plan.reap and self.recovery is not None:
                    reap(work, self.scope, self.recovery, self.dispatcher)
                work.graph.settle()
                if plan.rescan or self._timers.wakes_due(now, work.graph.earliest_wake):
                    work.report.tasks_woken = self._wake_due_tasks(work)
                self._timers.scan_ready = False
                if start_and_dispatch(work, self.scope):
                    work.report.more_ready = self._timers.scan_ready = True
                self._end_attempts(work)
                write_run_logs(work)
                ended = [a for a, _ in work.report.finished_attempts]
                told = work.notified  # by the statement that queued the pass's runs
                notify_log_readers(conn, {*work.log_attempts, *ended} - told)
                work.statements_seconds = time.perf_counter() - began
        except BaseException:
            self.scope.runs.clear()  # it may know runs the rollback undid
            self.dispatcher.redeliver()
            raise
        return work

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A pass's transaction, on the connection of every pass, which a failed pass
        closes: a pool's checkout and return cost a pass of a chain of short tasks a few
        percent, and on PostgreSQL the statements psycopg prepares on a connection stay
        prepared only while nothing rolls it back (another thread's reads on a pooled one
        do, each time it is given back). One the server closed while it was idle (a
        restart, a failover) is dropped before the pass and another taken from the pool,
        as the pool's own checkout would."""
        if self._conn is not None and dialect_of(self.engine).connection_lost(self._conn):
            conn, self._conn = self._conn, None
            conn.invalidate()
            conn.close()
        if self._conn is None:
            self._conn = self.engine.connect()
        try:
            with self._conn.begin():
                yield self._conn
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Give back the connection kept across passes, if any (the next pass takes one)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def _look_for_attempts(self, work: Pass) -> None:
        """Kill attempts a kill was asked for; start created ones."""
        kill_canceling_attempts(work, self.scope)
        work.report.attempts_started = start_created_attempts(work, self.scope)
        self._timers.look_again = work.report.attempts_started >= ATTEMPTS_PER_PASS

    def _fire_missed_slas(self, work: Pass) -> None:
        missed, stopped = fire_missed_slas(work.conn, work.graph, work.now, self.attempt_ids)
        work.report.slas_missed = missed
        work.revoked += stopped

    def _wake_due_tasks(self, work: Pass) -> int:
        """Retries and delayed tasks whose ``not_before`` has come -> READY."""
        woken = 0
        for state in TIMED_TASK_STATES:
            due = task_store.select_tasks_due(
                work.conn, state, work.now, limit=WAKE_BATCH, attempt_ids=self.attempt_ids
            )
            woken += len(work.graph.promote([t.id for t in due], from_state=state))
        self._timers.wake_due = task_store.earliest_not_before(
            work.conn, TIMED_TASK_STATES, attempt_ids=self.attempt_ids
        )
        return woken

    def _end_attempts(self, work: Pass) -> None:
        """Note the attempts that ended; ``require>`` tasks waiting on them look again."""
        graph, report = work.graph, work.report
        ended = [a for a, _ in (*report.finished_attempts, *graph.finished_attempts)]
        wake_requiring_tasks(work.conn, graph, ended)
        report.finished_attempts += graph.finished_attempts

    # -- waiting -----------------------------------------------------------------------

    def wait_for_work(self, timeout_seconds: float) -> None:
        """Block until an agent reports something or ``timeout_seconds`` pass.

        While agents have plenty of this executor's runs still to start on the queues of
        the results that came (at least :data:`RESULT_BATCH_BACKLOG` on each), those
        results wait :data:`RESULT_BATCH_SECONDS` for others (never past the wait's
        end), to be applied together in one pass: applying them sooner would start
        nothing sooner, and a pass costs about as much for one result as for many.
        What was read is kept at once, whatever a further read meets."""
        began = time.monotonic()
        events = self.dispatcher.poll_events(timeout_seconds)
        self._pending.extend(events)
        if not events:
            return
        if all(isinstance(e, TaskStarted) for e in events):
            self._pending.extend(self.dispatcher.poll_events(STARTED_COALESCE_SECONDS))
        elif self._backlogged(events):
            left = timeout_seconds - (time.monotonic() - began)
            time.sleep(max(0.0, min(RESULT_BATCH_SECONDS, left)))
            self._pending.extend(self.dispatcher.poll_events(0))

    def _backlogged(self, events: Sequence[TaskEvent]) -> bool:
        """Whether every result among ``events`` is of a run queued here on a queue where
        at least :data:`RESULT_BATCH_BACKLOG` runs are still to start."""
        runs = self.scope.runs
        if runs.waiting < RESULT_BATCH_BACKLOG:
            return False
        finished = [e for e in events if isinstance(e, TaskFinished)]
        return bool(finished) and all(
            runs.waiting_behind(e.task_id, e.lease_token) >= RESULT_BATCH_BACKLOG for e in finished
        )

    def seconds_until_due(self, now: datetime, cap_seconds: float) -> float:
        """How long the loop may sleep before a wait ends or a rescan is due (at most the cap)."""
        return self._timers.seconds_until_due(now, cap_seconds)

    def wait(self, idle_seconds: float) -> None:
        """Sleep between passes: until an agent reports, a wait ends or a rescan is due,
        at most ``idle_seconds`` (the runner's wait)."""
        self.wait_for_work(self.seconds_until_due(self.clock.now(), idle_seconds))
