"""Running ``tickwork run`` as a real subprocess in a throwaway project, and reading what it left.

Every run is bounded by ``RUN_TIMEOUT_SECONDS``, gets its own state directory, and sees
no ``TICKWORK_*`` variable of the environment the tests run in unless a test passes it.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.files import write_under

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "examples"
RUN_TIMEOUT_SECONDS = 60
NOTES_DIR = Path(".tickwork") / "out"
"""Where the examples' tasks note that they ran, relative to the project directory."""

PROGRESS_LINE = re.compile(
    r"^\d\d:\d\d:\d\d (?P<task>\+\S+) (?P<state>[a-z_]+)"
    r"(?: until (?P<until>[\d: -]+)"
    r"| \(attempt (?P<run>\d+) of (?P<runs>\d+)\), retrying in (?P<wait>[\w.]+)"
    r"(?:: (?P<why>.*))?)?$"
)
"""A task's new state; a waiting one (delayed) says until when, a failed run that will
be retried (``error (attempt 1 of 3), retrying in 2s: why``) which run it was."""
OUTPUT_LINE = re.compile(r"^\d\d:\d\d:\d\d (?P<task>\+\S+): (?P<text>.*)$")
PROBLEM_LINE = re.compile(r"^(?P<file>[^:\s]+\.dig):(?P<line>\d+): (?P<message>.+)$")
ATTEMPT_LINE = re.compile(r"^session (?P<session>\S+)  attempt (?P<attempt>\d+): (?P<state>\w+)$")


def sigint_as_on_a_terminal() -> None:
    """In a child about to run a command (a ``preexec_fn``): SIGINT back to its default. A
    shell that starts a background job (a CI runner's ``cmd &``) has the job ignore SIGINT,
    and its children inherit that; a user's Ctrl-C at a terminal is not ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tickwork_command() -> list[str]:
    """The installed ``tickwork`` script beside this Python, else the module it runs."""
    script = Path(sys.executable).with_name("tickwork")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tickwork.services.compose"]


@dataclass(frozen=True)
class Run:
    """What one ``tickwork run`` process did."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> str:
        """The summary printed after the progress lines (from ``session ...`` on)."""
        lines = self.stdout.splitlines()
        starts = [i for i, line in enumerate(lines) if ATTEMPT_LINE.match(line)]
        assert starts, f"no summary in the output:\n{self.stdout}\n{self.stderr}"
        return "\n".join(lines[starts[-1] :])

    @property
    def attempt_id(self) -> int:
        """The id of the attempt the summary names."""
        match = ATTEMPT_LINE.match(self.summary.splitlines()[0])
        assert match is not None
        return int(match["attempt"])

    def progress(self) -> list[tuple[str, str]]:
        """Plain progress lines as (task, state), in the order printed."""
        found = (PROGRESS_LINE.match(line) for line in self.stdout.splitlines())
        return [(m["task"], m["state"]) for m in found if m]

    def output(self) -> list[tuple[str, str]]:
        """Task output lines as (task, text), in the order printed."""
        found = (OUTPUT_LINE.match(line) for line in self.stdout.splitlines())
        return [(m["task"], m["text"]) for m in found if m]

    def explain(self) -> str:
        """Everything the process printed, for assertion messages."""
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@dataclass(frozen=True)
class Project:
    """A project directory and the state directory its runs use, both throwaway."""

    root: Path
    state_dir: Path

    @classmethod
    def empty(cls, tmp_path: Path) -> Project:
        """A new, empty project under ``tmp_path``."""
        root = tmp_path / "project"
        root.mkdir()
        return cls(root, tmp_path / "state")

    @classmethod
    def copy_of_examples(cls, tmp_path: Path) -> Project:
        """A copy of examples/ (without anything earlier runs left there) under ``tmp_path``."""
        root = tmp_path / "examples"
        ignored = shutil.ignore_patterns(".tickwork", "__pycache__")
        shutil.copytree(EXAMPLES_DIR, root, ignore=ignored)
        return cls(root, tmp_path / "state")

    @property
    def database_path(self) -> Path:
        """The SQLite store of runs that were given no database URL."""
        return self.state_dir / "tickwork.db"

    def write(self, name: str, text: str) -> Path:
        """Write a project file (dedented) and return its path."""
        return write_under(self.root, name, textwrap.dedent(text).lstrip())

    def read(self, name: str) -> str:
        """A file tasks wrote into the project directory."""
        return (self.root / name).read_text(encoding="utf-8")

    def lines(self, name: str) -> list[str]:
        """The lines of a project file; none if it does not exist."""
        path = self.root / name
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def notes(self, log: str) -> list[str]:
        """What the examples' tasks noted in ``.tickwork/out/<log>.log``, in order."""
        return self.lines(str(NOTES_DIR / f"{log}.log"))

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment without ``TICKWORK_*``, plus the state dir and ``env``."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        environ["TICKWORK_STATE_DIR"] = str(self.state_dir)
        environ.update(env or {})
        return environ

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> Run:
        """``tickwork run ARGS`` in the project directory; its output piped, so plain."""
        completed = subprocess.run(
            [*tickwork_command(), "run", *args],
            cwd=self.root,
            env=self.environment(env),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
        )
        return Run(completed.returncode, completed.stdout, completed.stderr)

    def check(self, *args: str) -> Run:
        """``tickwork check ARGS`` in the project directory."""
        completed = subprocess.run(
            [*tickwork_command(), "check", *args],
            cwd=self.root,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
        )
        return Run(completed.returncode, completed.stdout, completed.stderr)

    def run_on_terminal(self, *args: str, columns: int = 120, lines: int = 12) -> Run:
        """``tickwork run ARGS`` with its output on a pseudo-terminal of ``columns`` x
        ``lines``; what it printed, control codes included, is the run's stdout."""
        env = {"COLUMNS": str(columns), "LINES": str(lines), "TERM": "xterm-256color"}
        leader, follower = pty.openpty()
        with subprocess.Popen(
            [*tickwork_command(), "run", *args],
            cwd=self.root,
            env=self.environment(env),
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=subprocess.PIPE,
        ) as process:
            os.close(follower)
            try:
                output = _read_until_closed(leader, RUN_TIMEOUT_SECONDS)
            finally:
                os.close(leader)
            stderr = process.stderr.read() if process.stderr else b""
            exit_code = process.wait(timeout=RUN_TIMEOUT_SECONDS)
        return Run(exit_code, output.decode(errors="replace"), stderr.decode(errors="replace"))

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``tickwork run ARGS`` in the background, with SIGINT handled as on a terminal."""
        return subprocess.Popen(
            [*tickwork_command(), "run", *args],
            cwd=self.root,
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=sigint_as_on_a_terminal,
        )

    def wait_for_line(self, name: str, line: str, timeout_seconds: float) -> None:
        """Wait until the project file ``name`` has ``line``; fail after ``timeout_seconds``."""
        deadline = time.monotonic() + timeout_seconds
        while line not in self.lines(name):
            assert time.monotonic() < deadline, f"{name} never had {line!r}"
            time.sleep(0.05)

    def count_rows(self, table: str) -> int:
        """Rows of ``table`` in the SQLite store; 0 if the store was never created."""
        if not self.database_path.exists():
            return 0
        with contextlib.closing(sqlite3.connect(self.database_path)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
            if table not in tables:
                return 0
            (count,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(count)


def _read_until_closed(fd: int, timeout_seconds: float) -> bytes:
    """Everything written to the pseudo-terminal ``fd`` until its last writer closed it."""
    deadline = time.monotonic() + timeout_seconds
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no end of output in {timeout_seconds}s: {b''.join(chunks)!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other end is closed
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def max_running_at_once(notes: Iterable[str]) -> int:
    """The most tasks between their ``start X`` and ``end X`` notes at any one time.

    A task notes ``start`` after it started and ``end`` before it ended, so this never
    counts more tasks than really ran at once.
    """
    running: set[str] = set()
    most = 0
    for note in notes:
        event, _, name = note.partition(" ")
        if event == "start":
            running.add(name)
            most = max(most, len(running))
        elif event == "end":
            running.discard(name)
    return most
