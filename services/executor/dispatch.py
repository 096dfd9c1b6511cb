"""Starting work: created attempts, READY groups, and READY operator tasks, which the
executor runs itself (``call>``, ``nop>``, the control operators...) or queues for agents."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from sqlalchemy import Connection

from tickwork.services.executor.call import resolve_call
from tickwork.services.executor.graph import TaskGraph
from tickwork.services.executor.materialize import Placement, materialize_children
from tickwork.services.executor.messages import AttemptContext, build_task_message
from tickwork.services.executor.param_store import read_params, store_params
from tickwork.services.executor.report import Pass
from tickwork.services.executor.require import run_require
from tickwork.services.executor.scope import Scope, over_task_limit
from tickwork.services.executor.sla import set_deadline
from tickwork.shared.dispatch.messages import TaskMessage, run_log_path
from tickwork.shared.domain.control import (
    BadControl,
    expand,
    parallel_flag,
    wait_seconds,
)
from tickwork.shared.domain.expressions import escape, render
from tickwork.shared.domain.operators import control_operators, executor_operators
from tickwork.shared.domain.pools import ready_since
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.errors import InvalidExpression
from tickwork.shared.store import logs as log_store
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.projects import load_workflow_definition
from tickwork.shared.store.tasks import TaskRow

log = logging.getLogger(__name__)

ATTEMPTS_PER_PASS = 100
"""Created attempts one pass starts, at most (the next pass goes on at once)."""

SCAN_LIMIT = 1000
"""Tasks one store scan returns, at most."""

MAX_ROUNDS = 1000
"""Rounds one pass goes into new subtrees, at most (each round one level deeper)."""

EXECUTOR_OPERATORS = executor_operators()
"""Operators the executor runs itself, without an agent."""


def start_created_attempts(work: Pass, scope: Scope) -> int:
    """Materialise the root task of created attempts and mark them RUNNING; how many."""
    conn, graph = work.conn, work.graph
    ids = session_store.list_attempt_ids_in_state(
        conn, AttemptState.CREATED, limit=ATTEMPTS_PER_PASS, among=scope.attempt_ids
    )
    for attempt_id in ids:
        attempt = session_store.get_attempt(conn, attempt_id)
        definition = load_workflow_definition(conn, attempt.workflow_definition_id)
        scope.contexts.remember(conn, attempt, definition)
        placement = Placement(
            attempt_id=attempt.id,
            parent_id=None,
            parent_full_name="",
            inherited_export=None,
            generated=False,
            resume_from_attempt_id=attempt.resume_from_attempt_id,
            skip_tasks=frozenset(attempt.skip_tasks or ()),
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


def start_and_dispatch(work: Pass, scope: Scope) -> bool:
    """Start ready groups and dispatch ready operators until nothing new became ready,
    then admit tasks waiting for pools (once per pass: one lock of their rows, in name
    order); the messages go to ``work.messages``. True when the dispatch batch filled up
    (more READY tasks may wait in the store)."""
    graph, report = work.graph, work.report
    dispatched: list[TaskMessage] = []
    scan = work.plan.scan_ready
    full = False
    for _ in range(MAX_ROUNDS):  # each round goes one level deeper into new subtrees
        if not (scan or graph.ready_groups or graph.ready_operators):
            break
        report.groups_started += _start_ready_groups(work, scope, scan)
        graph.settle()
        if scan or graph.ready_operators:
            room = scope.dispatch_batch_size - len(dispatched)
            batch = _queue_tasks(work, scope, _ready_of_no_pool(work, scope, room, scan))
            dispatched += batch
            graph.settle()
            if len(batch) >= room:
                full = True
                break
        scan = False
    if not full and _slots_may_be_taken(work, scope):
        room = scope.dispatch_batch_size - len(dispatched)
        batch = _queue_tasks(work, scope, _admit_pooled(work, scope, room))
        dispatched += batch
        graph.settle()  # a task that could not be queued may have failed, and woken others
        full = len(batch) >= room or bool(graph.ready_groups or graph.ready_operators)
    work.messages += dispatched
    return full


def write_run_logs(work: Pass) -> None:
    """Index the log file of each run the pass is about to publish, in its transaction:
    a run's log is listed from the moment it is handed to an agent, whatever then
    becomes of it (a result, a kill, a timeout, a lost agent); its result, if one comes,
    records the file's final size. The results the pass applied are recorded in the
    same statement, but for tasks a retry in the pass deleted (their log rows went with
    them). Where the store can, the statement that queued the runs wrote these rows
    already (see :func:`~tickwork.shared.store.tasks.mark_tasks_queued_logging`): only what it
    did not is written here, and nothing, without a statement, in the usual pass. So are
    the log chunks the pass read, where that statement did not store them."""
    dropped, logged = work.graph.dropped, work.logged_runs
    started = [
        _started_log(message, work.now)
        for message in work.messages
        if message.task_id not in dropped and (message.task_id, message.lease_token) not in logged
    ]
    task_store.write_task_logs(work.conn, started, _ended_logs(work))
    log_store.write_chunk_rows(work.conn, work.log_chunks)  # a dropped task's are left out
    work.log_chunks = []


def _started_log(message: TaskMessage, now: datetime) -> dict[str, Any]:
    """The log index row of the run of ``message``, about to start."""
    return {
        "task_id": message.task_id,
        "attempt_id": message.attempt_id,
        "lease_token": message.lease_token,
        "path": run_log_path(message),
        "created_at": now,
    }


def _ended_logs(work: Pass) -> list[dict[str, Any]]:
    """The log rows of the results the pass applied and has not recorded yet, but for
    tasks a retry in the pass deleted (their rows went with them)."""
    dropped = work.graph.dropped
    return [row for row in work.ended_logs if row["task_id"] not in dropped]


def _start_ready_groups(work: Pass, scope: Scope, scan: bool) -> int:
    started = 0
    for _ in range(MAX_ROUNDS):  # nested groups start one level per round
        ids = work.graph.take_ready_groups()
        if scan:
            found = task_store.select_tasks_due(
                work.conn,
                TaskState.READY,
                work.now,
                limit=SCAN_LIMIT,
                is_group=True,
                attempt_ids=scope.attempt_ids,
            )
            ids = sorted({*ids, *(g.id for g in found)})
            scan = False
        if not ids:
            break
        for group in task_store.get_tasks(work.conn, ids):
            if group.state is TaskState.READY:
                work.graph.start_group(group)
                started += 1
    return started


def _ready_of_no_pool(work: Pass, scope: Scope, limit: int, scan: bool) -> list[TaskRow]:
    """READY operator tasks of no pool to queue: those this pass made READY, or with
    ``scan`` every one in the store (work other passes or processes left). The pools that
    ready tasks wait for are noted in ``scope.pools_waiting`` (rebuilt by a scan)."""
    conn, graph = work.conn, work.graph
    if scan:
        graph.ready_operators = []
        scope.pools_waiting = pool_store.pools_waited_for(conn, scope.attempt_ids)
        return task_store.select_ready_operators(
            conn, work.now, limit, attempt_ids=scope.attempt_ids
        )
    taken = graph.take_ready_operators(limit)
    held = {task.pool for task in taken if task.pool is not None}
    if held:
        scope.pools_waiting |= held
        work.pooled_ready = True
    return [task for task in taken if task.pool is None]


def _queue_tasks(work: Pass, scope: Scope, ready: list[TaskRow]) -> list[TaskMessage]:
    """Queue ``ready`` (READY operator tasks) in rank order: the executor runs its own
    operators here; the others are marked QUEUED and their messages returned."""
    conn, graph = work.conn, work.graph
    if not ready:
        return []
    ready.sort(key=attrgetter("rank"))
    stored = graph.stored_params(ready)
    drafts: dict[int, TaskMessage] = {}
    for task in ready:
        try:
            context = scope.contexts.get(conn, task.attempt_id)
            if task.config.get("operator") in EXECUTOR_OPERATORS:
                run_here(conn, graph, task, context, stored[task.id], scope)
                continue
            drafts[task.id] = build_task_message(
                task, context, stored[task.id], 0, scope.task_timeout_seconds
            )
        except (InvalidExpression, BadControl) as exc:
            graph.fail(task, {"message": str(exc)})
    # The runs' log rows, and those of the results applied so far, go in with the queueing
    # (where the store can): the token each run gets is its task's next one.
    rows = {task.id: task for task in ready}
    next_runs = {
        task_id: dataclasses.replace(draft, lease_token=rows[task_id].lease_token + 1)
        for task_id, draft in drafts.items()
    }
    started = [_started_log(run, work.now) for run in next_runs.values()]
    grown = sorted(work.log_attempts - work.notified)
    tokens, left = task_store.mark_tasks_queued_logging(
        conn,
        {task_id: stored[task_id] for task_id in drafts},
        work.now,
        task_store.LogRows(started, _ended_logs(work), work.log_chunks, grown),
    )
    work.ended_logs, work.log_chunks = left.ended, list(left.chunks)
    work.notified.update(set(grown) - set(left.grown))
    unlogged = {(row["task_id"], row["lease_token"]) for row in left.started}
    work.logged_runs |= {(r["task_id"], r["lease_token"]) for r in started} - unlogged
    for task_id, token in tokens.items():
        graph.record(task_id, drafts[task_id].full_name, TaskState.QUEUED)
        scope.runs.queued(rows[task_id], token, stored[task_id], work.now)
        _note_wait(work, rows[task_id])
    return [  # in rank order: the broker's queue keeps it
        run
        if run.lease_token == tokens[task_id]
        else dataclasses.replace(run, lease_token=tokens[task_id])
        for task_id, run in next_runs.items()
        if task_id in tokens
    ]


def _slots_may_be_taken(work: Pass, scope: Scope) -> bool:
    """Whether tasks of this executor wait for pools and the pass may find a slot for
    them: a scan, pooled tasks it made ready, or what may have given a slot back (a
    result applied, a run given up)."""
    if not scope.pools_waiting:
        return False
    freed = work.report.events_applied or work.report.requeued or work.revoked
    return bool(work.plan.scan_ready or work.pooled_ready or freed)


def _admit_pooled(work: Pass, scope: Scope, room: int) -> list[TaskRow]:
    """READY tasks of the pools this executor's tasks wait for, as many as each pool has
    free slots (and ``room`` allows). Of each pool, the best-ranked ready tasks of every
    executor are chosen, and this one takes those it runs: a slot it freed goes to a
    better task of another executor, which takes it in its next pass, rather than to its
    own. The pools' rows stay locked until the pass commits, so that no other executor
    counts their slots meanwhile."""
    admitted: list[TaskRow] = []
    free = pool_store.lock_free_slots(work.conn, scope.pools_waiting)
    for name, slots in free.items():
        take = min(slots, room - len(admitted))
        if take > 0:
            admitted += task_store.select_ready_operators(
                work.conn, work.now, take, pool=name, attempt_ids=scope.attempt_ids
            )
    return admitted


def _note_wait(work: Pass, task: TaskRow) -> None:
    """Report how long ``task``, queued now, was ready, by its priority."""
    if task.ready_rank is not None:
        waited = (work.now - ready_since(task.ready_rank, task.priority)).total_seconds()
        work.report.ready_waits.append((task.priority, max(0.0, waited)))


@dataclass(frozen=True)
class _Here:
    """One executor-run operator task and what running it needs."""

    conn: Connection
    graph: TaskGraph
    task: TaskRow
    spec: TaskSpec
    context: AttemptContext
    stored: dict[str, Any] | None
    scope: Scope

    def message(self) -> TaskMessage:
        return build_task_message(self.task, self.context, self.stored, 0, None)


def _run_call(here: _Here) -> None:
    called = here.spec.called
    if called is None:  # an expression: the file is known only now
        called = resolve_call(here.conn, here.context, here.message())
    check_room(here.conn, here.task, called, here.scope)
    here.graph.succeed_operator(here.task, {}, called=called, params=here.stored)


def _run_nop(here: _Here) -> None:
    here.graph.succeed_operator(here.task, {}, params=here.stored)


def _run_require(here: _Here) -> None:
    required = run_require(here.conn, here.graph, here.task, here.message(), here.stored)
    if isinstance(here.scope.attempt_ids, frozenset):  # an embedded run runs it, too
        here.scope.attempt_ids = here.scope.attempt_ids | {required}


def _run_wait(here: _Here) -> None:
    if (here.task.result or {}).get("waited"):
        here.graph.succeed_operator(here.task, {}, params=here.stored)
    else:
        message = here.message()
        seconds = wait_seconds(message.command, message.params)
        until = here.graph.now + timedelta(seconds=seconds)
        here.graph.hold_until(here.task, until)


def _run_param_set(here: _Here) -> None:
    keys = list(here.spec.params)
    store_params(here.conn, here.context, here.message(), keys, here.graph.now)
    here.graph.succeed_operator(here.task, {}, params=here.stored)


def _run_param_get(here: _Here) -> None:
    keys = list(here.spec.params)
    store = read_params(here.conn, here.context, here.message(), keys, here.graph.now)
    here.graph.succeed_operator(here.task, store, params=here.stored)


def _run_control(here: _Here) -> None:
    message = here.message()
    spec = here.spec
    if spec.parallel_expr is not None:
        rendered = render(spec.parallel_expr, escape(message.params))
        spec = dataclasses.replace(spec, parallel=parallel_flag(rendered))
    sub = expand(spec, message.command)
    check_room(here.conn, here.task, sub, here.scope)
    here.graph.succeed_operator(here.task, {}, called=sub, params=here.stored)


RUN_HERE: dict[str, Callable[[_Here], None]] = {
    "call": _run_call,
    "nop": _run_nop,
    "require": _run_require,
    "wait": _run_wait,
    "param_set": _run_param_set,
    "param_get": _run_param_get,
    **{name: _run_control for name in control_operators()},
}
"""How the executor runs each operator the registry says runs in the executor (a spec
checks that the keys are exactly ``executor_operators()``)."""


def run_here(
    conn: Connection,
    graph: TaskGraph,
    task: TaskRow,
    context: AttemptContext,
    stored: dict[str, Any] | None,
    scope: Scope,
) -> None:
    """Operators the executor runs itself: ``call>`` and the control operators generate
    their subtasks, ``nop>`` just succeeds, ``wait>`` waits DELAYED (no agent holds it)
    and succeeds when its time comes, ``param_set>``/``param_get>`` write and read the
    project's persistent params. Raises InvalidExpression or BadControl."""
    spec = TaskSpec.from_config(task.config)
    assert spec.operator is not None
    RUN_HERE[spec.operator](_Here(conn, graph, task, spec, context, stored, scope))


def check_room(conn: Connection, task: TaskRow, generated: TaskSpec | None, scope: Scope) -> None:
    """BadControl if generating ``generated`` would take the attempt over its limit."""
    problem = over_task_limit(conn, task, generated, scope.max_tasks_per_attempt)
    if problem is not None:
        raise BadControl(problem)
