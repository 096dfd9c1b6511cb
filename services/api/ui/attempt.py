"""The attempt page: why it failed (on top), its task tree with a timeline of the task
runs, its task graph, and each task's log, followed live while the attempt runs.

The page works as plain HTML; static/attempt.js draws the graph (laid out by elkjs),
refreshes the tree while the attempt runs, and loads and follows the logs.
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
from sqlalchemy import Connection

from services.api.database import read_connection
from services.api.routes.logs import FOLLOW_MAX_SECONDS, follow_response
from shared.clock import utc_now
from shared.errors import NotFound
from shared.log_tail import TAIL_BYTES, last_lines
from shared.store import history
from shared.store import logs as log_store
from shared.store.history import AttemptView, TaskSummary
from shared.store.logs import RunLog

blueprint = Blueprint("ui_attempt", __name__, url_prefix="/ui")

MAX_FAILURES = 10
"""Most failed tasks shown on top with their logs."""
LOG_PAGE_BYTES = 1024 * 1024
"""Most bytes of each run's log the page shows inline (the end of a longer one)."""
TREE_BUDGET = 150
"""About how many rows the task tree shows unless every task is asked for (``?tree=all``):
groups open breadth first while their tasks fit, the rest stay folded."""
NOTABLE_STATES = frozenset({"error", "retry_waiting", "running"})
"""States of the tasks a folded tree shows wherever they are (with their parents)."""
MAX_NOTABLE = 100
"""Most tasks a folded tree shows for their state beyond :data:`TREE_BUDGET`."""
TEXT_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class TaskLine:
    """One line of the task tree: the task, its depth, its bar on the timeline (left edge
    and width, in percent of the attempt's span) and how many of its descendants a folded
    tree leaves out."""

    task: TaskSummary
    depth: int
    bar: tuple[float, float] | None
    folded: int


@dataclass(frozen=True)
class Failure:
    """A task that failed (not only because a child did), its message and log tail."""

    task: str
    task_id: int
    message: str
    log_tail: list[str]


def tree_order(tasks: list[TaskSummary]) -> list[tuple[int, TaskSummary]]:
    """``(depth, task)`` for every task, each right after its parent, siblings in their
    order; a task whose parent is not listed is shown as a root."""
    children = _children(tasks)
    ordered: list[tuple[int, TaskSummary]] = []
    stack = [(0, task) for task in reversed(children.get(None, []))]
    while stack:
        depth, task = stack.pop()
        ordered.append((depth, task))
        stack.extend((depth + 1, child) for child in reversed(children.get(task.id, [])))
    return ordered


def _children(tasks: list[TaskSummary]) -> dict[int | None, list[TaskSummary]]:
    """Each task's children in their order, by parent id (None: the roots)."""
    ids = {task.id for task in tasks}
    children: dict[int | None, list[TaskSummary]] = {}
    for task in tasks:
        parent = task.parent_id
        children.setdefault(parent if parent in ids else None, []).append(task)
    for siblings in children.values():
        siblings.sort(key=lambda t: (t.position, t.id))
    return children


def shown_in_folded_tree(tasks: list[TaskSummary]) -> set[int]:
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
        current: TaskSummary | None = task
        while current is not None and current.id not in shown:
            shown.add(current.id)
            current = None if current.parent_id is None else by_id.get(current.parent_id)
    return shown


def _folded_counts(tasks: list[TaskSummary], shown: set[int]) -> dict[int, int]:
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


def failed_tasks(tasks: list[TaskSummary]) -> list[TaskSummary]:
    """The tasks in error that did not fail only because a child did: where to look."""
    failed_parents = {t.parent_id for t in tasks if t.state == "error"}
    return [t for t in tasks if t.state == "error" and t.id not in failed_parents]


def _span(tasks: list[TaskSummary], now: datetime) -> tuple[datetime, float] | None:
    """When the first task started and how long, in seconds, the timeline spans."""
    started = [t for t in tasks if t.started_at is not None]
    if not started:
        return None
    first = min(t.started_at for t in started if t.started_at is not None)
    last = max(t.finished_at or now for t in started)
    return first, max(1.0, (last - first).total_seconds())


def tree_lines(
    ordered: list[tuple[int, TaskSummary]], now: datetime, shown: set[int] | None = None
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


def graph_json(ordered: list[tuple[int, TaskSummary]]) -> Markup:
    """What the page's script draws, as compact JSON safe inside a script element: each
    task in tree order (``group`` only on groups; ``full_name`` only where it is not the
    parent's followed by ``name``) and the upstream edges as ``[upstream, downstream]``."""
    items = []
    for _, task in ordered:
        item: dict[str, Any] = {"id": task.id, "name": task.name, "state": task.state}
        if task.parent_id is not None:
            item["parent"] = task.parent_id
        if task.is_group:
            item["group"] = True
        if task.parent_id is None or task.name == task.full_name:
            item["full_name"] = task.full_name
        items.append(item)
    edges = [(up, task.id) for _, task in ordered for up in task.upstream_ids]
    data = {"tasks": items, "edges": edges}
    return htmlsafe_json_dumps(data, dumps=json.dumps, separators=(",", ":"))


def _read_part(conn: Connection, log: RunLog, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a run's log and how many bytes come before them; a
    line saying so for a log the retention removed."""
    if log.pruned_at is not None:
        return f"[the log retention removed this log on {log.pruned_at:%Y-%m-%d}]\n".encode(), 0
    return log_store.read_log_tail(conn, log, limit)


def _latest_run(files: list[RunLog], task_id: int) -> RunLog | None:
    runs = [f for f in files if f.task_id == task_id]
    return max(runs, key=lambda f: (f.lease_token, f.id)) if runs else None


def failures(
    conn: Connection, tasks: list[TaskSummary], files: list[RunLog]
) -> tuple[list[Failure], int]:
    """The failures to show on top (at most :data:`MAX_FAILURES`), and how many more."""
    failed = failed_tasks(tasks)
    shown = []
    for task in failed[:MAX_FAILURES]:
        latest = _latest_run(files, task.id)
        tail: list[str] = []
        if latest is not None:
            data, before = _read_part(conn, latest, TAIL_BYTES)
            tail = last_lines(data, cut=before > 0)
        message = task.error_message or "failed"
        shown.append(Failure(task.full_name, task.id, message, tail))
    return shown, len(failed) - len(shown)


@dataclass(frozen=True)
class AttemptContext:
    """Everything the page and its live part show of an attempt."""

    attempt: AttemptView
    task_count: int
    lines: list[TaskLine]
    """The tree's lines: every task, or only those a folded tree shows."""
    folded: bool
    failures: list[Failure]
    more_failures: int
    logged: list[TaskSummary]
    """The tasks of the tree's lines that have a log, in tree order."""
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
            "logged": self.logged,
            "graph": self.graph,
        }


def read_attempt(attempt_id: int, *, whole_tree: bool) -> AttemptContext:
    """An attempt, its task tree (folded when it is large, unless ``whole_tree``) and its
    log files, read in one connection."""
    with read_connection() as conn:
        attempt = history.get_attempt_view(conn, attempt_id)
        tasks = history.list_task_summaries(conn, attempt_id)
        files = log_store.list_run_logs(conn, attempt_id)
        shown, more = failures(conn, tasks, files) if attempt.state.value == "error" else ([], 0)
    folded = not whole_tree and len(tasks) > TREE_BUDGET
    ordered = tree_order(tasks)
    lines = tree_lines(ordered, utc_now(), shown_in_folded_tree(tasks) if folded else None)
    with_logs = {f.task_id for f in files}
    logged = [line.task for line in lines if line.task.id in with_logs]
    return AttemptContext(
        attempt, len(tasks), lines, folded, shown, more, logged, graph_json(ordered)
    )


def _whole_tree() -> bool:
    return request.args.get("tree") == "all"


def _missing(attempt_id: int) -> tuple[str, int]:
    return render_template("ui/attempt_missing.html", attempt_id=attempt_id), 404


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
        try:
            context = read_attempt(attempt_id, whole_tree=_whole_tree())
        except NotFound:
            return _missing(attempt_id)
        return render_template(template, **context.as_template_context()), 200


@blueprint.get("/attempts/<id:attempt_id>")
def attempt_page(attempt_id: int) -> tuple[str, int]:
    """An attempt: why it failed, its tasks, graph, timeline and logs."""
    return _render_attempt(attempt_id, "ui/attempt.html")


@blueprint.get("/attempts/<id:attempt_id>/live")
def attempt_live(attempt_id: int) -> tuple[str, int]:
    """The part of the attempt page that changes while it runs (state, failures, tree)."""
    return _render_attempt(attempt_id, "ui/attempt_live.html")


def task_log_text(conn: Connection, attempt_id: int, files: list[RunLog]) -> str:
    """The logs of a task's runs, oldest first: each run's last :data:`LOG_PAGE_BYTES`,
    under a heading when there was more than one run."""
    parts = []
    for file in files:
        data, before = _read_part(conn, file, LOG_PAGE_BYTES)
        heading = f"--- run {file.lease_token} ---\n" if len(files) > 1 else ""
        whole = f"/api/logs/{attempt_id}/files/{file.id}"
        skipped = f"[{before} bytes before this; the whole log: {whole}]\n"
        parts.append(heading + (skipped if before else "") + data.decode("utf-8", "replace"))
    return "".join(parts) if parts else "No log yet.\n"


@blueprint.get("/attempts/<id:attempt_id>/tasks/<id:task_id>/log")
def task_log(attempt_id: int, task_id: int) -> Response:
    """A task's log as text: every run of it, as far as written (a run still going or
    killed too)."""
    try:
        with read_connection() as conn:
            history.get_attempt_view(conn, attempt_id)
            files = log_store.list_run_logs(conn, attempt_id, task_id=task_id)
            text = task_log_text(conn, attempt_id, files)
    except NotFound:
        return Response(f"No attempt {attempt_id}.\n", 404, content_type=TEXT_TYPE)
    return Response(text, 200, content_type=TEXT_TYPE, headers={"Cache-Control": "no-store"})


@blueprint.get("/attempts/<id:attempt_id>/follow")
def follow_logs(attempt_id: int) -> Response:
    """The attempt's logs as server-sent events while it runs (as /api/logs/{id}/follow;
    EventSource resumes with ``Last-Event-ID``)."""
    try:
        with read_connection() as conn:
            history.get_attempt_view(conn, attempt_id)
    except NotFound:
        return Response(f"No attempt {attempt_id}.\n", 404, content_type=TEXT_TYPE)
    last_event = request.headers.get("Last-Event-ID", "")
    offset = int(last_event) if last_event.isdigit() and len(last_event) <= 18 else 0
    return follow_response(attempt_id, offset, FOLLOW_MAX_SECONDS)
