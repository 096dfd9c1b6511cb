"""Schedules pushed into a throwaway store, and ``tickwork`` scheduler commands run against it.

Every command and every wait is bounded; scheduler processes write their logs to files
(a pipe nobody reads would fill up and stall them) and are killed by
:func:`scheduler_processes` however the test ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

from tests.e2e._run import tickwork_command
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store.emission import database_now
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.migrate import upgrade_database
from tickwork.shared.store.projects import (
    ensure_project,
    ensure_revision,
    ensure_workflow_definition,
)
from tickwork.shared.store.schedules import upsert_schedule
from tickwork.shared.store.tables import attempts, projects, sessions

COMMAND_TIMEOUT_SECONDS = 30
STOP_TIMEOUT_SECONDS = 5.0
"""How long a scheduler may take to exit after SIGTERM."""


def environment(database_url: str | None = None) -> dict[str, str]:
    """This process's environment without ``TICKWORK_*``, plus the store's URL if given."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    if database_url is not None:
        environ["TICKWORK_DATABASE_URL"] = database_url
    return environ


@dataclass(frozen=True)
class Command:
    """What one ``tickwork`` command did."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        """The lines printed on stdout."""
        return self.stdout.splitlines()

    def explain(self) -> str:
        """Everything the command printed, for assertion messages."""
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def tickwork(
    *args: str,
    database_url: str | None = None,
    endpoint: str | None = None,
    cwd: Path | None = None,
) -> Command:
    """``tickwork ARGS``, bounded in time; the store's URL (for the server commands) and
    the API's (for the client commands) come from the environment."""
    environ = environment(database_url)
    if endpoint is not None:
        environ["TICKWORK_ENDPOINT"] = endpoint
        environ["TICKWORK_CONFIG"] = os.devnull  # never the user's own client config
    completed = subprocess.run(
        [*tickwork_command(), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    return Command(completed.returncode, completed.stdout, completed.stderr)


def push_workflows(
    database_url: str,
    project: str,
    workflows: Mapping[str, str],
    *,
    project_dir: Path,
    now: datetime | None = None,
) -> datetime:
    """Store ``workflows`` (name -> text) as one revision of ``project``, with their schedules.

    The schedules count as created at ``now`` (default: the database's clock), so a ``now``
    in the past stands for a scheduler that has been down since then. Returns that time.
    """
    engine = create_store_engine(database_url)
    try:
        upgrade_database(engine)
        with engine.begin() as conn:
            now = now or database_now(conn) or utc_now()
            project_id = ensure_project(conn, project, now)
            revision_id = ensure_revision(conn, project_id, "r1", {}, now)
            for name, text in workflows.items():
                definition = parse_workflow_text(
                    textwrap.dedent(text).lstrip(), f"{name}.dig", project_dir
                )
                definition_id = ensure_workflow_definition(conn, revision_id, definition)
                upsert_schedule(
                    conn,
                    project_id=project_id,
                    definition_id=definition_id,
                    definition=definition,
                    now=now,
                )
    finally:
        engine.dispose()
    return now


@dataclass(frozen=True)
class StoredSession:
    """A session and the states of its attempts, oldest first."""

    session_time: datetime
    attempt_states: tuple[str, ...]


def stored_sessions(database_url: str, project: str) -> dict[str, list[StoredSession]]:
    """Every session of ``project`` by workflow name, in session-time order."""
    query = (
        sa.select(sessions.c.workflow_name, sessions.c.session_time, attempts.c.state)
        .select_from(sessions.join(projects).outerjoin(attempts))
        .where(projects.c.name == project)
        .order_by(sessions.c.workflow_name, sessions.c.session_time, attempts.c.id)
    )
    states: dict[tuple[str, datetime], list[str]] = defaultdict(list)
    engine = create_store_engine(database_url)
    try:
        with engine.connect() as conn:
            for workflow, session_time, state in conn.execute(query):
                states[(workflow, session_time)].extend([state] if state else [])
    finally:
        engine.dispose()
    found: dict[str, list[StoredSession]] = defaultdict(list)
    for (workflow, session_time), attempt_states in states.items():
        found[workflow].append(StoredSession(session_time, tuple(attempt_states)))
    return dict(found)


def count_sessions(database_url: str, project: str) -> int:
    """How many sessions ``project`` has."""
    return sum(len(found) for found in stored_sessions(database_url, project).values())


class SchedulerProcesses:
    """``tickwork scheduler`` processes on one store, each logging to its own file."""

    def __init__(self, database_url: str, log_dir: Path) -> None:
        self.database_url = database_url
        self.log_dir = log_dir
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> subprocess.Popen[bytes]:
        """Start a scheduler whose output goes to ``<log_dir>/<name>.log``."""
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*tickwork_command(), "scheduler", "--database-url", self.database_url],
                env=environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started.append(process)
        return process

    def log(self, name: str) -> str:
        """What the scheduler started as ``name`` printed so far."""
        return (self.log_dir / f"{name}.log").read_text(encoding="utf-8", errors="replace")

    def terminate(self, process: subprocess.Popen[bytes]) -> int:
        """SIGTERM ``process`` and return its exit code; fails if it outlives the bound."""
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def kill_all(self) -> None:
        """SIGKILL every process still running (and reap it)."""
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_SECONDS)


@contextmanager
def scheduler_processes(database_url: str, log_dir: Path) -> Iterator[SchedulerProcesses]:
    """Scheduler processes that are all killed on the way out, whatever happened."""
    processes = SchedulerProcesses(database_url, log_dir)
    try:
        yield processes
    finally:
        processes.kill_all()
