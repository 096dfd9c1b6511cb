"""The attempt page: why it failed (on top), its task tree with a timeline of the task
runs, its task graph, and a pane beside the tree with one task's log, values and actions,
followed live while the attempt runs.

The page works as plain HTML (a folded tree, each task's log as text); static/attempt.js
renders the whole tree from the page's task list (filters, folding, jumping to a
failure), draws the graph (laid out by elkjs) and opens the log pane. Everything shown is
read through services/api/reads/attempts.py, as the REST routes read it.
"""

from __future__ import annotations

import gc
import json
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, Response, render_template, request
from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup
from pydantic import ValidationError

from tickwork.services.api.database import read_connection
from tickwork.services.api.reads import attempts as attempt_reads
from tickwork.services.api.reads.attempts import FailureView, TaskView
from tickwork.services.api.responses import json_response
from tickwork.services.api.routes.attempts import task_detail_json
from tickwork.services.api.routes.logs import (
    FOLLOW_MAX_SECONDS,
    ContentQuery,
    file_response,
    follow_response,
)
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.states import CURRENT_ERROR_STATES, TaskState
from tickwork.shared.errors import NotFound
from tickwork.shared.store.history import AttemptView

blueprint = Blueprint("ui_attempt", __name__, url_prefix="/ui")

LOG_PAGE_BYTES = 1024 * 1024
"""Most bytes of each run's log the page shows inline (the end of a longer one)."""
TREE_BUDGET = 150
"""About how many rows the task tree shows unless every task is asked for (``?tree=all``):
groups open breadth first while their tasks fit, the rest stay folded."""
NOTABLE_STATES = frozenset({TaskState.ERROR, TaskState.RETRY_WAITING, TaskState.RUNNING})
"""States of the tasks a folded tree shows wherever they are (with their parents)."""
MAX_NOTABLE = 100
"""Most tasks a folded tree shows for their state beyond :data:`TREE_BUDGET`."""
TEXT_TYPE = "text/plain; charset=utf-8"
ERROR_CHARS = 400
"""Most characters of a task's error message the page's task list carries."""


@dataclass(frozen=True)
class TaskLine:
    """One line of the task tree: the task, its depth, its bar on the timeline (left edge
    and width, in percent of the attempt's span) and how many of its descendants a folded
    tree leaves out."""

    task: TaskView
    depth: int
    bar: tuple[float, float] | None
    folded: int


def tree_order(tasks: list[TaskView]) -> list[tuple[int, TaskView]]:
    """``(depth, task)`` for every task, each right after its parent, siblings in their
    order; a task whose parent is not listed is shown as a root."""
    children = _children(tasks)
    ordered: list[tuple[int, TaskView]] = []
    stack = [(0, task) for task in reversed(children.get(None, []))]
    while stack:
        depth, task = stack.pop()
        ordered.append((depth, task))
        stack.extend((depth + 1, child) for child in reversed(children.get(task.id, [])))
    return ordered


def _children(tasks: list[TaskView]) -> dict[int | None, list[TaskView]]:
    """Each task's children in their order, by parent id (None: the roots)."""
    ids = {task.id for task in tasks}
    children: dict[int | None, list[TaskView]] = {}
    for task in tasks:
        parent = task.parent_id
        children.setdefault(parent if parent in ids else None, []).append(task)
    for siblings in children.values():
        siblings.sort(key=lambda t: (t.position, t.id))
    return children


def shown_in_folded_tree(tasks: list[TaskView]) -> set[int]:
    """The ids of the tasks a folded tree shows: the roots, then groups opened breadth
    first while their children fit in :data:`TREE_BUDGET` (a group that does not fit
    shows its first children up to the budget), and the tasks in a notable state
    (at most :data:`MAX_NOTABLE`) with their ancestors."""
    children = _children(tasks)
    queue = deque(children.get(None, []))
    shown = {task.id for task in queue}
    while queue:
        kids = children.get(queue.popleft().id, [])
        room = max(0, TREE_BUDGET - len(shown))
        opened = kids if len(kids) <= room else kids[:room]
        shown.update(kid.id for kid in opened)
        queue.extend(opened)
    by_id = {task.id: task for task in tasks}
    notable = [t for t in tasks if t.state in NOTABLE_STATES and t.id not in shown]
    for task in notable[:MAX_NOTABLE]:
        current: TaskView | None = task
        while current is not None and current.id not in shown:
            shown.add(current.id)
            current = None if current.parent_id is None else by_id.get(current.parent_id)
    return shown


def _folded_counts(tasks: list[TaskView], shown: set[int]) -> dict[int, int]:
    """For each shown task, how many of its descendants are not shown."""
    by_id = {task.id: task for task in tasks}
    counts: dict[int, int] = {}
    for task in tasks:
        if task.id in shown:
            continue
        ancestor = by_id.get(task.parent_id) if task.parent_id is not None else None
        while ancestor is not None and ancestor.id not in shown:
            ancestor = by_id.get(ancestor.parent_id) if ancestor.parent_id is not None else None
        if ancestor is not None:
            counts[ancestor.id] = counts.get(ancestor.id, 0) + 1
    return counts


def _span(tasks: list[TaskView], now: datetime) -> tuple[datetime, float] | None:
    """When the first task started and how long, in seconds, the timeline spans."""
    started = [t for t in tasks if t.started_at is not None]
    if not started:
        return None
    first = min(t.started_at for t in started if t.started_at is not None)
    last = max(t.finished_at or now for t in started)
    return first, max(1.0, (last - first).total_seconds())


def tree_lines(
    ordered: list[tuple[int, TaskView]], now: datetime, shown: set[int] | None = None
) -> list[TaskLine]:
    """The lines of a task tree given in :func:`tree_order` (only the tasks in ``shown``,
    if given), each task with its timeline bar and how many of its descendants are left
    out."""
    tasks = [task for _, task in ordered]
    span = _span(tasks, now)
    folded = {} if shown is None else _folded_counts(tasks, shown)
    lines = []
    for depth, task in ordered:
        if shown is not None and task.id not in shown:
            continue
        bar = None
        if span is not None and task.started_at is not None:
            first, seconds = span
            start = (task.started_at - first).total_seconds()
            end = ((task.finished_at or now) - first).total_seconds()
            left = round(100 * start / seconds, 2)
            bar = (left, round(max(0.3, min(100 * (end - start) / seconds, 100 - left)), 2))
        lines.append(TaskLine(task, depth, bar, folded.get(task.id, 0)))
    return lines


def _epoch(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


def graph_json(ordered: list[tuple[int, TaskView]]) -> Markup:
    """What the page's script draws the graph and the tree from, as compact JSON safe
    inside a script element: each task in tree order with its display ``state`` (``own``:
    its own state where that differs, as for a group whose child runs), ``group`` only on
    groups, ``full_name`` only where it is not the parent's followed by ``name``, and only
    where they apply ``retries``, ``started``/``finished`` (Unix seconds), ``error``
    (its message, cut at :data:`ERROR_CHARS`) and ``pool`` (the pool a ready task waits
    for); then the upstream edges as ``[upstream, downstream]``."""
    items = []
    for _, task in ordered:
        item: dict[str, Any] = {"id": task.id, "name": task.name, "state": task.display_state}
        if task.display_state != task.state:
            item["own"] = task.state
        if task.parent_id is not None:
            item["parent"] = task.parent_id
        if task.is_group:
            item["group"] = True
        if task.parent_id is None or task.name == task.full_name:
            item["full_name"] = task.full_name
        _put_optional(item, task)
        items.append(item)
    edges = [(up, task.id) for _, task in ordered for up in task.upstream_ids]
    data = {"tasks": items, "edges": edges}
    return htmlsafe_json_dumps(data, dumps=json.dumps, separators=(",", ":"))


def _put_optional(item: dict[str, Any], task: TaskView) -> None:
    """The keys of a task's JSON that are left out when they say nothing."""
    if task.retry_count:
        item["retries"] = task.retry_count
    if task.started_at is not None:
        item["started"] = _epoch(task.started_at)
    if task.finished_at is not None:
        item["finished"] = _epoch(task.finished_at)
    if task.error_message and task.state in CURRENT_ERROR_STATES:
        item["error"] = task.error_message[:ERROR_CHARS]
    if task.waiting_for_pool is not None:
        item["pool"] = task.waiting_for_pool


@dataclass(frozen=True)
class AttemptContext:
    """Everything the page and its live part show of an attempt."""

    attempt: AttemptView
    task_count: int
    lines: list[TaskLine]
    """The tree's lines: every task, or only those a folded tree shows."""
    folded: bool
    failures: list[FailureView]
    more_failures: int
    graph: Markup

    def as_template_context(self) -> dict[str, Any]:
        """The names the templates use."""
        return {
            "attempt": self.attempt,
            "zone": self.attempt.timezone,
            "task_count": self.task_count,
            "lines": self.lines,
            # What the actions offer to retry from: the tasks the tree shows.
            "tasks": [line.task for line in self.lines],
            "folded": self.folded,
            "failures": self.failures,
            "more_failures": self.more_failures,
            "graph": self.graph,
        }


def read_attempt(attempt_id: int, *, whole_tree: bool) -> AttemptContext:
    """An attempt, its task tree (folded when it is large, unless ``whole_tree``), its
    failures and what its page's script needs, read in one connection."""
    with read_connection() as conn:
        read = attempt_reads.read_attempt_tasks(conn, attempt_id)
        found = attempt_reads.failures_of(conn, read)
    tasks = read.tasks
    folded = not whole_tree and len(tasks) > TREE_BUDGET
    ordered = tree_order(tasks)
    lines = tree_lines(ordered, utc_now(), shown_in_folded_tree(tasks) if folded else None)
    return AttemptContext(
        read.attempt,
        len(tasks),
        lines,
        folded,
        found.items,
        found.not_shown,
        graph_json(ordered),
    )


def _whole_tree() -> bool:
    return request.args.get("tree") == "all"


@blueprint.errorhandler(NotFound)
def _missing(error: NotFound) -> Response | tuple[str, int]:
    """What each page answers for an attempt, task or log that does not exist (or, for a
    token limited to projects, of another project: services/api/scope.py raises the same
    NotFound before the page runs, so the two answers cannot be told apart)."""
    args = request.view_args or {}
    attempt_id, task_id = args.get("attempt_id"), args.get("task_id")
    endpoint = (request.endpoint or "").partition(".")[2]
    if endpoint in ("attempt_page", "attempt_live"):
        return render_template("ui/attempt_missing.html", attempt_id=attempt_id), 404
    if endpoint == "task_log":
        return _text(f"No task {task_id} in attempt {attempt_id}.\n", 404)
    if endpoint == "follow_logs":
        return _text(f"No attempt {attempt_id}.\n", 404)
    return _text(f"{error}\n", 404)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while an attempt's page is built: the
    thousands of small objects of a large attempt hold no cycles and are freed as soon as
    the page is, yet a collection running meanwhile walks them all and moves them to the
    oldest generation, which sets off full collections of the whole process (tens of
    milliseconds each). Threads sharing the collector only ever leave it as they found it
    or enabled."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _render_attempt(attempt_id: int, template: str) -> tuple[str, int]:
    """``template`` filled with an attempt (the whole tree if ``?tree=all``), or the
    404 page."""
    with _collector_paused():
        context = read_attempt(attempt_id, whole_tree=_whole_tree())
        return render_template(template, **context.as_template_context()), 200


@blueprint.get("/attempts/<id:attempt_id>")
def attempt_page(attempt_id: int) -> tuple[str, int]:
    """An attempt: why it failed, its tasks, graph, timeline and the log pane."""
    return _render_attempt(attempt_id, "ui/attempt.html")


@blueprint.get("/attempts/<id:attempt_id>/live")
def attempt_live(attempt_id: int) -> tuple[str, int]:
    """The part of the attempt page that changes while it runs (state, failures, tree)."""
    return _render_attempt(attempt_id, "ui/attempt_live.html")


def _text(message: str, status: int) -> Response:
    return Response(message, status, content_type=TEXT_TYPE)


@blueprint.get("/attempts/<id:attempt_id>/tasks/<id:task_id>")
def task_detail(attempt_id: int, task_id: int) -> Response:
    """One task as JSON for the log pane: its values (secrets masked) and its runs' logs,
    as ``GET /api/attempts/{id}/tasks/{task_id}`` answers, and ``stream_offset``, where
    the pane starts following the attempt's log stream."""
    with read_connection() as conn:
        found = attempt_reads.read_task_detail(conn, attempt_id, task_id)
        offset = attempt_reads.read_stream_offset(conn, attempt_id)
    response = json_response({**task_detail_json(found), "stream_offset": offset})
    response.headers["Cache-Control"] = "no-store"
    return response


@blueprint.get("/attempts/<id:attempt_id>/logs/<id:file_id>")
def log_file(attempt_id: int, file_id: int) -> Response:
    """A run's log or a part of it, as ``GET /api/logs/{id}/files/{file}`` answers
    (``Range``, ``?offset=&length=``, ``?download=true``): the log pane reads its tail
    and earlier ranges here."""
    try:
        query = ContentQuery.model_validate(request.args.to_dict())
    except ValidationError:
        return _text("expected offset and length as whole numbers, download as true\n", 400)
    return file_response(attempt_id, file_id, query)


def task_log_text(attempt_id: int, task_id: int) -> str:
    """The logs of a task's runs, oldest first: each run's last :data:`LOG_PAGE_BYTES`,
    under a heading when there was more than one run; NotFound for no such task."""
    with read_connection() as conn:
        detail = attempt_reads.read_task_detail(conn, attempt_id, task_id)
        parts = []
        for file in detail.runs:
            data, before = attempt_reads.read_log_tail(conn, file, LOG_PAGE_BYTES)
            heading = f"--- run {file.lease_token} ---\n" if len(detail.runs) > 1 else ""
            whole = f"/ui/attempts/{attempt_id}/logs/{file.id}?download=true"
            skipped = f"[{before} bytes before this; the whole log: {whole}]\n"
            text = data.decode("utf-8", "replace")
            parts.append(heading + (skipped if before else "") + text)
    return "".join(parts) if parts else "No log yet.\n"


@blueprint.get("/attempts/<id:attempt_id>/tasks/<id:task_id>/log")
def task_log(attempt_id: int, task_id: int) -> Response:
    """A task's log as text: every run of it, as far as written (a run still going or
    killed too)."""
    text = task_log_text(attempt_id, task_id)
    return Response(text, 200, content_type=TEXT_TYPE, headers={"Cache-Control": "no-store"})


@blueprint.get("/attempts/<id:attempt_id>/follow")
def follow_logs(attempt_id: int) -> Response:
    """The attempt's logs as server-sent events while it runs (as /api/logs/{id}/follow;
    ``?offset=`` starts after that many bytes of the stream, EventSource resumes with
    ``Last-Event-ID``)."""
    with read_connection() as conn:
        attempt_reads.read_attempt_state(conn, attempt_id)
    given = request.headers.get("Last-Event-ID", "") or request.args.get("offset", "")
    offset = int(given) if given.isdigit() and len(given) <= 18 else 0
    return follow_response(attempt_id, offset, FOLLOW_MAX_SECONDS)
