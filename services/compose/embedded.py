"""Embedded mode: one workflow run in one process on the same store and executor code.

``tickwork run`` stores the workflow, creates (or resumes) its session, and drives the
executor with the in-process dispatcher until the attempt ends.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select

from tickwork.services.agent.archives import ArchiveCache
from tickwork.services.agent.local import StreamingRunner, scratch_dir
from tickwork.services.agent.operators.base import ResourceLimits
from tickwork.services.agent.operators.process import terminate_children
from tickwork.services.agent.runner import TaskRunner
from tickwork.services.compose.dispatchers import InProcessDispatcher
from tickwork.services.compose.partial_runs import named_task, partial_run, task_names
from tickwork.services.executor.graph import TaskMove
from tickwork.services.executor.loop import MAX_TASKS_PER_ATTEMPT, TickReport, WorkflowExecutor
from tickwork.shared.clock import SystemClock, utc_now
from tickwork.shared.dispatch.messages import TaskEvent, TaskFinished, TaskMessage
from tickwork.shared.dispatch.seam import EventSink
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.errors import Conflict, InvalidInput, Problem, StoreUnavailable
from tickwork.shared.runner import IdleBackoff, run_until_stopped
from tickwork.shared.secrets import marked_secrets
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.checkpoints import LogCheckpointer
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import notify_work, read_only
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.starts import resumed_before
from tickwork.shared.store.tables import attempts, projects, sessions

IDLE_WAIT_SECONDS = 0.2
"""The longest wait between passes of ``tickwork run`` (an agent's event ends it sooner)."""
ATTEMPT_CHECK_SECONDS = 1.0
"""How often ``tickwork run`` looks whether its attempt was ended from outside."""

ProgressSink = Callable[[Engine, int, bool], None]
"""Told after every pass: the store, the attempt, and whether the attempt ended."""
MoveSink = Callable[[Sequence[TaskMove]], None]
"""Told the task moves of every pass that made some, in the order it made them."""


@dataclass(frozen=True)
class RunRequest:
    """What the user asked ``tickwork run`` for, already validated."""

    definition: WorkflowDefinition
    project_dir: Path
    state_dir: Path
    database_url: str
    params: dict[str, Any]
    session_time: datetime
    rerun: bool = False
    start_from: str | None = None  # --start +TASK: it and what follows run again
    goal: str | None = None  # --goal +TASK: what comes before it, it and its subtree run
    end: str | None = None  # --end +TASK: what comes before it runs; it and the rest skip
    show_params: bool = False  # -E: show each task's params with its output
    max_task_threads: int = 8
    task_timeout_seconds: float | None = None
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    max_tasks_per_attempt: int = MAX_TASKS_PER_ATTEMPT
    pools: dict[str, int] = field(default_factory=dict)  # --pool NAME=SLOTS, set first


@dataclass
class RunOutcome:
    """How a run ended."""

    attempt_id: int
    session_id: int
    state: AttemptState
    resumed_from_attempt_id: int | None


def default_session_time(definition: WorkflowDefinition, now: datetime) -> datetime:
    """Now, truncated to the last scheduled time when the workflow has a schedule."""
    if definition.schedule is not None:
        last = ScheduleSpec.from_config(definition.schedule).last_session_time(now)
        if last is not None:
            return last
    return now.replace(microsecond=0)


def revision_name(definition: WorkflowDefinition) -> str:
    """Local runs name their revision after the workflow's content."""
    return f"local-{project_store.config_digest(definition.to_config())[:16]}"


def create_run_attempt(conn: Connection, request: RunRequest, now: datetime) -> RunOutcome:
    """Store the workflow and create the attempt that runs it; resume the last one's work.

    A previous attempt left unfinished (its process died) is marked canceled. Unless
    ``rerun`` is set, tasks that succeeded in the latest attempt are not run again.
    """
    definition = request.definition
    project_id, definition_id = _store_workflow(conn, request, now)
    session_id = session_store.ensure_session(
        conn,
        project_id=project_id,
        workflow_name=definition.name,
        session_time=request.session_time,
        now=now,
    )
    previous = session_store.list_session_attempts(conn, session_id)
    for attempt in previous:
        if not attempt.state.is_done:
            task_store.cancel_unfinished_tasks(conn, attempt.id, now)
            session_store.set_attempt_state(
                conn,
                attempt.id,
                AttemptState.CANCELED,
                now,
                from_states=(AttemptState.WAITING, AttemptState.CREATED, AttemptState.RUNNING),
            )
    resume_from = previous[-1].id if previous and not request.rerun else None
    resume_only = None
    skip_tasks = None
    for option, target in (("--goal", request.goal), ("--end", request.end)):
        if target is not None:
            plan = partial_run(definition, target, option)
            skip_tasks = sorted(plan.skipped)
            if option == "--goal" and resume_from is not None:
                # Before the goal: the last attempt's; the goal and its subtree: run again.
                resume_only = resumed_before(conn, resume_from, target)
    if request.start_from is not None:
        named_task(task_names(definition), request.start_from, "--start")
        if resume_from is not None:  # what comes before it: the last attempt's, as retry --from
            try:
                resume_only = resumed_before(conn, resume_from, request.start_from)
            except InvalidInput as exc:
                problems = [Problem("--start", None, p.message) for p in exc.problems]
                raise InvalidInput(problems) from None
    attempt_id = session_store.insert_attempt(
        conn,
        session_id=session_id,
        name=f"run-{len(previous) + 1}",
        workflow_definition_id=definition_id,
        timezone=definition.timezone,
        params=request.params,
        now=now,
        resume_from_attempt_id=resume_from,
        project_dir=str(request.project_dir),
        resume_only=resume_only,
        skip_tasks=skip_tasks,
    )
    if attempt_id is None:
        raise Conflict(f"another run of this session is starting (attempt run-{len(previous) + 1})")
    notify_work(conn)
    return RunOutcome(attempt_id, session_id, AttemptState.CREATED, resume_from)


def last_run_session_time(conn: Connection, project_dir: Path, workflow: str) -> datetime | None:
    """The session time of the latest attempt of ``workflow`` run from ``project_dir``."""
    query = (
        select(sessions.c.session_time)
        .join(projects, projects.c.id == sessions.c.project_id)
        .join(attempts, attempts.c.session_id == sessions.c.id)
        .where(
            projects.c.source_dir == str(project_dir.resolve()),
            sessions.c.workflow_name == workflow,
        )
        .order_by(attempts.c.id.desc())
        .limit(1)
    )
    found = conn.execute(query).scalar_one_or_none()
    return found if isinstance(found, datetime) else None


def _store_workflow(conn: Connection, request: RunRequest, now: datetime) -> tuple[int, int]:
    """The project and workflow definition ids of a local run, stored if new."""
    definition = request.definition
    project_id = project_store.ensure_local_project(conn, request.project_dir, now)
    revision_id = project_store.ensure_revision(
        conn, project_id, revision_name(definition), {}, now
    )
    definition_id = project_store.ensure_workflow_definition(conn, revision_id, definition)
    schedule_store.upsert_schedule(
        conn, project_id=project_id, definition_id=definition_id, definition=definition, now=now
    )
    return project_id, definition_id


def make_in_process_runner(
    state_dir: Path, engine: Engine, limits: ResourceLimits | None = None
) -> StreamingRunner:
    """The task runner of an executor that runs tasks in its own process.

    Logs stream to the executor as an agent's do, and so go to the store; a log too
    large for memory spools under ``<state_dir>/work/spool`` while it runs. A pushed
    project's archive is read from the store (this process has it) and unpacked once
    under ``<state_dir>/projects/<digest>``.
    """
    archives = ArchiveCache(state_dir / "projects", project_store.archive_reader(engine))
    return StreamingRunner(TaskRunner(scratch_dir(state_dir), limits, archives))


def _watched(
    runner: Callable[[TaskMessage, EventSink], None],
    watch: EventSink,
    show_params: bool = False,
) -> Callable[[TaskMessage, EventSink], None]:
    """``runner``, also handing every event it reports to ``watch`` (the display); with
    ``show_params``, the display shows the params each task ran with before its output
    (``tickwork run -E``)."""

    def run(message: TaskMessage, report: EventSink) -> None:
        def tee(event: TaskEvent) -> None:
            shown = event
            if show_params and isinstance(event, TaskFinished):
                lines = [params_line(message), *event.output_lines]
                shown = replace(event, output_lines=lines)
            watch(shown)
            report(event)

        runner(message, tee)

    return run


def params_line(message: TaskMessage) -> str:
    """``params: {...}`` of a task's message, a secret it uses shown as ``${secret:name}``."""
    text = json.dumps(message.params, sort_keys=True, default=str)
    if message.secret_marker:
        text = marked_secrets(message.secret_marker).sub(r"${secret:\1}", text)
    return f"params: {text}"


def set_pools(conn: Connection, request: RunRequest, now: datetime, *, must_exist: bool) -> None:
    """Set the pools ``--pool`` gives; with ``must_exist``, refuse a workflow naming a pool
    the store lacks (in this process nothing else could make it, and its tasks would wait
    for ever)."""
    for name, slots in request.pools.items():
        pool_store.set_pool(conn, name, slots, None, now)
    if not must_exist:
        return
    known = {usage.name for usage in pool_store.list_pools(conn) if usage.slots}
    missing = sorted(request.definition.root.pools_named() - known)
    if missing:
        given = " ".join(f"--pool {name}=SLOTS" for name in missing)
        message = (
            f"its tasks take slots of {_names(missing)}, which this store does not have "
            f"(or has with no slots): give {given}"
        )
        raise InvalidInput([Problem(f"{request.definition.name}.dig", None, message)])


def _names(pools: list[str]) -> str:
    listed = ", ".join(repr(name) for name in pools)
    return f"pool {listed}" if len(pools) == 1 else f"pools {listed}"


def run_workflow(
    request: RunRequest,
    *,
    on_progress: ProgressSink | None = None,
    on_event: EventSink | None = None,
    on_moves: MoveSink | None = None,
    engine: Engine | None = None,
) -> RunOutcome:
    """Run one workflow to its end in this process; returns how the attempt ended."""
    clock = SystemClock()
    engine = engine or open_migrated_store(request.database_url)
    with engine.begin() as conn:
        set_pools(conn, request, clock.now(), must_exist=True)
        outcome = create_run_attempt(conn, request, clock.now())
    runner = make_in_process_runner(request.state_dir, engine, request.limits)
    if on_event is not None:
        watched = _watched(runner, on_event, request.show_params)
        dispatcher = InProcessDispatcher(watched, request.max_task_threads)
    else:
        dispatcher = InProcessDispatcher(runner, request.max_task_threads)
    executor = WorkflowExecutor(
        engine,
        dispatcher,
        clock=clock,
        task_timeout_seconds=request.task_timeout_seconds,
        attempt_ids={outcome.attempt_id},
        max_tasks_per_attempt=request.max_tasks_per_attempt,
    )
    checkpointer = LogCheckpointer(engine)  # the log's copies and syncs off the passes' path
    checkpointer.start()
    try:
        run = _AttemptRun(executor, outcome.attempt_id, engine, on_progress, on_moves)
        outcome.state = _drive(run)
        if outcome.state in (AttemptState.CANCELED, AttemptState.KILLED):
            terminate_children()  # ended from outside: its commands must stop too
        elif outcome.state is AttemptState.ERROR:
            terminate_children()  # what still runs was canceled (an sla: with fail: true)
    except BaseException:
        terminate_children()  # an interrupted run must not leave commands running
        raise
    finally:
        dispatcher.close()
        runner.close()
        checkpointer.close()
        executor.close()
    return outcome


FOLLOW_POLL_SECONDS = 0.2


def follow_on_executor(
    request: RunRequest,
    *,
    on_progress: ProgressSink | None = None,
    engine: Engine | None = None,
) -> RunOutcome:
    """Store the run's attempt for ``tickwork executor`` and its agents to run, and follow
    it in the store until it ends (this process runs nothing)."""
    engine = engine or open_migrated_store(request.database_url)
    if not dialect_of(engine).serves_many_processes:
        raise StoreUnavailable(
            "--on-executor needs TICKWORK_DATABASE_URL to name the PostgreSQL database "
            "that `tickwork executor` uses"
        )
    with engine.begin() as conn:
        set_pools(conn, request, utc_now(), must_exist=False)
        outcome = create_run_attempt(conn, request, utc_now())
    while True:
        with read_only(engine) as conn:
            state = session_store.get_attempt_state(conn, outcome.attempt_id)
        if on_progress:
            on_progress(engine, outcome.attempt_id, state.is_done)
        if state.is_done:
            outcome.state = state
            return outcome
        time.sleep(FOLLOW_POLL_SECONDS)


def _drive(run: _AttemptRun) -> AttemptState:
    """Run the executor with the shared runner until the attempt ends; how it ended."""
    run_until_stopped(
        run.tick,
        stop=run.ended,
        wait=run.wait,
        idle=IdleBackoff(min_seconds=IDLE_WAIT_SECONDS, cap_seconds=IDLE_WAIT_SECONDS),
    )
    assert run.state is not None
    return run.state


class _AttemptRun:
    """The passes of ``tickwork run``: each reports progress, and the run ends with its
    attempt, whether this executor ended it or another run of the session canceled it."""

    def __init__(
        self,
        executor: WorkflowExecutor,
        attempt_id: int,
        engine: Engine,
        on_progress: ProgressSink | None = None,
        on_moves: MoveSink | None = None,
    ) -> None:
        self.executor = executor
        self.attempt_id = attempt_id
        self.engine = engine
        self.on_progress = on_progress
        self.on_moves = on_moves
        self.state: AttemptState | None = None
        self.ended = threading.Event()
        self.checked_at = time.monotonic()

    def tick(self) -> TickReport | None:
        """One pass; None once the attempt ended in it."""
        report = self.executor.tick()
        if self.on_moves and report.moves:
            self.on_moves(report.moves)
        for finished_id, state in report.finished_attempts:
            if finished_id == self.attempt_id:
                self._progress(done=True)
                self.state = state
                return None
        self._progress(done=False)
        return report

    def wait(self, idle_seconds: float) -> None:
        """Wait for the executor's work; every second, first look whether the attempt
        ended elsewhere (another run of the same session cancels it when it starts)."""
        if time.monotonic() - self.checked_at >= ATTEMPT_CHECK_SECONDS:
            self.checked_at = time.monotonic()
            with read_only(self.engine) as conn:
                state = session_store.get_attempt_state(conn, self.attempt_id)
            if state.is_done:
                self.state = state
                self.ended.set()
                return
        self.executor.wait(idle_seconds)

    def _progress(self, *, done: bool) -> None:
        if self.on_progress:
            self.on_progress(self.engine, self.attempt_id, done)
