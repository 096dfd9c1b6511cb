"""Attempts: list, start by hand, look at, kill, retry, and their task trees."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from apiflask import APIBlueprint
from flask import Response
from pydantic import BaseModel, Field
from sqlalchemy import Connection

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import InvalidBody
from tickwork.services.api.filters import RunsQuery
from tickwork.services.api.models import RequestBody, UserParams
from tickwork.services.api.paging import cursor_after, next_cursor, page_limit
from tickwork.services.api.reads import attempts as attempt_reads
from tickwork.services.api.responses import json_response
from tickwork.services.api.routes.logs import log_out
from tickwork.services.api.scope import require_project
from tickwork.services.api.times import parse_time
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.instants import shown_in
from tickwork.shared.domain.states import DONE_ATTEMPT_STATES, AttemptState
from tickwork.shared.errors import Conflict, InvalidInput, NotFound
from tickwork.shared.store import catalog, history
from tickwork.shared.store import sla as sla_store
from tickwork.shared.store.history import AttemptView, Page
from tickwork.shared.store.starts import (
    RetryMode,
    StartResult,
    kill_attempt,
    retry_attempt,
    start_attempt,
)

blueprint = APIBlueprint("attempts", __name__, tag="Attempts")


class AttemptOut(BaseModel):
    """One attempt of a session."""

    id: str
    name: str
    session_id: str
    session_uuid: str
    session_time: datetime = Field(description="In the workflow's time zone.")
    project: str
    project_id: str
    workflow: str
    workflow_definition_id: str
    state: AttemptState
    done: bool
    timezone: str
    params: dict[str, Any]
    resume_from_attempt_id: str | None
    resume_only: list[str] | None = Field(
        description="Retry from a task: the tasks that counted as done (null: all that succeeded)."
    )
    idempotency_key: str | None
    created_at: datetime
    finished_at: datetime | None


class AlertOut(BaseModel):
    """An alert recorded about an attempt."""

    kind: str = Field(description="What it is about: `sla` for a missed `sla:` deadline.")
    message: str
    created_at: datetime


class AttemptDetailOut(AttemptOut):
    """One attempt, with the alerts recorded about it."""

    alerts: list[AlertOut]


class AttemptPage(BaseModel):
    """A page of attempts, newest first."""

    items: list[AttemptOut]
    next_cursor: str | None


class AttemptsQuery(RunsQuery):
    """Filters of the attempt list."""


class StartBody(RequestBody):
    """A session to start by hand."""

    project: str = Field(min_length=1, max_length=255)
    workflow: str = Field(min_length=1, max_length=255)
    session_time: str | None = Field(
        None,
        max_length=64,
        description="ISO 8601; without an offset it is read in the workflow's time zone. "
        "Default: now (for a scheduled workflow, its last scheduled time).",
    )
    params: UserParams = Field(default_factory=dict)
    idempotency_key: str | None = Field(None, min_length=1, max_length=255)
    revision: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="The project's revision whose workflow runs (default: the latest).",
    )


class RetryBody(RequestBody):
    """What a retry runs again."""

    mode: Literal["all", "failed", "from"] = Field(
        description="all: every task; failed: what did not succeed; from: a task and what "
        "follows it."
    )
    from_task: str | None = Field(
        None, alias="from", min_length=1, max_length=2000, description="`+task` for mode from."
    )
    params: UserParams | None = Field(None, description="Merged over the attempt's params.")
    revision: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="Run the workflow of this revision of the project, or of its latest with "
        "`latest`; default: the retried attempt's (Digdag's --keep-revision).",
    )
    name: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="The new attempt's name, unique in its session (default retry-N); "
        "`${retry_attempt_name}` in its tasks.",
    )


class TaskOut(BaseModel):
    """One task of an attempt's tree."""

    id: str
    full_name: str
    name: str = Field(
        description="The name within its parent: the full name after the parent's "
        "(`+load`, `^error`); a root task's full name."
    )
    parent_id: str | None
    upstream_ids: list[str]
    position: int = Field(description="Its place among its parent's children, from 0.")
    is_group: bool
    is_generated: bool
    state: str
    display_state: str = Field(
        description="The state a page shows: its own, but for a group that has not ended "
        "the most active of its tasks' (a group whose task runs shows `running`)."
    )
    retry_count: int = Field(description="How many times it failed and was retried.")
    pool: str | None = Field(
        description="The pool (`_pool`) whose slot it takes while queued or running: a "
        "`ready` task with one waits for a free slot."
    )
    priority: int = Field(description="Its `_priority` (-100 to 100; higher goes first).")
    config: dict[str, Any]
    params: dict[str, Any] | None
    output_params: dict[str, Any] | None
    error: dict[str, Any] | None = Field(
        description="Its last failure, `message` first. A task that succeeded on a retry "
        "keeps the failure it had: the error is current only in states `error` and "
        "`retry_waiting`."
    )
    started_at: datetime | None = Field(description="Its first start (retries keep it).")
    finished_at: datetime | None
    duration_seconds: float | None = Field(
        description="From `started_at` to `finished_at`, retries included; null until it ends."
    )
    updated_at: datetime


class TaskList(BaseModel):
    """Every task of an attempt, in creation order (parents before their children)."""

    items: list[TaskOut]
    next_cursor: str | None = None


def attempt_item(attempt: AttemptView) -> dict[str, Any]:
    """The JSON of an attempt (ids as strings, the session time in its zone)."""
    state = attempt.state
    resume_from = attempt.resume_from_attempt_id
    return {
        "id": str(attempt.id),
        "name": attempt.name,
        "session_id": str(attempt.session_id),
        "session_uuid": attempt.session_uuid,
        "session_time": shown_in(attempt.session_time, ZoneInfo(attempt.timezone)),
        "project": attempt.project_name,
        "project_id": str(attempt.project_id),
        "workflow": attempt.workflow_name,
        "workflow_definition_id": str(attempt.workflow_definition_id),
        # Text, not the member: pydantic-core writes a plain string several times faster,
        # and a page has a hundred attempts.
        "state": state.value,
        "done": state in DONE_ATTEMPT_STATES,
        "timezone": attempt.timezone,
        "params": attempt.params,
        "resume_from_attempt_id": None if resume_from is None else str(resume_from),
        "resume_only": attempt.resume_only,
        "idempotency_key": attempt.idempotency_key,
        "created_at": attempt.created_at,
        "finished_at": attempt.finished_at,
    }


@contextmanager
def _member_errors() -> Iterator[None]:
    """The store's InvalidInput, whose ``file`` is a JSON pointer, as a 422 naming it."""
    try:
        yield
    except InvalidInput as error:
        problem = error.problems[0]
        raise InvalidBody(problem.file, problem.message) from None


def _id_or_none(value: int | None) -> str | None:
    return None if value is None else str(value)


def _attempt_json(attempt_id: int) -> dict[str, Any]:
    """The JSON of an attempt read afresh, after the write that changed it has committed."""
    with read_connection() as conn:
        return attempt_item(history.get_attempt_view(conn, attempt_id))


def page_of(page: Page[AttemptView]) -> dict[str, Any]:
    """A store page of attempts as the JSON of a list."""
    cursor = next_cursor(page.next_after)
    return {"items": [attempt_item(a) for a in page.items], "next_cursor": cursor}


@blueprint.get("/api/attempts")
@blueprint.input(AttemptsQuery, location="query", arg_name="query")
@blueprint.output(AttemptPage)
def list_attempts(query: AttemptsQuery) -> Response:
    """Attempts, newest first."""
    after = cursor_after(query)
    filters = query.run_filters()
    with read_connection() as conn:
        page = history.list_attempts(conn, where=filters, after=after, limit=page_limit(query))
    return json_response(page_of(page))


@blueprint.post("/api/attempts")
@blueprint.input(StartBody, arg_name="body")
@blueprint.output(AttemptOut, status_code=201)
@blueprint.doc(
    responses={
        404: "No such project or workflow",
        409: "The session already has an attempt, or the idempotency key was used: "
        "`attempt_id` names that attempt",
    }
)
def start(body: StartBody) -> Response:
    """Start a session of a workflow of a project's latest revision by hand."""
    with write_transaction() as conn:
        result = start_from_body(conn, body, utc_now())
    # The attempt as the start stored it is what reading it back would give.
    written = result.attempt
    item = attempt_item(written) if written is not None else _attempt_json(result.attempt_id)
    return json_response(item, status=201)


class SessionTaken(Conflict):
    """The session a start names already has an attempt: nothing was started."""

    def __init__(self, result: StartResult) -> None:
        super().__init__(
            f"session {result.session_id} already has attempt {result.attempt_id}",
            attempt_id=str(result.attempt_id),
        )
        self.result = result


def start_from_body(conn: Connection, body: StartBody, now: datetime) -> StartResult:
    """Start what ``body`` asks; SessionTaken when the session had an attempt (raised in
    the caller's transaction, so its audit row says the start failed), InvalidBody naming
    a member the store cannot use, and for a project the request's token does not cover
    the 404 of a project that does not exist."""
    require_project(body.project, f"no project {body.project!r}")
    session_time = (
        None
        if body.session_time is None
        else parse_time(body.session_time, None, pointer="/session_time")
    )
    with _member_errors():
        result = start_attempt(
            conn,
            project=body.project,
            workflow=body.workflow,
            session_time=session_time,
            params=body.params,
            idempotency_key=body.idempotency_key,
            now=now,
            revision=body.revision,
        )
    if not result.created:
        raise SessionTaken(result)
    return result


@blueprint.get("/api/attempts/<id:attempt_id>")
@blueprint.output(AttemptDetailOut)
@blueprint.doc(responses={404: "No such attempt"})
def get_attempt(attempt_id: int) -> dict[str, Any]:
    """One attempt, with its alerts (an `sla:` missed)."""
    with read_connection() as conn:
        item = attempt_item(history.get_attempt_view(conn, attempt_id))
        found = sla_store.list_alerts(conn, attempt_id)
    alerts = [{"kind": a.kind, "message": a.message, "created_at": a.created_at} for a in found]
    return {**item, "alerts": alerts}


@blueprint.post("/api/attempts/<id:attempt_id>/kill")
@blueprint.output(AttemptOut, status_code=202)
@blueprint.doc(responses={404: "No such attempt", 409: "The attempt has already ended"})
def kill(attempt_id: int) -> dict[str, Any]:
    """Kill an attempt: it moves to `canceling`; its running tasks are stopped and it ends
    `killed`."""
    with write_transaction() as conn:
        kill_attempt(conn, attempt_id, utc_now())
    return _attempt_json(attempt_id)


@blueprint.post("/api/attempts/<id:attempt_id>/retry")
@blueprint.input(RetryBody, arg_name="body")
@blueprint.output(AttemptOut, status_code=201)
@blueprint.doc(
    responses={
        404: "No such attempt",
        409: "The session's latest attempt has not ended (`attempt_id` names it), or mode "
        "`failed` was asked of an attempt that succeeded",
    }
)
def retry(attempt_id: int, body: RetryBody) -> dict[str, Any]:
    """A new attempt of the same session: everything, what did not succeed, or from a task."""
    with write_transaction() as conn:
        new_id = retry_from_body(conn, attempt_id, body, utc_now())
    return _attempt_json(new_id)


def retry_from_body(conn: Connection, attempt_id: int, body: RetryBody, now: datetime) -> int:
    """Retry an attempt as ``body`` asks: the new attempt's id. InvalidBody naming a member
    that cannot be used (``/from``: no such task, or given without mode ``from``)."""
    if body.mode == "from" and body.from_task is None:
        raise InvalidBody("/from", "required when mode is 'from'")
    if body.mode != "from" and body.from_task is not None:
        raise InvalidBody("/from", "only with mode 'from'")
    definition_id = None
    if body.revision is not None:
        definition_id = _definition_in_revision(conn, attempt_id, body.revision)
    with _member_errors():
        return retry_attempt(
            conn,
            attempt_id,
            mode=RetryMode(body.mode),
            from_task=body.from_task,
            params=body.params,
            now=now,
            name=body.name,
            workflow_definition_id=definition_id,
        )


def _definition_in_revision(conn: Connection, attempt_id: int, revision: str) -> int:
    """The id of the retried attempt's workflow in ``revision`` of its project (``latest``:
    the latest revision); InvalidBody naming ``/revision`` when it has none."""
    old = history.get_attempt_view(conn, attempt_id)
    try:
        found = catalog.find_revision(
            conn, old.project_id, None if revision == "latest" else revision
        )
        return int(catalog.find_workflow(conn, found.id, old.workflow_name).id)
    except NotFound as exc:
        raise InvalidBody("/revision", str(exc)) from None


@blueprint.get("/api/attempts/<id:attempt_id>/tasks")
@blueprint.output(TaskList)
@blueprint.doc(responses={404: "No such attempt"})
def tasks(attempt_id: int) -> dict[str, Any]:
    """The attempt's task tree: each task with its parent and the tasks it waits for."""
    with read_connection() as conn:
        nodes = history.list_task_tree(conn, attempt_id)
    shown = attempt_reads.display_states([node.task for node in nodes])
    items = [
        {
            "id": str(node.task.id),
            "full_name": node.task.full_name,
            "name": node.name,
            "parent_id": _id_or_none(node.task.parent_id),
            "upstream_ids": [str(i) for i in node.upstream_ids],
            "position": node.task.position,
            "is_group": node.task.is_group,
            "is_generated": node.task.is_generated,
            "state": node.task.state.value,
            "display_state": shown[node.task.id],
            "retry_count": node.task.retry_count,
            "pool": node.task.pool,
            "priority": node.task.priority,
            "config": node.task.config,
            "params": node.task.params,
            "output_params": node.task.output_params,
            "error": node.task.error,
            "started_at": node.task.started_at,
            "finished_at": node.task.finished_at,
            "duration_seconds": node.duration_seconds,
            "updated_at": node.task.updated_at,
        }
        for node in nodes
    ]
    return {"items": items, "next_cursor": None}


class FailureOut(BaseModel):
    """A task that failed (not only because a child did)."""

    task: str = Field(description="The task's full name.")
    task_id: str
    message: str = Field(description="Its error message (`failed` when it has none).")
    log_tail: list[str] = Field(description="The last lines of its latest run's log.")


class FailureList(BaseModel):
    """Why an attempt failed: empty unless it ended in error."""

    items: list[FailureOut]
    not_shown: int = Field(description="How many more tasks failed (at most 10 are listed).")


@blueprint.get("/api/attempts/<id:attempt_id>/failures")
@blueprint.output(FailureList)
@blueprint.doc(responses={404: "No such attempt"})
def failures(attempt_id: int) -> dict[str, Any]:
    """Why the attempt failed: the tasks that failed themselves, each with its message and
    the last lines of its latest log."""
    with read_connection() as conn:
        found = attempt_reads.read_failures(conn, attempt_id)
    return failures_json(found)


def failures_json(found: attempt_reads.Failures) -> dict[str, Any]:
    """Failures as the REST API shows them."""
    items = [
        {"task": f.task, "task_id": str(f.task_id), "message": f.message, "log_tail": f.log_tail}
        for f in found.items
    ]
    return {"items": items, "not_shown": found.not_shown}


class TaskDetailOut(BaseModel):
    """One task with what it was given and what it set (secret values masked)."""

    id: str
    full_name: str
    state: str
    is_group: bool
    error: dict[str, Any] | None
    started_at: datetime | None
    finished_at: datetime | None
    params: dict[str, Any] = Field(description="The params visible when it started.")
    stored: dict[str, Any] = Field(description="The `${...}` values it stored for later tasks.")
    exported: dict[str, Any] = Field(description="Its `_export` params.")
    logs: list[dict[str, Any]] = Field(
        description="Its runs' logs, oldest first, as `/api/logs/{id}/files` lists them."
    )


@blueprint.get("/api/attempts/<id:attempt_id>/tasks/<id:task_id>")
@blueprint.output(TaskDetailOut)
@blueprint.doc(responses={404: "No such attempt, or no such task in it"})
def task_detail(attempt_id: int, task_id: int) -> dict[str, Any]:
    """One task of the attempt: its params, stored and exported values, and its logs."""
    with read_connection() as conn:
        found = attempt_reads.read_task_detail(conn, attempt_id, task_id)
    return task_detail_json(found)


def task_detail_json(task: attempt_reads.TaskDetail) -> dict[str, Any]:
    """A task's detail as the REST API shows it."""
    return {
        "id": str(task.id),
        "full_name": task.full_name,
        "state": task.state,
        "is_group": task.is_group,
        "error": task.error,
        "started_at": task.started_at,
        "finished_at": task.finished_at,
        "params": task.params,
        "stored": task.stored,
        "exported": task.exported,
        "logs": [log_out(log) for log in task.runs],
    }
