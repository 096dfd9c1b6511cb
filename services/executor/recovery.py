"""Recovery and kills: the reaper (lost messages, lost agents) and attempts a kill was
asked for."""

from __future__ import annotations

import logging
from datetime import timedelta

from tickwork.services.executor.events import message_of, requeue
from tickwork.services.executor.messages import queue_of
from tickwork.services.executor.report import Pass, Recovery
from tickwork.services.executor.scope import Scope
from tickwork.shared.dispatch.leases import QUEUED, LeaseState
from tickwork.shared.dispatch.seam import Dispatcher
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.tasks import InFlightRun, TaskRow

log = logging.getLogger(__name__)

REAP_BATCH = 5000
"""In-flight tasks one reaper pass looks at, at most."""

TAKEN_OFF_QUEUE_SECONDS = 10.0
"""How long a queued task's message may be off its queue, with the queue empty and its
lease not taken, before it counts as lost with the agent that took it. An agent takes a
message only for a free slot and takes the lease at once: only an agent that died (or
hangs) in between leaves it so long. A live one that was merely slow meets a second copy
of the same token, which the lease turns away."""

KILLS_PER_PASS = 100
"""Attempts being killed one pass ends, at most."""


def reap(work: Pass, scope: Scope, recovery: Recovery, dispatcher: Dispatcher) -> None:
    """Republish lost messages, requeue tasks whose agent was lost (see :class:`Recovery`);
    the messages go to ``work.messages``.

    Candidates are read as ``(id, state, token)`` only; whole rows are read for the few
    whose lease says they need something done."""
    quiet_since = work.now - timedelta(seconds=recovery.grace_seconds)
    candidates = task_store.select_in_flight(
        work.conn, quiet_since, REAP_BATCH, attempt_ids=scope.attempt_ids
    )
    states = dispatcher.lease_states([t.id for t in candidates])
    if not candidates or states is None:
        return
    lost: dict[int, InFlightRun] = {}  # not held: their message or their agent was lost
    marked: list[InFlightRun] = []  # their message is in a queue, or with an agent
    for run in candidates:
        state = states[run.id]
        if not _still_held(run, state):  # else queued, running, or reporting
            lost[run.id] = run
        elif _marked_queued(run, state):
            marked.append(run)
    lost.update((run.id, run) for run in _taken_off_their_queues(work, scope, dispatcher, marked))
    republished: list[int] = []
    for task in task_store.get_tasks(work.conn, lost):
        run = lost[task.id]
        if (task.state, task.lease_token) != (run.state, run.lease_token):
            continue  # it moved on meanwhile
        if task.state is TaskState.QUEUED and states[task.id].taken < task.lease_token:
            # No agent ever took this token: its message was lost.
            work.messages.append(message_of(work.conn, scope, task))
            republished.append(task.id)
        else:
            _lost_agent(work, scope, recovery, task)
    if republished:
        log.warning("republishing %d queued tasks whose message was lost", len(republished))
        task_store.touch_tasks(work.conn, republished, work.now)
        work.report.republished += len(republished)


def _still_held(task: InFlightRun, state: LeaseState) -> bool:
    """Whether a lease covers the task's current token, and its publisher confirmed it.

    A mark its publisher never confirmed, this long after: it died between marking and
    sending (a crash of the executor before this one took over)."""
    lease = state.current
    unsent = state.unconfirmed and lease is not None and lease.token == task.lease_token
    return lease is not None and lease.token >= task.lease_token and not unsent


def _marked_queued(task: InFlightRun, state: LeaseState) -> bool:
    """Whether the task is queued under a confirmed ``queued`` mark of its token that no
    agent took: its message is in its queue, or an agent took it off but not the lease."""
    lease = state.current
    return (
        task.state is TaskState.QUEUED
        and lease is not None
        and lease.owner == QUEUED
        and lease.token == task.lease_token
        and state.taken < task.lease_token
    )


def _taken_off_their_queues(
    work: Pass, scope: Scope, dispatcher: Dispatcher, marked: list[InFlightRun]
) -> list[InFlightRun]:
    """The runs among ``marked`` whose queue has been empty for
    :data:`TAKEN_OFF_QUEUE_SECONDS` while no agent took their lease: an agent took the
    message and died before taking the lease (Celery holds a message an agent took in
    its unacknowledged set for an hour, or loses it if the agent dies in between). They
    are published again under the same token; the lease refuses the first copy if it
    ever comes back."""
    queues = _queues_of(work, scope, marked) if marked else {}
    depths = dispatcher.queue_depths(sorted(set(queues.values()))) if queues else {}
    # Those whose queue is empty (a queue not known to be empty may still hold them),
    # since when they were first seen so; the others are forgotten.
    before, now = scope.taken_off_queue_since, work.now
    since = {
        (run.id, run.lease_token): before.get((run.id, run.lease_token), now)
        for run in marked
        if depths.get(queues[run.id], 1) == 0
    }
    scope.taken_off_queue_since = since
    overdue = [
        run
        for run in marked
        if (first_seen := since.get((run.id, run.lease_token))) is not None
        and (now - first_seen).total_seconds() >= TAKEN_OFF_QUEUE_SECONDS
    ]
    if overdue:
        log.warning(
            "publishing again %d queued tasks whose message an agent took and never started",
            len(overdue),
        )
    return overdue


def _queues_of(work: Pass, scope: Scope, runs: list[InFlightRun]) -> dict[int, str]:
    """The queue of each run: from the rows this executor kept, else from the store."""
    queues: dict[int, str] = {}
    unknown = []
    for run in runs:
        row = scope.runs.get(run.id, run.lease_token)
        if row is None:
            unknown.append(run.id)
        else:
            queues[run.id] = queue_of(row)
    for task in task_store.get_tasks(work.conn, unknown):
        queues[task.id] = queue_of(task)
    return queues


def _lost_agent(work: Pass, scope: Scope, recovery: Recovery, task: TaskRow) -> None:
    """An agent took the task (whether or not its start reached us) and vanished."""
    work.report.leases_lost += 1
    if task.lost_count + 1 >= recovery.max_lost:
        message = f"lost its agent {recovery.max_lost} times"
        log.warning("task failed: %s task_id=%d", message, task.id)
        work.graph.fail(task, {"message": message})
        scope.runs.forget(task.id)  # its run will never report
        return
    requeued = requeue(work.conn, scope, task.id, task.lease_token, work.now, lost=True)
    if requeued is not None:
        log.warning(
            "task lost its agent; requeued task_id=%d lease_token=%d",
            task.id,
            requeued.lease_token,
        )
        work.messages.append(requeued)
        work.report.requeued += 1


def kill_canceling_attempts(work: Pass, scope: Scope) -> None:
    """End attempts a kill was asked for: their unfinished tasks CANCELED, the attempt
    KILLED. The in-flight ``(task id, token)`` pairs go to ``work.revoked``, revoked
    after the commit."""
    conn, now = work.conn, work.now
    ids = session_store.list_attempt_ids_in_state(
        conn, AttemptState.CANCELING, limit=KILLS_PER_PASS, among=scope.attempt_ids
    )
    for attempt_id in ids:
        work.revoked += task_store.in_flight_of_attempt(conn, attempt_id)
        task_store.cancel_unfinished_tasks(conn, attempt_id, now)
        if session_store.set_attempt_state(
            conn, attempt_id, AttemptState.KILLED, now, from_states=(AttemptState.CANCELING,)
        ):
            log.info("attempt killed attempt_id=%d", attempt_id)
            work.report.finished_attempts.append((attempt_id, AttemptState.KILLED))
            work.report.attempts_killed += 1
