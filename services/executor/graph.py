"""Moving an attempt's tasks through their states: the one place transitions happen.

Every method runs inside the caller's transaction. Work follows events: a finished task
promotes its downstream siblings and, once its parent has no active child left, concludes
the parent, so the cost per task does not grow with the size of the workflow. Tasks a
batch of results ended (see :mod:`~tickwork.services.executor.results`) are followed together:
one statement looks for their downstream tasks, and none at all for the children of a
group whose children all started at once (no child waits for a sibling).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from sqlalchemy import Connection

from tickwork.services.executor.materialize import Placement, materialize_children
from tickwork.shared.domain.delays import StartRule
from tickwork.shared.domain.expressions import escape
from tickwork.shared.domain.params import merge_outputs, merge_params
from tickwork.shared.domain.pools import ready_rank
from tickwork.shared.domain.states import (
    ACTIVE_TASK_STATES,
    AttemptState,
    TaskState,
    attempt_state_for,
    states_before,
)
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.errors import NotFound
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.notifications import record_attempt_end
from tickwork.shared.store.sessions import (
    AttemptRow,
    attempt_facts,
    get_attempt,
    set_attempt_state,
)
from tickwork.shared.store.tasks import Seen, TaskRow
from tickwork.shared.store.trigger_firing import fire_after

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskMove:
    """One state a task entered, as a pass made it: the passes' moves, in order, are the
    run's history as ``tickwork run`` prints it. Steps inside the executor (BLOCKED,
    READY) are not recorded."""

    task_id: int
    full_name: str
    state: TaskState
    at: datetime
    not_before: datetime | None = None  # DELAYED, RETRY_WAITING: until when it waits
    retry_count: int = 0  # retries the task used, the one it waits for included
    retry_limit: int = 0  # retries its ``_retry`` allows
    message: str | None = None  # RETRY_WAITING, ERROR: why the run failed


class TaskGraph:
    """State transitions of task rows, applied with guarded updates in one transaction."""

    def __init__(
        self,
        conn: Connection,
        now: datetime,
        limits: dict[int, int | None] | None = None,
        sibling_edges: dict[int, bool] | None = None,
    ) -> None:
        self.conn = conn
        self.now = now
        self.finished_attempts: list[tuple[int, AttemptState]] = []
        self.triggered_attempts = 0  # attempts this pass's successes started (triggers)
        self.ready_groups: list[int] = []  # groups that became READY: start them
        self.ready_operators: list[TaskRow] = []  # operator tasks that became READY, as rows
        self.earliest_wake: datetime | None = None  # soonest not_before this pass set
        self._attempts: dict[int, AttemptRow] = {}  # session time and zone, for delays
        self._limits = {} if limits is None else limits  # parent id -> _parallel limit
        # parent id -> whether a child may wait for a sibling, as its children started
        self._sibling_edges = {} if sibling_edges is None else sibling_edges
        self._unsettled: dict[int, None] = {}  # parents whose children may all have ended
        self._seen: dict[int, Seen] = {}  # what tasks promoted in this pass see, by id
        self.dropped: set[int] = set()  # tasks a retry deleted in this pass
        self.moves: list[TaskMove] = []  # the states tasks entered, in order

    def record(self, task_id: int, full_name: str, state: TaskState) -> None:
        """Note that a task entered ``state`` now (for moves made outside this class)."""
        self.moves.append(TaskMove(task_id, full_name, state, self.now))

    # -- moving to a state -------------------------------------------------------------

    def _move(
        self, task: TaskRow, target: TaskState, *, fence: int | None = None, **values: Any
    ) -> bool:
        """Guarded move; with ``fence``, only while that is still the task's lease token."""
        moved = task_store.update_task(
            self.conn,
            task.id,
            states_before(target),
            fence=fence,
            state=target,
            updated_at=self.now,
            **values,
        )
        if moved:
            log.debug("task %s -> %s task_id=%d", task.full_name, target.value, task.id)
            self.moves.append(_move_of(task, target, self.now, values))
        return moved

    def promote(
        self, task_ids: Sequence[int], from_state: TaskState = TaskState.BLOCKED
    ) -> list[int]:
        """-> READY for tasks that may start now (BLOCKED ones, or waits that are due).

        A BLOCKED task with ``_delay``/``_start_at`` gets its ``not_before`` now, once: it
        goes to DELAYED until then, or straight to READY if that time has passed.
        """
        first_time = from_state is TaskState.BLOCKED
        promoted = task_store.make_ready(
            self.conn, task_ids, from_state, self.now, skip_delayed=first_time
        )
        if first_time and len(promoted) < len(task_ids):
            moved = {task.id for task in promoted}
            promoted += self._start_delayed([i for i in task_ids if i not in moved])
        self._note_ready(promoted)
        return [task.id for task in promoted]

    def _note_ready(self, tasks: Sequence[TaskRow]) -> None:
        """List tasks that became READY to be started or dispatched in this pass."""
        for task in tasks:
            if task.is_group:
                self.ready_groups.append(task.id)
            else:
                self.ready_operators.append(task)

    def _start_delayed(
        self, task_ids: Sequence[int], from_state: TaskState = TaskState.BLOCKED
    ) -> list[TaskRow]:
        """Tasks with a start rule, BLOCKED (or just made READY) -> DELAYED, or READY
        (returned) if already due."""
        started: list[TaskRow] = []
        for task in task_store.get_tasks(self.conn, task_ids):
            rule = task.config.get("start")
            if task.state is not from_state or rule is None:
                continue  # another executor moved it meanwhile
            attempt = self._attempt(task.attempt_id)
            start = StartRule.from_config(rule)
            not_before = start.not_before(self.now, attempt.session_time, attempt.timezone)
            target = TaskState.DELAYED if not_before > self.now else TaskState.READY
            rank = ready_rank(self.now, task.priority)
            # Guarded on its state alone: a task another executor delayed stays delayed.
            if not task_store.update_task(
                self.conn,
                task.id,
                (from_state,),
                state=target,
                not_before=not_before,
                updated_at=self.now,
                ready_rank=rank,
            ):
                continue
            if target is TaskState.READY:
                ready = replace(
                    task, state=target, not_before=not_before, updated_at=self.now, ready_rank=rank
                )
                started.append(ready)
            else:
                self.moves.append(_move_of(task, target, self.now, {"not_before": not_before}))
                self.wake_at(not_before)
                log.info("task %s delayed until %s", task.full_name, not_before.isoformat())
        return started

    def hold_until(self, task: TaskRow, until: datetime) -> None:
        """A READY ``wait>`` task waits DELAYED until ``until``, then is READY again and
        succeeds (its ``result`` says it has waited)."""
        if self._move(task, TaskState.DELAYED, not_before=until, result={"waited": True}):
            self.wake_at(until)
            log.info("task %s waits until %s", task.full_name, until.isoformat())

    def _attempt(self, attempt_id: int) -> AttemptRow:
        if attempt_id not in self._attempts:
            self._attempts[attempt_id] = get_attempt(self.conn, attempt_id)
        return self._attempts[attempt_id]

    def wake_at(self, not_before: datetime) -> None:
        """Note that a waiting task becomes due at ``not_before``, for the loop's sleep."""
        if self.earliest_wake is None or not_before < self.earliest_wake:
            self.earliest_wake = not_before

    # -- starting ----------------------------------------------------------------------

    def take_ready_groups(self) -> list[int]:
        """The groups that became READY since last asked, no longer listed here."""
        groups = self.ready_groups
        self.ready_groups = []
        return groups

    def take_ready_operators(self, limit: int) -> list[TaskRow]:
        """Up to ``limit`` operator tasks that became READY, lowest rank (highest priority)
        first; the rest stay listed."""
        self.ready_operators.sort(key=attrgetter("rank"))
        taken = self.ready_operators[:limit]
        del self.ready_operators[:limit]
        return taken

    def stored_params(self, rows: Sequence[TaskRow]) -> dict[int, dict[str, Any] | None]:
        """Params stored by earlier tasks that each task sees: its parent's, then upstreams'.

        Read in one statement, but for tasks this pass promoted with a statement that said
        what they see (nothing a pass does changes that before they start: their
        upstreams have ended, and their parent passes on a new value only once its
        children are done)."""
        stored = {r.id: self._seen_params(r.id) for r in rows if r.id in self._seen}
        rest = [r for r in rows if r.id not in stored]
        if not rest:
            return stored
        parent_ids = {r.parent_id for r in rest if r.parent_id is not None}
        # An operator waiting for its subtasks passes on what it stored itself, too.
        parents, upstream = task_store.parent_and_upstream_outputs(
            self.conn, parent_ids, [r.id for r in rest]
        )
        for r in rest:
            parent = parents.get(r.parent_id) if r.parent_id else None
            stored[r.id] = merge_outputs([parent, *upstream.get(r.id, [])])
        return stored

    def _seen_params(self, task_id: int) -> dict[str, Any] | None:
        seen = self._seen.pop(task_id)
        return merge_outputs([seen.parent, *seen.upstream])

    def start_group(self, group: TaskRow) -> None:
        """READY group -> PLANNED, and its first children -> READY."""
        params = self.stored_params([group])[group.id]
        if not self._move(group, TaskState.PLANNED, params=params, started_at=self.now):
            return
        limit = group.config.get("parallel_limit")
        self._remember_limit(group.id, limit)
        self._start_children(group.id, limit)

    def _start_children(self, parent_id: int, limit: int | None) -> None:
        self._fill(parent_id, limit)
        self._unsettled[parent_id] = None  # nothing to start (empty, all resumed) ends it

    def _fill(self, parent_id: int, limit: int | None) -> None:
        """Start every startable child, or as many as a ``_parallel: {limit}`` window allows.

        A limited group starts no new child once one has failed (as Digdag's waves would
        not): the running ones finish, the rest end canceled.
        """
        if limit is None:
            # Every BLOCKED child startable at once: none waits for a sibling, so none
            # needs looking for when a sibling ends (until the children start again).
            children = task_store.select_blocked_children(self.conn, parent_id)
            startable = [task_id for task_id, can_start in children if can_start]
            if len(self._sibling_edges) > 100_000:
                self._sibling_edges.clear()
            self._sibling_edges[parent_id] = len(startable) < len(children)
            self.promote(startable)
            return
        if task_store.has_child_in(self.conn, parent_id, (TaskState.ERROR,)):
            return
        room = limit - task_store.count_children_in(self.conn, parent_id, ACTIVE_TASK_STATES)
        if room > 0:
            self.promote(task_store.select_startable_children(self.conn, parent_id, room))

    # -- operator results --------------------------------------------------------------

    def succeed_operator(
        self,
        task: TaskRow,
        store: dict[str, Any],
        *,
        called: TaskSpec | None = None,
        params: dict[str, Any] | None = None,
        fence: int | None = None,
        export: dict[str, Any] | None = None,
    ) -> bool:
        """An operator ended well: run generated subtasks and ``_check`` first, if any.

        ``fence`` is the lease token of the result: the task moves only while it is still
        the task's token. False if the task did not move."""
        params = task.params if params is None else params
        output = merge_params(params, store) or None
        values = {"result": {"store": store} if store else None, "output_params": output}
        check = task.config.get("check")  # read from the row: no full spec on the hot path
        generated = [s for s in (called, check and TaskSpec.from_config(check)) if s]
        if not generated:
            if not self._move(task, TaskState.SUCCESS, fence=fence, finished_at=self.now, **values):
                return False
            self.after_terminal(task, TaskState.SUCCESS)
            return True
        if not self._move(task, TaskState.PLANNED, fence=fence, params=params, **values):
            return False
        edges = [(0, 1)] if len(generated) == 2 else []
        # A called workflow gets the call> task's own keys as params, and resumes like the
        # rest of the attempt: what succeeded in the attempt resumed from is not run again.
        # A py> task's exports (digdag.env.export) reach the subtasks it added.
        own_keys = merge_params(task.config.get("params"), escape(export)) if export else None
        own_keys = own_keys or task.config.get("params")
        self._generate(task, generated, edges, own_keys, resume=called is not None)
        return True

    def _generate(
        self,
        task: TaskRow,
        specs: Sequence[TaskSpec],
        edges: Sequence[tuple[int, int]],
        extra_export: dict[str, Any] | None = None,
        *,
        resume: bool = False,
    ) -> None:
        inherited = merge_params(task.inherited_export, task.config.get("export"), extra_export)
        resume_from = None
        if resume:
            resume_from = get_attempt(self.conn, task.attempt_id).resume_from_attempt_id
        placement = Placement(
            attempt_id=task.attempt_id,
            parent_id=task.id,
            parent_full_name=task.full_name,
            inherited_export=inherited or None,
            generated=True,
            resume_from_attempt_id=resume_from,
            first_position=task_store.count_children(self.conn, task.id),
        )
        materialize_children(self.conn, placement, specs, edges, self.now)
        self._start_children(task.id, None)

    def fail(self, task: TaskRow, error: dict[str, Any], *, fence: int | None = None) -> bool:
        """A task failed: retry it, run its ``_error`` handler, or end it in ERROR.

        ``fence`` as for :meth:`succeed_operator`. False if the task did not move."""
        spec = TaskSpec.from_config(task.config)
        if spec.retry is not None and task.retry_count < spec.retry.limit:
            delay = spec.retry.delay_seconds(task.retry_count)
            not_before = self.now + timedelta(seconds=delay)
            if not self._move(
                task,
                TaskState.RETRY_WAITING,
                fence=fence,
                retry_count=task.retry_count + 1,
                not_before=not_before,
                error=error,
            ):
                return False
            self.dropped.update(task_store.reset_descendants(self.conn, task.id, self.now))
            self.wake_at(not_before)
            log.info("task %s will retry in %.1fs", task.full_name, delay)
            return True
        if spec.error is not None and not (task.error or {}).get("handler"):
            handled = {**error, "handler": True}
            if not self._move(task, TaskState.PLANNED, fence=fence, error=handled):
                return False
            self._generate(task, [spec.error], [], {"error": escape(error)})
            return True
        if not self._move(task, TaskState.ERROR, fence=fence, error=error, finished_at=self.now):
            return False
        self.after_terminal(task, TaskState.ERROR)
        return True

    # -- after a task ended ------------------------------------------------------------

    def after_terminal(self, task: TaskRow, state: TaskState) -> None:
        """Promote what waited for the task; its parent is looked at in :meth:`settle`."""
        if task.parent_id is None:
            self._finish_attempt(task.attempt_id, state)
            return
        parent_limit = self._parent_limit(task.parent_id)
        if parent_limit is not None:
            self._fill(task.parent_id, parent_limit)
        elif state is TaskState.SUCCESS:
            startable = task_store.startable_downstream(self.conn, task.id)
            if startable and self.promote(startable):
                return  # a sibling started: the parent is not done, no need to look
        self._unsettled[task.parent_id] = None

    def ended(self, task: TaskRow, state: TaskState, values: dict[str, Any]) -> None:
        """Note that ``task`` entered ``state`` through a store update made outside this
        class (a batch of results), with the column ``values`` written with it."""
        log.debug("task %s -> %s task_id=%d", task.full_name, state.value, task.id)
        self.moves.append(_move_of(task, state, self.now, values))

    def after_terminal_many(
        self,
        ended: Sequence[tuple[TaskRow, TaskState]],
        promoted: tuple[list[TaskRow], dict[int, Seen]],
    ) -> None:
        """:meth:`after_terminal` for the tasks of one batch, in order.

        What waits for the successes that :meth:`may_promote_downstream` names was made
        READY by the statement that ended them (see
        :func:`~tickwork.shared.store.tasks.succeed_runs_promoting`): ``promoted`` is those tasks
        and what each sees.
        """
        looked: dict[int, int] = {}  # task id -> parent id
        for task, state in ended:
            parent_id = task.parent_id
            promotes = state is TaskState.SUCCESS and self.may_promote_downstream(task)
            if promotes and parent_id is not None:
                looked[task.id] = parent_id
            elif parent_id is None or self._parent_limit(parent_id) is not None:
                self.after_terminal(task, state)
            else:
                self._unsettled[parent_id] = None
        if not looked:
            return
        ready, seen = promoted
        self._seen.update(seen)
        timed = [task.id for task in ready if task.config.get("start") is not None]
        ready = [task for task in ready if task.config.get("start") is None]
        ready += self._start_delayed(timed, from_state=TaskState.READY)
        self._note_ready(ready)
        started = {task.parent_id for task in ready}
        for parent_id in looked.values():
            if parent_id not in started:  # a child started: the parent is not done
                self._unsettled[parent_id] = None

    def may_promote_downstream(self, task: TaskRow) -> bool:
        """Whether a success of ``task`` is followed by one set-based promotion of what
        waits for it (see :meth:`after_terminal_many`): it is the child of a group without
        a ``_parallel`` limit whose children may wait for one another."""
        parent_id = task.parent_id
        if parent_id is None:
            return False
        try:
            limit = self._parent_limit(parent_id)
        except NotFound:  # a retry deleted its generated parent: the result is refused
            return False
        return limit is None and self._may_wait_for_siblings(parent_id)

    def _may_wait_for_siblings(self, parent_id: int) -> bool:
        """Whether a child of ``parent_id`` may wait for a sibling: unless known from the
        pass that started the children (see :meth:`_fill`), it may."""
        return self._sibling_edges.get(parent_id, True)

    def settle(self) -> None:
        """Conclude every parent touched by an ended child once none of its children runs.

        Done once per batch rather than per child: a parent of many children is probed
        once however many of them ended in the batch.
        """
        while self._unsettled:
            parent_id = next(iter(self._unsettled))
            del self._unsettled[parent_id]
            if not task_store.has_child_in(self.conn, parent_id, ACTIVE_TASK_STATES):
                self.conclude(parent_id)

    def _parent_limit(self, parent_id: int) -> int | None:
        if parent_id not in self._limits:
            limit = task_store.get_task(self.conn, parent_id).config.get("parallel_limit")
            self._remember_limit(parent_id, limit)
        return self._limits[parent_id]

    def _remember_limit(self, parent_id: int, limit: int | None) -> None:
        if len(self._limits) > 100_000:
            self._limits.clear()
        self._limits[parent_id] = None if limit is None else int(limit)

    def conclude(self, parent_id: int) -> None:
        """Every child of a PLANNED task has ended: decide the task's own end."""
        parent = task_store.get_task(self.conn, parent_id)
        if parent.state is not TaskState.PLANNED:
            return
        children = task_store.list_children(self.conn, parent_id)
        blocked = [c.id for c in children if c.state is TaskState.BLOCKED]
        canceled = task_store.update_tasks_state(
            self.conn, blocked, (TaskState.BLOCKED,), TaskState.CANCELED, self.now
        )
        names = {c.id: c.full_name for c in children}
        for task_id, _is_group in canceled:
            self.record(task_id, names[task_id], TaskState.CANCELED)
        if parent.error and parent.error.get("handler"):
            if self._move(parent, TaskState.ERROR, finished_at=self.now):
                self.after_terminal(parent, TaskState.ERROR)
            return
        failed = next((c for c in children if c.state is TaskState.ERROR), None)
        if failed is not None:
            error = failed.error or {}
            self.fail(
                parent,
                {
                    "message": error.get("message", "failed"),
                    "task": error.get("task", failed.full_name),
                },
            )
            return
        if any(c.state is TaskState.CANCELED for c in children if c.id not in blocked):
            if self._move(parent, TaskState.CANCELED, finished_at=self.now):
                self.after_terminal(parent, TaskState.CANCELED)
            return
        # What the task and its subtree stored, children in definition order: at a join the
        # later-defined sibling wins, whatever each child had seen from its upstreams.
        stored = merge_outputs([_stored_by(parent), *(_stored_by(c) for c in children)])
        output = merge_outputs([parent.params, stored])
        result = {**(parent.result or {}), "store": stored} if stored else parent.result
        if self._move(
            parent, TaskState.SUCCESS, finished_at=self.now, output_params=output, result=result
        ):
            self.after_terminal(parent, TaskState.SUCCESS)

    def _finish_attempt(self, attempt_id: int, root_state: TaskState) -> None:
        state = attempt_state_for(root_state)
        if set_attempt_state(
            self.conn, attempt_id, state, self.now, from_states=(AttemptState.RUNNING,)
        ):
            log.info("attempt finished attempt_id=%d state=%s", attempt_id, state.value)
            self.finished_attempts.append((attempt_id, state))
            facts = attempt_facts(self.conn, attempt_id)  # one read for both
            if facts is not None:
                record_attempt_end(self.conn, facts, state, self.now)
                if state is AttemptState.SUCCESS:
                    self.triggered_attempts += fire_after(self.conn, facts, self.now)


def _move_of(task: TaskRow, state: TaskState, now: datetime, values: dict[str, Any]) -> TaskMove:
    """The move of ``task`` into ``state``, with the column ``values`` written with it."""
    failed = state in (TaskState.RETRY_WAITING, TaskState.ERROR)
    error = values.get("error") or task.error or {}
    return TaskMove(
        task.id,
        task.full_name,
        state,
        now,
        not_before=values.get("not_before"),
        retry_count=values.get("retry_count", task.retry_count),
        retry_limit=int((task.config.get("retry") or {}).get("limit", 0)),
        message=error.get("message") if failed else None,
    )


def _stored_by(task: TaskRow) -> dict[str, Any] | None:
    """What a task and its subtree stored (not what it passed on from its upstreams)."""
    stored = (task.result or {}).get("store")
    return stored if isinstance(stored, dict) else None
