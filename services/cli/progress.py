"""Showing a run's progress: a live table on a terminal, plain lines when piped."""

from __future__ import annotations

import queue
import sys
import time
from collections import Counter
from datetime import datetime
from typing import IO, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from sqlalchemy import Engine

from shared.dispatch.messages import TaskEvent, TaskFinished
from shared.domain.states import TIMED_TASK_STATES, TaskState
from shared.store.engine import read_only
from shared.store.tasks import TaskRow, list_attempt_tasks

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


class RunDisplay(Protocol):
    """Receives progress while a run goes on; ``close`` prints nothing more."""

    def on_event(self, event: TaskEvent) -> None: ...

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None: ...

    def close(self) -> None: ...


class _Base:
    def __init__(self) -> None:
        self._output: queue.SimpleQueue[TaskFinished] = queue.SimpleQueue()
        self._last_refresh = 0.0
        self._names: dict[int, str] = {}

    def on_event(self, event: TaskEvent) -> None:
        if isinstance(event, TaskFinished) and event.output_lines:
            self._output.put(event)

    def _read(self, engine: Engine, attempt_id: int, final: bool) -> list[TaskRow] | None:
        """The attempt's tasks, at most every REFRESH_SECONDS (always when final)."""
        if not (self._due() or final):
            return None
        with read_only(engine) as conn:
            rows = list_attempt_tasks(conn, attempt_id)
        self._names.update({r.id: r.full_name for r in rows})
        return rows

    def _output_lines(self) -> list[tuple[str, str]]:
        """``(task name, line)`` of the output that finished tasks reported since last time."""
        lines: list[tuple[str, str]] = []
        while not self._output.empty():
            finished = self._output.get_nowait()
            name = self._names.get(finished.task_id, str(finished.task_id))
            lines.extend((name, line) for line in finished.output_lines)
        return lines

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self._last_refresh < REFRESH_SECONDS:
            return False
        self._last_refresh = now
        return True


class PlainDisplay(_Base):
    """One line per state change and per output line: for logs and pipes."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stdout
        self._states: dict[int, TaskState] = {}

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None:
        rows = self._read(engine, attempt_id, final)
        if rows is None:
            return
        changed = [r for r in rows if self._states.get(r.id) is not r.state]
        for row in sorted(changed, key=lambda r: (r.updated_at, r.id)):  # in the order seen
            self._states[row.id] = row.state
            if row.state is not TaskState.BLOCKED:
                self.stream.write(f"{_clock()} {row.full_name} {_state(row)}\n")
        for name, line in self._output_lines():
            self.stream.write(f"{_clock()} {name}: {line}\n")
        self.stream.flush()

    def close(self) -> None:
        self.stream.flush()


class LiveDisplay(_Base):
    """A live table of the tasks that run now, with counts by state."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.console = console or Console()
        self._live = Live(console=self.console, refresh_per_second=8, transient=False)
        self._live.start()

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None:
        rows = self._read(engine, attempt_id, final)
        if rows is None:
            return
        for name, line in self._output_lines():
            self.console.print(Text(f"{name}: ", style="dim") + Text(line))
        self._live.update(_render(rows))

    def close(self) -> None:
        self._live.stop()


class QuietDisplay(_Base):
    """Shows nothing (benchmarks, ``--quiet``), and keeps nothing of what it is told."""

    def on_event(self, event: TaskEvent) -> None:
        return None

    def refresh(self, engine: Engine, attempt_id: int, final: bool = False) -> None:
        return None

    def close(self) -> None:
        return None


def _render(rows: list[TaskRow]) -> Group:
    counts = Counter(r.state for r in rows if not r.is_group)
    summary = "  ".join(
        f"[{STATE_STYLES.get(s, 'white')}]{s.value}: {n}[/]" for s, n in sorted(counts.items())
    )
    shown = [r for r in rows if r.state not in (TaskState.BLOCKED, TaskState.SUCCESS)]
    done = [r for r in rows if r.state is TaskState.SUCCESS and r.finished_at is not None]
    shown += sorted(done, key=lambda r: (r.finished_at, r.id))[-3:]  # the latest to end
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("task")
    table.add_column("state")
    table.add_column("retries", justify="right")
    for row in shown[-LIVE_ROWS:]:
        style = STATE_STYLES.get(row.state, "white")
        # Text, not a markup string: a task named "+load[/x]" is shown as it is.
        table.add_row(Text(row.full_name), Text(_state(row), style=style), str(row.retry_count))
    return Group(table, Text.from_markup(summary or "starting"))


def _clock() -> str:
    return time.strftime("%H:%M:%S")


def _state(row: TaskRow) -> str:
    """The state as shown: a waiting task says until when (local time, like the clock)."""
    if row.state not in TIMED_TASK_STATES or row.not_before is None:
        return row.state.value
    until = row.not_before.astimezone()
    today = until.date() == datetime.now(until.tzinfo).date()
    return f"{row.state.value} until {until.strftime('%H:%M:%S' if today else '%Y-%m-%d %H:%M:%S')}"


def make_display(*, quiet: bool = False, stream: IO[str] | None = None) -> RunDisplay:
    """A live table on a terminal, plain lines otherwise, nothing when quiet."""
    if quiet:
        return QuietDisplay()
    out = stream or sys.stdout
    return LiveDisplay() if out.isatty() else PlainDisplay(out)
