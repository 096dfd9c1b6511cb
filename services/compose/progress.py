"""Showing a run's progress: a live table on a terminal, plain lines when piped.

Plain lines follow the task moves the executor reports after each pass, in the order it
made them (a retry included); what the store shows besides (tasks ended by a kill or an
SLA, tasks resumed as done, everything a remote executor did) is read from it.
"""

from __future__ import annotations

import queue
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import IO, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from sqlalchemy import Engine

from tickwork.services.executor.graph import TaskMove
from tickwork.shared.dispatch.messages import TaskEvent, TaskFinished
from tickwork.shared.domain.durations import format_duration
from tickwork.shared.domain.states import TIMED_TASK_STATES, TaskState
from tickwork.shared.store.engine import read_only
from tickwork.shared.store.tasks import TaskRow, list_attempt_tasks

REFRESH_SECONDS = 0.25
STATE_STYLES = {
    TaskState.SUCCESS: "green",
    TaskState.ERROR: "bold red",
    TaskState.RUNNING: "cyan",
    TaskState.QUEUED: "blue",
    TaskState.RETRY_WAITING: "yellow",
    TaskState.DELAYED: "yellow",
    TaskState.CANCELED: "magenta",
    TaskState.PLANNED: "cyan",
}
LIVE_ROWS = 15
"""Rows of the table shown while a run goes on; the table it ends with shows every task."""
UNSHOWN_STATES = (TaskState.BLOCKED, TaskState.READY)
"""Steps inside the executor that a plain line never names."""


class RunDisplay(Protocol):
    """Receives progress while a run goes on; ``close`` prints nothing more."""

    def on_event(self, event: TaskEvent) -> None: ...

    def on_moves(self, moves: Sequence[TaskMove]) -> None: ...

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None: ...

    def close(self) -> None: ...


class _Base:
    def __init__(self) -> None:
        self._finished: queue.SimpleQueue[TaskFinished] = queue.SimpleQueue()
        self._output: dict[int, list[str]] = {}  # task id -> output not shown yet
        self._last_refresh = 0.0
        self._names: dict[int, str] = {}

    def on_event(self, event: TaskEvent) -> None:
        # Called from the threads that run tasks: only queued here, shown by the loop.
        if isinstance(event, TaskFinished) and event.output_lines:
            self._finished.put(event)

    def _read(self, engine: Engine, attempt_id: int, final: bool) -> list[TaskRow] | None:
        """The attempt's tasks, at most every REFRESH_SECONDS (always when final)."""
        if not (self._due() or final):
            return None
        with read_only(engine) as conn:
            rows = list_attempt_tasks(conn, attempt_id)
        self._names.update({r.id: r.full_name for r in rows})
        return rows

    def _collect_output(self) -> None:
        """Take in the output that tasks reported since last time."""
        while not self._finished.empty():
            finished = self._finished.get_nowait()
            self._output.setdefault(finished.task_id, []).extend(finished.output_lines)

    def _take_output(self, task_id: int | None = None) -> list[tuple[str, str]]:
        """``(task name, line)`` of the output not shown yet: of one task, or of all."""
        self._collect_output()
        ids = list(self._output) if task_id is None else [task_id]
        lines: list[tuple[str, str]] = []
        for each in ids:
            name = self._names.get(each, str(each))
            lines.extend((name, line) for line in self._output.pop(each, []))
        return lines

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self._last_refresh < REFRESH_SECONDS:
            return False
        self._last_refresh = now
        return True


class PlainDisplay(_Base):
    """One line per state a task enters and per output line, in the order they happened:
    for logs and pipes."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stdout
        self._states: dict[int, TaskState] = {}

    def on_moves(self, moves: Sequence[TaskMove]) -> None:
        for move in moves:
            self._names[move.task_id] = move.full_name
            if move.state not in (TaskState.QUEUED, TaskState.RUNNING):
                # What a run printed comes before how it ended.
                self._write_output(self._take_output(move.task_id))
            self._states[move.task_id] = move.state
            self.stream.write(f"{_clock(move.at)} {move_line(move)}\n")
        self.stream.flush()

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None:
        rows = self._read(engine, attempt_id, final)
        if rows is None:
            return
        depths = _depths(rows)
        changed = [r for r in rows if self._states.get(r.id) is not r.state]
        for row in sorted(changed, key=lambda r: _seen_order(r, depths[r.id])):
            self._states[row.id] = row.state
            if row.state not in UNSHOWN_STATES:
                self.stream.write(f"{_clock()} {row.full_name} {_state(row)}\n")
        if final:
            self._write_output(self._take_output())
        self.stream.flush()

    def _write_output(self, lines: list[tuple[str, str]]) -> None:
        for name, line in lines:
            self.stream.write(f"{_clock()} {name}: {line}\n")

    def close(self) -> None:
        self._write_output(self._take_output())
        self.stream.flush()


class LiveDisplay(_Base):
    """A live table of the tasks that run now, with counts by state; it ends with a table
    of every task."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.console = console or Console()
        self._rows: list[TaskRow] = []
        self._live = Live(console=self.console, refresh_per_second=8, transient=False)
        self._live.start()

    def on_moves(self, moves: Sequence[TaskMove]) -> None:
        for move in moves:
            if move.state is TaskState.RETRY_WAITING:  # the table shows only the latest state
                self._print_output(self._take_output(move.task_id))
                self.console.print(Text(move_line(move), style=STATE_STYLES[move.state]))

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None:
        rows = self._read(engine, attempt_id, final)
        if rows is None:
            return
        self._rows = rows
        self._print_output(self._take_output())
        self._live.update(render_tasks(rows, LIVE_ROWS))

    def _print_output(self, lines: list[tuple[str, str]]) -> None:
        for name, line in lines:
            self.console.print(Text(f"{name}: ", style="dim") + Text(line))

    def close(self) -> None:
        # Stopping draws the table once more, whole even if taller than the terminal.
        if self._rows:
            self._live.update(render_tasks(self._rows, None), refresh=False)
        self._live.stop()


class QuietDisplay(_Base):
    """Shows nothing (benchmarks, ``--quiet``), and keeps nothing of what it is told."""

    def on_event(self, event: TaskEvent) -> None:
        return None

    def on_moves(self, moves: Sequence[TaskMove]) -> None:
        return None

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None:
        return None

    def close(self) -> None:
        return None


def render_tasks(rows: Sequence[TaskRow], limit: int | None) -> Group:
    """The task table and the counts by state.

    With a ``limit`` (while the run goes on) it shows the tasks that have not ended and
    the latest to succeed, at most ``limit`` rows; without, every task in tree order.
    """
    counts = Counter(r.state for r in rows if not r.is_group)
    summary = "  ".join(
        f"[{STATE_STYLES.get(s, 'white')}]{s.value}: {n}[/]" for s, n in sorted(counts.items())
    )
    if limit is None:
        shown = tree_order(rows)
    else:
        shown = [r for r in rows if r.state not in (TaskState.BLOCKED, TaskState.SUCCESS)]
        done = [r for r in rows if r.state is TaskState.SUCCESS and r.finished_at is not None]
        shown += sorted(done, key=lambda r: (r.finished_at, r.id))[-3:]  # the latest to end
        shown = shown[-limit:]
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("task")
    table.add_column("state")
    table.add_column("retries", justify="right")
    for row in shown:
        style = STATE_STYLES.get(row.state, "white")
        # Text, not a markup string: a task named "+load[/x]" is shown as it is.
        retries = str(row.retry_count) if row.retry_count else ""
        table.add_row(Text(row.full_name), Text(_state(row), style=style), retries)
    return Group(table, Text.from_markup(summary or "starting"))


def tree_order(rows: Sequence[TaskRow]) -> list[TaskRow]:
    """``rows`` with every task after its parent and siblings in definition order."""
    children: dict[int | None, list[TaskRow]] = {}
    for row in rows:
        children.setdefault(row.parent_id, []).append(row)
    known = {row.id for row in rows}
    ordered: list[TaskRow] = []
    pending = sorted(
        (r for r in rows if r.parent_id is None or r.parent_id not in known),
        key=lambda r: (r.position, r.id),
        reverse=True,
    )
    while pending:
        row = pending.pop()
        ordered.append(row)
        pending += sorted(children.get(row.id, []), key=lambda r: (r.position, r.id), reverse=True)
    return ordered


def move_line(move: TaskMove) -> str:
    """A move as a progress line (without the clock): ``+wf+task running``; a retry says
    which run failed, when the next starts and why."""
    if move.state is TaskState.RETRY_WAITING and move.not_before is not None:
        wait = _seconds((move.not_before - move.at).total_seconds())
        runs = f"attempt {move.retry_count} of {move.retry_limit + 1}"
        why = f": {move.message}" if move.message else ""
        return f"{move.full_name} error ({runs}), retrying in {wait}{why}"
    if move.state is TaskState.DELAYED and move.not_before is not None:
        return f"{move.full_name} {move.state.value} until {_local_time(move.not_before)}"
    return f"{move.full_name} {move.state.value}"


def _seconds(seconds: float) -> str:
    if seconds < 60 and seconds != int(seconds):
        return f"{max(seconds, 0.0):.1f}s"
    return format_duration(max(int(seconds), 0))


def _depths(rows: Sequence[TaskRow]) -> dict[int, int]:
    parents = {r.id: r.parent_id for r in rows}
    depths: dict[int, int] = {}
    for row in rows:  # in id order: a parent was created before its children
        parent = parents[row.id]
        depths[row.id] = depths.get(parent, -1) + 1 if parent is not None else 0
    return depths


def _seen_order(row: TaskRow, depth: int) -> tuple[datetime, bool, int, int]:
    """Changes seen in the store, as they most likely happened: by time; at one time,
    what started before what ended, a parent starting before its children and ending
    after them."""
    ended = row.state.is_terminal
    return (row.updated_at, ended, -depth if ended else depth, row.id)


def _clock(at: datetime | None = None) -> str:
    return (at.astimezone() if at is not None else datetime.now()).strftime("%H:%M:%S")


def _local_time(at: datetime) -> str:
    """A time in local time, like the clock; with its date unless today."""
    local = at.astimezone()
    today = local.date() == datetime.now(local.tzinfo).date()
    return local.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S")


def _state(row: TaskRow) -> str:
    """The state as shown: a waiting task says until when."""
    if row.state not in TIMED_TASK_STATES or row.not_before is None:
        return row.state.value
    return f"{row.state.value} until {_local_time(row.not_before)}"


def make_display(*, quiet: bool = False, stream: IO[str] | None = None) -> RunDisplay:
    """A live table on a terminal, plain lines otherwise, nothing when quiet."""
    if quiet:
        return QuietDisplay()
    out = stream or sys.stdout
    return LiveDisplay() if out.isatty() else PlainDisplay(out)
