"""The attempt page: why it failed (on top), its task tree with a timeline of the task
runs, its task graph, and each task's log, followed live while the attempt runs.

The page works as plain HTML; static/attempt.js draws the graph (laid out by elkjs),
refreshes the tree while the attempt runs, and loads and follows the logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, render_template, request

from services.api.database import read_connection
from services.api.routes.logs import (
    CONFIG_KEY,
    FOLLOW_MAX_SECONDS,
    follow_response,
    resolve_log_path,
)
from shared.clock import utc_now
from shared.errors import NotFound
from shared.store import history
from shared.store.history import AttemptView, LogFile, TaskNode

blueprint = Blueprint("ui_attempt", __name__, url_prefix="/ui")

CURRENT_ERROR_STATES = frozenset({"error", "retry_waiting"})
"""States in which a task's stored error is its current one."""
MAX_FAILURES = 10
"""Most failed tasks shown on top with their logs."""
TAIL_LINES = 10
"""Most log lines shown under a failed task."""
TAIL_BYTES = 16 * 1024
"""Bytes read from the end of a log to find its last lines."""
LOG_PAGE_BYTES = 1024 * 1024
"""Most bytes of each run's log the page shows inline (the end of a longer one)."""
TEXT_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class TaskLine:
    """One line of the task tree: the task, its state, depth and current error, and its
    bar on the timeline (left edge and width, in percent of the attempt's span)."""

    node: TaskNode
    state: str
    depth: int
    error: str | None
    bar: tuple[float, float] | None


@dataclass(frozen=True)
class Failure:
    """A task that failed (not only because a child did), its message and log tail."""

    task: str
    task_id: int
    message: str
    log_tail: list[str]


def tree_order(nodes: list[TaskNode]) -> list[tuple[int, TaskNode]]:
    """``(depth, node)`` for every task, each right after its parent, siblings in their
    order; a task whose parent is not listed is shown as a root."""
    ids = {node.task.id for node in nodes}
    children: dict[int | None, list[TaskNode]] = {}
    for node in nodes:
        parent = node.task.parent_id
        children.setdefault(parent if parent in ids else None, []).append(node)
    for siblings in children.values():
        siblings.sort(key=lambda n: (n.task.position, n.task.id))
    ordered: list[tuple[int, TaskNode]] = []
    stack = [(0, node) for node in reversed(children.get(None, []))]
    while stack:
        depth, node = stack.pop()
        ordered.append((depth, node))
        stack.extend((depth + 1, child) for child in reversed(children.get(node.task.id, [])))
    return ordered


def error_message(node: TaskNode) -> str:
    """The message of a task's error (``failed`` if it has none)."""
    error = node.task.error
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return "failed"


def failed_tasks(nodes: list[TaskNode]) -> list[TaskNode]:
    """The tasks in error that did not fail only because a child did: where to look."""
    failed_parents = {n.task.parent_id for n in nodes if n.task.state.value == "error"}
    return [n for n in nodes if n.task.state.value == "error" and n.task.id not in failed_parents]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _span(nodes: list[TaskNode], now: datetime) -> tuple[datetime, float] | None:
    """When the first task started and how long, in seconds, the timeline spans."""
    starts = [_aware(n.task.started_at) for n in nodes if n.task.started_at]
    if not starts:
        return None
    first = min(starts)
    ends = [_aware(n.task.finished_at or now) for n in nodes if n.task.started_at]
    return first, max(1.0, (max(ends) - first).total_seconds())


def tree_lines(nodes: list[TaskNode], now: datetime) -> list[TaskLine]:
    """The task tree in order, each task with its current error and timeline bar."""
    span = _span(nodes, now)
    lines = []
    for depth, node in tree_order(nodes):
        task = node.task
        error = None
        if task.state.value in CURRENT_ERROR_STATES and task.error:
            error = error_message(node)
        bar = None
        if span is not None and task.started_at is not None:
            first, seconds = span
            start = (_aware(task.started_at) - first).total_seconds()
            end = (_aware(task.finished_at or now) - first).total_seconds()
            left = round(100 * start / seconds, 2)
            bar = (left, round(max(0.3, min(100 * (end - start) / seconds, 100 - left)), 2))
        lines.append(TaskLine(node, task.state.value, depth, error, bar))
    return lines


def graph_data(lines: list[TaskLine]) -> dict[str, Any]:
    """What the page's script draws: each task (in tree order) and the upstream edges."""
    return {
        "tasks": [
            {
                "id": str(line.node.task.id),
                "name": line.node.name,
                "full_name": line.node.task.full_name,
                "parent": None
                if line.node.task.parent_id is None
                else str(line.node.task.parent_id),
                "group": line.node.task.is_group,
                "state": line.state,
            }
            for line in lines
        ],
        "edges": [
            [str(upstream), str(line.node.task.id)]
            for line in lines
            for upstream in line.node.upstream_ids
        ],
    }


def _log_root() -> Path | None:
    log_dir = current_app.extensions[CONFIG_KEY].log_dir
    return None if log_dir is None else Path(log_dir).resolve()


def _read_part(root: Path | None, file: LogFile, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a run's log and how many bytes come before them;
    nothing for a file not on disk (a run that has written nothing yet)."""
    path = None if root is None else resolve_log_path(root, file.path)
    if path is None:
        return b"", 0
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - limit)
            handle.seek(start)
            return handle.read(limit), start
    except OSError:
        return b"", 0


def last_lines(data: bytes, *, cut: bool, count: int = TAIL_LINES) -> list[str]:
    """The last ``count`` lines of ``data`` without trailing blank lines; with ``cut``,
    ``data`` starts in the middle of a line, which is left out unless it is the only one."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if cut and len(lines) > 1:
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines[-count:]]


def _latest_run(files: list[LogFile], task_id: int) -> LogFile | None:
    runs = [f for f in files if f.task_id == task_id]
    return max(runs, key=lambda f: (f.lease_token, f.id)) if runs else None


def failures(nodes: list[TaskNode], files: list[LogFile]) -> tuple[list[Failure], int]:
    """The failures to show on top (at most :data:`MAX_FAILURES`), and how many more."""
    failed = failed_tasks(nodes)
    root = _log_root()
    shown = []
    for node in failed[:MAX_FAILURES]:
        latest = _latest_run(files, node.task.id)
        tail: list[str] = []
        if latest is not None:
            data, before = _read_part(root, latest, TAIL_BYTES)
            tail = last_lines(data, cut=before > 0)
        shown.append(Failure(node.task.full_name, node.task.id, error_message(node), tail))
    return shown, len(failed) - len(shown)


@dataclass(frozen=True)
class AttemptContext:
    """Everything the page and its live part show of an attempt."""

    attempt: AttemptView
    lines: list[TaskLine]
    failures: list[Failure]
    more_failures: int
    logged: list[TaskNode]
    """The tasks that have a log, in tree order."""

    def as_template_context(self) -> dict[str, Any]:
        """The names the templates use."""
        return {
            "attempt": self.attempt,
            "zone": self.attempt.timezone,
            "lines": self.lines,
            "tasks": [line.node for line in self.lines],
            "failures": self.failures,
            "more_failures": self.more_failures,
            "logged": self.logged,
            "graph": graph_data(self.lines),
        }


def read_attempt(attempt_id: int) -> AttemptContext:
    """An attempt, its task tree and its log files, read in one connection."""
    with read_connection() as conn:
        attempt = history.get_attempt_view(conn, attempt_id)
        nodes = history.list_task_tree(conn, attempt_id)
        files = history.list_log_files(conn, attempt_id)
    lines = tree_lines(nodes, utc_now())
    shown, more = failures(nodes, files) if attempt.state.value == "error" else ([], 0)
    with_logs = {f.task_id for f in files}
    logged = [line.node for line in lines if line.node.task.id in with_logs]
    return AttemptContext(attempt, lines, shown, more, logged)


def _missing(attempt_id: int) -> tuple[str, int]:
    return render_template("ui/attempt_missing.html", attempt_id=attempt_id), 404


@blueprint.get("/attempts/<id:attempt_id>")
def attempt_page(attempt_id: int) -> tuple[str, int]:
    """An attempt: why it failed, its tasks, graph, timeline and logs."""
    try:
        context = read_attempt(attempt_id)
    except NotFound:
        return _missing(attempt_id)
    return render_template("ui/attempt.html", **context.as_template_context()), 200


@blueprint.get("/attempts/<id:attempt_id>/live")
def attempt_live(attempt_id: int) -> tuple[str, int]:
    """The part of the attempt page that changes while it runs (state, failures, tree)."""
    try:
        context = read_attempt(attempt_id)
    except NotFound:
        return _missing(attempt_id)
    return render_template("ui/attempt_live.html", **context.as_template_context()), 200


def task_log_text(attempt_id: int, files: list[LogFile], root: Path | None) -> str:
    """The logs of a task's runs, oldest first: each run's last :data:`LOG_PAGE_BYTES`,
    under a heading when there was more than one run."""
    if root is None:
        return "This server keeps no logs (TICKWORK_LOG_DIR is not set).\n"
    parts = []
    for file in files:
        data, before = _read_part(root, file, LOG_PAGE_BYTES)
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
            files = [f for f in history.list_log_files(conn, attempt_id) if f.task_id == task_id]
    except NotFound:
        return Response(f"No attempt {attempt_id}.\n", 404, content_type=TEXT_TYPE)
    text = task_log_text(attempt_id, files, _log_root())
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
