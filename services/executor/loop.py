"""The executor's loop: one ``tick()`` starts attempts, applies results and dispatches tasks."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, Engine

from services.executor.graph import TaskGraph
from services.executor.materialize import Placement, materialize_children
from services.executor.messages import AttemptContext, build_task_message
from services.executor.require import run_require, wake_requiring_tasks
from services.executor.sla import fire_missed_slas, set_deadline
from shared.clock import Clock, SystemClock
from shared.dispatch.messages import (
    Outcome,
    TaskEvent,
    TaskFinished,
    TaskMessage,
    TaskReleased,
    TaskStarted,
    WorkCommitted,
)
from shared.dispatch.seam import Dispatcher
from shared.domain.control import (
    BadControl,
    expand,
    parallel_flag,
    wait_seconds,
)
from shared.domain.expressions import escape, render
from shared.domain.operators import executor_operators
from shared.domain.schedule import ScheduleSpec
from shared.domain.states import TIMED_TASK_STATES, AttemptState, TaskState
from shared.domain.workflow import TaskSpec, WorkflowDefinition
from shared.errors import InvalidExpression
from shared.store import secrets as secret_store
from shared.store import sessions as session_store
from shared.store import tasks as task_store
from shared.store.projects import archive_digest_of_attempt, load_workflow_definition
from shared.store.sessions import AttemptRow
from shared.store.tasks import TaskRow

log = logging.getLogger(__name__)


RESCAN_SECONDS = 1.0
"""How often a pass looks at every waiting and ready task, not only at what it changed:
this finds work that other processes made (other executors, a restart)."""

STARTED_COALESCE_SECONDS = 0.005
"""After only "started" events arrived, how long to wait for the matching results, so a
short task costs one pass instead of two."""

ATTEMPTS_PER_PASS = 100
"""Created attempts one pass starts, at most (the next pass goes on at once)."""

REAP_BATCH = 5000
"""In-flight tasks one reaper pass looks at, at most."""

MAX_TASKS_PER_ATTEMPT = 10_000
"""Tasks one attempt may have, generated ones included (configurable)."""

EXECUTOR_OPERATORS = executor_operators()
"""Operators the executor runs itself, without an agent."""


@dataclass(frozen=True)
class Recovery:
    """How the reaper finds lost messages and lost agents (distributed mode only).

    Every ``every_seconds`` it looks at QUEUED and RUNNING tasks unchanged for
    ``grace_seconds`` whose lease key holds nothing for their token. One that no agent
    took lost its message and is published again under the same token. One that an agent
    took (RUNNING, or QUEUED with the agent's note that it took it: the agent died before
    its start was reported) lost its agent and is requeued under a new token, or fails
    once that happened ``max_lost`` times.
    """

    every_seconds: float = 5.0
    grace_seconds: float = 2.0
    max_lost: int = 3


@dataclass
class TickReport:
    """What one pass did."""

    attempts_started: int = 0
    events_applied: int = 0
    stale_results: int = 0
    repeated_results: int = 0  # a result of a token whose run had ended, sent again
    requeued: int = 0  # tasks given a new token: lost agents and released tasks
    republished: int = 0  # queued tasks whose message was lost, published again
    leases_lost: int = 0
    attempts_killed: int = 0
    tasks_woken: int = 0
    groups_started: int = 0
    tasks_dispatched: int = 0
    slas_missed: int = 0  # attempts whose sla: deadline passed, reacted to by this pass
    more_ready: bool = False  # a batch limit was hit: tick again without waiting
    finished_attempts: list[tuple[int, AttemptState]] = field(default_factory=list)

    @property
    def did_work(self) -> bool:
        """Whether anything changed; an idle loop backs off when nothing did."""
        return bool(
            self.attempts_started
            or self.events_applied
            or self.requeued
            or self.republished
            or self.attempts_killed
            or self.tasks_woken
            or self.groups_started
            or self.tasks_dispatched
            or self.slas_missed
        )


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
        self.max_tasks_per_attempt = max_tasks_per_attempt
        self.dispatcher = dispatcher
        self.clock = clock or SystemClock()
        self.dispatch_batch_size = dispatch_batch_size
        self.task_timeout_seconds = task_timeout_seconds
        self.attempt_ids = None if attempt_ids is None else frozenset(attempt_ids)
        self._pending: list[TaskEvent] = []
        self._contexts: dict[int, AttemptContext] = {}
        self._limits: dict[int, int | None] = {}
        self._rescan_at: datetime | None = None
        self._wake_due: datetime | None = None  # soonest not_before of a waiting task
        self._reap_at: datetime | None = None
        self._look_again = False  # a pass hit ATTEMPTS_PER_PASS: look again next pass
        self._scan_ready = False  # a pass hit its dispatch batch: scan for READY tasks next
        self._stop = threading.Event()

    # -- one pass ----------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> TickReport:
        """One pass over the store; messages are published after the commit."""
        now = now or self.clock.now()
        report = TickReport()
        events, self._pending = self._pending + self.dispatcher.poll_events(0), []
        rescan = self._rescan_at is None or now >= self._rescan_at
        # New attempts and kills are looked for when another process said it committed
        # some (PostgreSQL NOTIFY -> WorkCommitted) and on every rescan.
        look = rescan or self._look_again or any(isinstance(e, WorkCommitted) for e in events)
        reap = self.recovery is not None and (self._reap_at is None or now >= self._reap_at)
        revoked: list[tuple[int, int]] = []
        try:
            with self.engine.begin() as conn:
                graph = TaskGraph(conn, now, self._limits)
                if look:
                    revoked = self._kill_canceling_attempts(conn, now, report)
                    report.attempts_started = self._start_created_attempts(conn, graph)
                    self._look_again = report.attempts_started >= ATTEMPTS_PER_PASS
                messages = self._apply_events(conn, graph, events, now, report)
                if rescan:
                    report.slas_missed, stopped = fire_missed_slas(
                        conn, graph, now, self.attempt_ids
                    )
                    revoked += stopped
                if reap:
                    messages += self._reap(conn, graph, now, report)
                graph.settle()
                due = [t for t in (self._wake_due, graph.earliest_wake) if t is not None]
                if rescan or (due and min(due) <= now):
                    report.tasks_woken = self._wake_due_tasks(conn, graph, now)
                scan_ready, self._scan_ready = rescan or self._scan_ready, False
                messages += self._start_and_dispatch(conn, graph, now, scan_ready, report)
                ended = [a for a, _ in (*report.finished_attempts, *graph.finished_attempts)]
                wake_requiring_tasks(conn, graph, ended)
                report.finished_attempts += graph.finished_attempts
        except BaseException:
            self.dispatcher.redeliver()
            raise
        self.dispatcher.acknowledge()
        if rescan:
            self._rescan_at = now + timedelta(seconds=RESCAN_SECONDS)
        if reap and self.recovery is not None:
            self._reap_at = now + timedelta(seconds=self.recovery.every_seconds)
        if graph.earliest_wake is not None:
            self._wake_due = min(self._wake_due or graph.earliest_wake, graph.earliest_wake)
        if revoked:
            self.dispatcher.revoke(revoked)
        self.dispatcher.publish(messages)
        report.tasks_dispatched = len(messages)
        report.more_ready = report.more_ready or bool(self._pending) or self._look_again
        for attempt_id, _state in report.finished_attempts:
            self._contexts.pop(attempt_id, None)
        return report

    def _start_and_dispatch(
        self, conn: Connection, graph: TaskGraph, now: datetime, rescan: bool, report: TickReport
    ) -> list[TaskMessage]:
        """Start ready groups and dispatch ready operators until nothing new became ready."""
        messages: list[TaskMessage] = []
        scan = rescan
        for _ in range(1000):  # each round goes one level deeper into new subtrees
            if not (scan or graph.ready_groups or graph.ready_operators):
                break
            report.groups_started += self._start_ready_groups(conn, graph, now, scan)
            graph.settle()
            if scan or graph.ready_operators:
                room = self.dispatch_batch_size - len(messages)
                batch = self._dispatch_ready_operators(conn, graph, now, room, scan)
                messages += batch
                graph.settle()
                if len(batch) >= room:
                    report.more_ready = self._scan_ready = True
                    break
            scan = False
        return messages

    def _start_created_attempts(self, conn: Connection, graph: TaskGraph) -> int:
        ids = session_store.list_attempt_ids_in_state(
            conn, AttemptState.CREATED, limit=ATTEMPTS_PER_PASS, among=self.attempt_ids
        )
        for attempt_id in ids:
            attempt = session_store.get_attempt(conn, attempt_id)
            definition = load_workflow_definition(conn, attempt.workflow_definition_id)
            self._remember_context(conn, attempt, definition)
            placement = Placement(
                attempt_id=attempt.id,
                parent_id=None,
                parent_full_name="",
                inherited_export=None,
                generated=False,
                resume_from_attempt_id=attempt.resume_from_attempt_id,
            )
            (root_id,) = materialize_children(conn, placement, [definition.root], [], graph.now)
            set_deadline(conn, attempt, definition, graph.now)
            session_store.set_attempt_state(
                conn,
                attempt.id,
                AttemptState.RUNNING,
                graph.now,
                from_states=(AttemptState.CREATED,),
            )
            root = task_store.get_task(conn, root_id)
            if root.state is TaskState.SUCCESS:  # everything was resumed
                graph.after_terminal(root, TaskState.SUCCESS)
            else:
                graph.promote([root_id])
            log.info("attempt started attempt_id=%d workflow=%s", attempt.id, definition.name)
        return len(ids)

    def _apply_events(
        self,
        conn: Connection,
        graph: TaskGraph,
        events: list[TaskEvent],
        now: datetime,
        report: TickReport,
    ) -> list[TaskMessage]:
        """Apply agents' events; the messages of tasks released to be run elsewhere."""
        finished = {(e.task_id, e.lease_token) for e in events if isinstance(e, TaskFinished)}
        logs: list[dict[str, Any]] = []
        messages: list[TaskMessage] = []
        for event in events:
            if isinstance(event, WorkCommitted):
                continue
            if isinstance(event, TaskReleased):
                message = self._requeue(conn, event.task_id, event.lease_token, now, lost=False)
                if message is not None:
                    log.info(
                        "task released by its agent task_id=%d: %s", event.task_id, event.reason
                    )
                    messages.append(message)
                    report.requeued += 1
                continue
            if isinstance(event, TaskStarted):
                # A result in the same batch makes the RUNNING step moot.
                if (event.task_id, event.lease_token) in finished:
                    continue
                if task_store.mark_task_running(conn, event.task_id, event.lease_token, now):
                    report.events_applied += 1
                else:
                    report.stale_results += 1
                continue
            fate = self._apply_result(conn, graph, event, logs)
            if fate == "applied":
                report.events_applied += 1
            elif fate == "repeated":
                report.repeated_results += 1
            else:
                report.stale_results += 1
        task_store.insert_task_logs(conn, [{**row, "created_at": now} for row in logs])
        return messages

    # -- recovery and kills ------------------------------------------------------------

    def _requeue(
        self, conn: Connection, task_id: int, token: int, now: datetime, *, lost: bool
    ) -> TaskMessage | None:
        """Give a QUEUED/RUNNING task the next lease token; its message, or None if the task
        is no longer under ``token``."""
        new_token = task_store.requeue_task(conn, task_id, token, now, lost=lost)
        if new_token is None:
            return None
        task = task_store.get_task(conn, task_id)
        return self._message_of(conn, task)

    def _message_of(self, conn: Connection, task: TaskRow) -> TaskMessage:
        """The message of an in-flight task as it was dispatched, under its current token."""
        context = self._context(conn, task.attempt_id)
        return build_task_message(
            task, context, task.params, task.lease_token, self.task_timeout_seconds
        )

    def _reap(
        self, conn: Connection, graph: TaskGraph, now: datetime, report: TickReport
    ) -> list[TaskMessage]:
        """Republish lost messages, requeue tasks whose agent was lost (see :class:`Recovery`)."""
        assert self.recovery is not None
        recovery = self.recovery
        quiet_since = now - timedelta(seconds=recovery.grace_seconds)
        candidates = task_store.select_in_flight(
            conn, quiet_since, REAP_BATCH, attempt_ids=self.attempt_ids
        )
        states = self.dispatcher.lease_states([t.id for t in candidates])
        if not candidates or states is None:
            return []
        messages: list[TaskMessage] = []
        republished: list[int] = []
        for task in candidates:
            state = states[task.id]
            lease = state.current
            # A mark its publisher never confirmed, this long after: it died between
            # marking and sending (a crash of the executor before this one took over).
            unsent = state.unconfirmed and lease is not None and lease.token == task.lease_token
            if lease is not None and lease.token >= task.lease_token and not unsent:
                continue  # queued, running, or its result is on the way
            if task.state is TaskState.QUEUED and state.taken < task.lease_token:
                # No agent ever took this token: its message was lost.
                messages.append(self._message_of(conn, task))
                republished.append(task.id)
                continue
            # An agent took it (whether or not its start reached us) and vanished.
            report.leases_lost += 1
            if task.lost_count + 1 >= recovery.max_lost:
                message = f"lost its agent {recovery.max_lost} times"
                log.warning("task failed: %s task_id=%d", message, task.id)
                graph.fail(task, {"message": message})
                continue
            requeued = self._requeue(conn, task.id, task.lease_token, now, lost=True)
            if requeued is not None:
                log.warning(
                    "task lost its agent; requeued task_id=%d lease_token=%d",
                    task.id,
                    requeued.lease_token,
                )
                messages.append(requeued)
                report.requeued += 1
        if republished:
            log.warning("republishing %d queued tasks whose message was lost", len(republished))
            task_store.touch_tasks(conn, republished, now)
            report.republished += len(republished)
        return messages

    def _kill_canceling_attempts(
        self, conn: Connection, now: datetime, report: TickReport
    ) -> list[tuple[int, int]]:
        """End attempts a kill was asked for: their unfinished tasks CANCELED, the attempt
        KILLED. Returns the in-flight ``(task id, token)`` pairs to revoke after commit."""
        ids = session_store.list_attempt_ids_in_state(
            conn, AttemptState.CANCELING, limit=100, among=self.attempt_ids
        )
        revoked: list[tuple[int, int]] = []
        for attempt_id in ids:
            revoked += task_store.in_flight_of_attempt(conn, attempt_id)
            task_store.cancel_unfinished_tasks(conn, attempt_id, now)
            if session_store.set_attempt_state(
                conn, attempt_id, AttemptState.KILLED, now, from_states=(AttemptState.CANCELING,)
            ):
                log.info("attempt killed attempt_id=%d", attempt_id)
                report.finished_attempts.append((attempt_id, AttemptState.KILLED))
                report.attempts_killed += 1
        return revoked

    def _apply_result(
        self, conn: Connection, graph: TaskGraph, event: TaskFinished, logs: list[dict[str, Any]]
    ) -> Literal["applied", "repeated", "stale"]:
        """Apply a result under its lease token, whether or not its lease still exists;
        refused as ``stale`` if that token is not the task's, as ``repeated`` if the run
        of that token already ended (an agent sent its result again after Redis lost it).

        The token is checked in the row read first (most stale results stop there) and
        again in the UPDATE that moves the task (``... AND lease_token = :token``): that
        one is the fence, whatever happened in between."""
        task = task_store.find_task(conn, event.task_id)
        applied = False
        if (
            task is not None
            and task.lease_token == event.lease_token
            and task.state in (TaskState.QUEUED, TaskState.RUNNING)
        ):
            if event.outcome is Outcome.SUCCESS:
                applied = _succeed_with_subtasks(graph, task, event, self.max_tasks_per_attempt)
            else:
                error = {"message": event.error_message or "failed"}
                applied = graph.fail(task, error, fence=event.lease_token)
        if task is not None and not applied and _ended_under(task, event.lease_token):
            log.info(
                "refused a result already settled task_id=%d lease_token=%d",
                event.task_id,
                event.lease_token,
            )
            return "repeated"
        if task is None or not applied:
            log.warning(
                "refused a stale result task_id=%d lease_token=%d",
                event.task_id,
                event.lease_token,
            )
            return "stale"
        if event.log_path is not None:
            logs.append(
                {
                    "task_id": task.id,
                    "attempt_id": task.attempt_id,
                    "lease_token": event.lease_token,
                    "path": event.log_path,
                    "size_bytes": event.log_size_bytes,
                    "truncated_bytes": event.log_truncated_bytes,
                }
            )
        return "applied"

    def _wake_due_tasks(self, conn: Connection, graph: TaskGraph, now: datetime) -> int:
        """Retries and delayed tasks whose ``not_before`` has come -> READY."""
        woken = 0
        for state in TIMED_TASK_STATES:
            due = task_store.select_tasks_due(
                conn, state, now, limit=1000, attempt_ids=self.attempt_ids
            )
            woken += len(graph.promote([t.id for t in due], from_state=state))
        self._wake_due = task_store.earliest_not_before(
            conn, TIMED_TASK_STATES, attempt_ids=self.attempt_ids
        )
        return woken

    def _start_ready_groups(
        self, conn: Connection, graph: TaskGraph, now: datetime, scan: bool
    ) -> int:
        started = 0
        for _ in range(1000):  # nested groups start one level per round
            ids, graph.ready_groups = graph.ready_groups, []
            if scan:
                found = task_store.select_tasks_due(
                    conn,
                    TaskState.READY,
                    now,
                    limit=1000,
                    is_group=True,
                    attempt_ids=self.attempt_ids,
                )
                ids = sorted({*ids, *(g.id for g in found)})
                scan = False
            if not ids:
                break
            for group in task_store.get_tasks(conn, ids):
                if group.state is TaskState.READY:
                    graph.start_group(group)
                    started += 1
        return started

    def _dispatch_ready_operators(
        self, conn: Connection, graph: TaskGraph, now: datetime, limit: int, scan: bool
    ) -> list[TaskMessage]:
        """Queue READY operator tasks: those this pass made READY, or with ``scan`` every
        one in the store (work other passes or processes left)."""
        if scan:
            graph.ready_operators = []
            ready = task_store.select_tasks_due(
                conn,
                TaskState.READY,
                now,
                limit=limit,
                is_group=False,
                attempt_ids=self.attempt_ids,
            )
        else:
            ready, graph.ready_operators = (
                graph.ready_operators[:limit],
                graph.ready_operators[limit:],
            )
        if not ready:
            return []
        stored = graph.stored_params(ready)
        drafts: dict[int, TaskMessage] = {}
        for task in ready:
            try:
                context = self._context(conn, task.attempt_id)
                if task.config.get("operator") in EXECUTOR_OPERATORS:
                    self._run_here(conn, graph, task, context, stored[task.id])
                    continue
                drafts[task.id] = build_task_message(
                    task, context, stored[task.id], 0, self.task_timeout_seconds
                )
            except (InvalidExpression, BadControl) as exc:
                graph.fail(task, {"message": str(exc)})
        tokens = task_store.mark_tasks_queued(
            conn, {task_id: stored[task_id] for task_id in drafts}, now
        )
        return [
            dataclasses.replace(drafts[task_id], lease_token=token)
            for task_id, token in tokens.items()
        ]

    def _run_here(
        self,
        conn: Connection,
        graph: TaskGraph,
        task: TaskRow,
        context: AttemptContext,
        stored: dict[str, Any] | None,
    ) -> None:
        """Operators the executor runs itself: ``call>`` and the control operators generate
        their subtasks, ``nop>`` just succeeds, ``wait>`` waits DELAYED (no agent holds it)
        and succeeds when its time comes. Raises InvalidExpression or BadControl."""
        spec = TaskSpec.from_config(task.config)
        if spec.operator == "call":
            self._check_room(conn, task, spec.called)
            graph.succeed_operator(task, {}, called=spec.called, params=stored)
        elif spec.operator == "nop":
            graph.succeed_operator(task, {}, params=stored)
        elif spec.operator == "require":
            message = build_task_message(task, context, stored, 0, None)
            required = run_require(conn, graph, task, message, stored)
            if self.attempt_ids is not None:  # an embedded run runs what it requires, too
                self.attempt_ids = self.attempt_ids | {required}
        elif spec.operator == "wait":
            if (task.result or {}).get("waited"):
                graph.succeed_operator(task, {}, params=stored)
            else:
                command = build_task_message(task, context, stored, 0, None).command
                until = graph.now + timedelta(seconds=wait_seconds(command))
                graph.hold_until(task, until)
        else:
            message = build_task_message(task, context, stored, 0, None)
            if spec.parallel_expr is not None:
                rendered = render(spec.parallel_expr, escape(message.params))
                spec = dataclasses.replace(spec, parallel=parallel_flag(rendered))
            sub = expand(spec, message.command)
            self._check_room(conn, task, sub)
            graph.succeed_operator(task, {}, called=sub, params=stored)

    def _check_room(self, conn: Connection, task: TaskRow, generated: TaskSpec | None) -> None:
        """BadControl if generating ``generated`` would take the attempt over its limit."""
        problem = _over_task_limit(conn, task, generated, self.max_tasks_per_attempt)
        if problem is not None:
            raise BadControl(problem)

    def _context(self, conn: Connection, attempt_id: int) -> AttemptContext:
        """What every task of an attempt shares, read once per attempt (this executor
        started it, or it reads it on the attempt's first dispatch after a restart)."""
        context = self._contexts.get(attempt_id)
        if context is None:
            attempt = session_store.get_attempt(conn, attempt_id)
            definition = load_workflow_definition(conn, attempt.workflow_definition_id)
            context = self._remember_context(conn, attempt, definition)
        return context

    def _remember_context(
        self, conn: Connection, attempt: AttemptRow, definition: WorkflowDefinition
    ) -> AttemptContext:
        schedule = None
        if definition.schedule is not None:
            schedule = ScheduleSpec.from_config(definition.schedule)
        last_executed = session_store.last_executed_session_time(
            conn, attempt.project_id, attempt.workflow_name, attempt.session_time
        )
        digest = archive_digest_of_attempt(conn, attempt.id)
        secrets = secret_store.read_encrypted_secrets(conn, attempt.project_id)
        context = AttemptContext.of(attempt, schedule, last_executed, digest, secrets)
        self._contexts[attempt.id] = context
        return context

    # -- waiting -----------------------------------------------------------------------

    def wait_for_work(self, timeout_seconds: float) -> None:
        """Block until an agent reports something or ``timeout_seconds`` pass."""
        events = self.dispatcher.poll_events(timeout_seconds)
        if events and all(isinstance(e, TaskStarted) for e in events):
            events += self.dispatcher.poll_events(STARTED_COALESCE_SECONDS)
        self._pending.extend(events)

    def seconds_until_due(self, now: datetime, cap_seconds: float) -> float:
        """How long the loop may sleep before a wait ends or a rescan is due (at most the cap)."""
        due = [t for t in (self._wake_due, self._rescan_at) if t is not None]
        if not due:
            return cap_seconds
        return max(0.0, min(cap_seconds, (min(due) - now).total_seconds()))

    def stop(self) -> None:
        """Ask :meth:`run_forever` to return after the current pass."""
        self._stop.set()

    def run_forever(self, idle_cap_seconds: float = 5.0) -> None:
        """Tick, and between ticks sleep until work arrives (backing off up to the cap)."""
        backoff = 0.05
        while not self._stop.is_set():
            report = self.tick()
            if report.more_ready:
                continue
            backoff = 0.05 if report.did_work else min(backoff * 2, idle_cap_seconds)
            self.wait_for_work(self.seconds_until_due(self.clock.now(), backoff))


def _succeed_with_subtasks(
    graph: TaskGraph, task: TaskRow, event: TaskFinished, limit: int
) -> bool:
    """Apply a successful result; the subtasks a ``py>`` task added become its ``^sub``,
    seeing what it exported (Digdag's ``add_subtask`` and ``export``)."""
    subtasks = TaskSpec.from_config(event.subtasks) if event.subtasks else None
    if subtasks is not None and subtasks.name != "^sub":
        subtasks = dataclasses.replace(subtasks, name="^sub")
    problem = _over_task_limit(graph.conn, task, subtasks, limit)
    if problem is not None:
        return graph.fail(task, {"message": problem}, fence=event.lease_token)
    return graph.succeed_operator(
        task, event.store, called=subtasks, export=event.export or None, fence=event.lease_token
    )


def _ended_under(task: TaskRow, token: int) -> bool:
    """Whether the run of ``token`` is the task's last and ended with a result (the task
    moved on from it without a kill): a result of that token now is one sent again."""
    return task.lease_token == token and task.state not in (
        TaskState.QUEUED,
        TaskState.RUNNING,
        TaskState.CANCELED,
    )


def _over_task_limit(
    conn: Connection, task: TaskRow, generated: TaskSpec | None, limit: int
) -> str | None:
    """Why generating ``generated`` under ``task`` would take its attempt over ``limit``
    tasks; None when it fits (or nothing is generated)."""
    if generated is None:
        return None
    total = task_store.count_attempt_tasks(conn, task.attempt_id) + generated.count_tasks()
    if total <= limit:
        return None
    return (
        f"the attempt would have {total} tasks, over the limit of {limit} "
        "(TICKWORK_MAX_TASKS_PER_ATTEMPT)"
    )
