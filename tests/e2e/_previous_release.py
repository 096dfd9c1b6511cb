"""The release before task logs moved into the store, checked out and installed beside this
checkout, and its services run as processes of their own.

:func:`previous_release_commit` finds it in the repository's history: the parent of the
first commit that added the migration of the log chunk table, the last release whose
executors wrote task logs as files under ``TICKWORK_LOG_DIR`` (schema revision 0010).
:func:`install_release` checks it out with ``git worktree add --detach`` and installs it
(``pip install -c constraints.txt -e``) into a virtualenv of its own;
:func:`remove_release` removes both. :class:`ReleaseServices` starts that release's
executors and agents on a cluster's PostgreSQL database and Redis prefix, with the
settings of tests/fault/_cluster.py, each process in a session of its own that leaving
the context kills, and :meth:`ReleaseServices.submit` creates an attempt with that
release's own code, as its ``tickwork run`` would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.fault._cluster import (
    HEARTBEAT_SECONDS,
    LEASE_TTL_SECONDS,
    MAX_LOST_LEASES,
    REAPER_SECONDS,
    START_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    Service,
    base_environment,
    processes_in_session,
    tail,
)
from tests.support.servers import find_free_port
from tests.support.waiting import wait_until

LOG_CHUNKS_MIGRATION = "shared/store/migrations/versions/0011_log_chunks.py"
"""The migration that gave the store its log chunk table: the release before it kept
task logs as files."""
GIT_TIMEOUT_SECONDS = 60.0
INSTALL_TIMEOUT_SECONDS = 240.0
"""Bound of creating the release's virtualenv and installing it (pip's cache makes it
take seconds after the first time)."""
COMMAND_TIMEOUT_SECONDS = 30.0
"""Bound of a one-shot command of the release (``tickwork db upgrade``, a submission)."""
NO_INDEX_MARKS = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "Failed to establish a new connection",
    "Network is unreachable",
    "Temporary failure in name resolution",
)
"""What pip says when it cannot reach a package index."""

SUBMIT_SCRIPT = """
import json, sys
from pathlib import Path
from services.embedded import RunRequest, create_run_attempt
from shared.clock import utc_now
from shared.dsl.parser import parse_workflow_text
from shared.store.engine import create_store_engine

job = json.load(sys.stdin)
project_dir = Path(job["project_dir"])
definition = parse_workflow_text(job["text"], job["name"] + ".dig", project_dir)
now = utc_now()
request = RunRequest(
    definition=definition,
    project_dir=project_dir,
    state_dir=Path(job["state_dir"]),
    database_url=job["database_url"],
    params={},
    session_time=now.replace(microsecond=0),
)
engine = create_store_engine(job["database_url"])
with engine.begin() as conn:
    print(create_run_attempt(conn, request, now).attempt_id)
engine.dispose()
"""
"""Stores a workflow and creates its attempt with the release's own code (JSON on stdin:
name, text, project_dir, state_dir, database_url); prints the attempt's id."""


class ReleaseUnavailable(Exception):
    """Raised when the release cannot be built here (no history, no package index)."""


@dataclass(frozen=True)
class Release:
    """A release checked out in ``tree`` and installed in the virtualenv ``venv``."""

    commit: str
    tree: Path
    venv: Path

    @classmethod
    def under(cls, commit: str, directory: Path) -> Release:
        """The release of ``commit`` in ``directory/tree`` and ``directory/venv``."""
        return cls(commit, directory / "tree", directory / "venv")

    @property
    def tickwork(self) -> list[str]:
        return [str(self.venv / "bin" / "tickwork")]

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_SECONDS,
        check=False,
    )


def previous_release_commit(repo: Path) -> str:
    """The commit of the last release that kept task logs as files: the parent of the
    first commit that added :data:`LOG_CHUNKS_MIGRATION`. ReleaseUnavailable without
    that history (not a clone, or a shallow one)."""
    added = _git(repo, "log", "--diff-filter=A", "--format=%H", "--", LOG_CHUNKS_MIGRATION)
    commits = added.stdout.split()
    if added.returncode != 0 or not commits:
        raise ReleaseUnavailable(f"no git history of {LOG_CHUNKS_MIGRATION} in {repo}")
    parent = _git(repo, "rev-parse", "--verify", "--quiet", f"{commits[-1]}^")
    if parent.returncode != 0:
        raise ReleaseUnavailable(f"the parent of {commits[-1][:12]} is not in the clone")
    return parent.stdout.strip()


def install_release(repo: Path, release: Release) -> None:
    """Check the release's commit out in its tree and install it into its virtualenv;
    ReleaseUnavailable if pip cannot reach a package index."""
    added = _git(repo, "worktree", "add", "--detach", str(release.tree), release.commit)
    if added.returncode != 0:
        raise AssertionError(f"git worktree add failed:\n{added.stderr}")
    # This Python's pip installs into the new virtualenv (pip --python), which so needs
    # no pip of its own; modules are compiled when the services first import them.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(release.venv)],
        check=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
    )
    constraints = release.tree / "constraints.txt"
    pip = [sys.executable, "-m", "pip", "--python", release.python, "install", "-q"]
    installed = subprocess.run(
        [*pip, "--no-compile", "-c", str(constraints), "-e", "."],
        cwd=release.tree,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
        check=False,
    )
    if installed.returncode != 0:
        said = installed.stdout + installed.stderr
        commit = release.commit[:12]
        if any(mark in said for mark in NO_INDEX_MARKS):
            raise ReleaseUnavailable(f"pip cannot install {commit}: {said[-600:]}")
        raise AssertionError(f"pip install of {commit} failed:\n{said[-3000:]}")


def remove_release(repo: Path, release: Release) -> None:
    """Remove the release's worktree (and its entry in the repository) and virtualenv."""
    if release.tree.exists():
        _git(repo, "worktree", "remove", "--force", str(release.tree))
    shutil.rmtree(release.tree, ignore_errors=True)
    shutil.rmtree(release.venv, ignore_errors=True)


@dataclass
class ReleaseServices:
    """Executors and agents of ``release`` on one store and Redis prefix, like the
    cluster of tests/fault/_cluster.py; each process's output goes to
    ``<root>/logs/<name>.log``."""

    release: Release
    database_url: str
    redis_url: str
    redis_prefix: str
    root: Path
    services: dict[str, Service] = field(default_factory=dict)

    def __enter__(self) -> ReleaseServices:
        for directory in ("logs", "state", "work"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill_everything()

    def kill_everything(self) -> None:
        """SIGKILL every process of every session started here, then reap the services
        (a leader reaped already whose pid exists again is somebody else's)."""
        for service in self.services.values():
            if service.process.poll() is not None and Path(f"/proc/{service.pid}").exists():
                continue
            for pid in processes_in_session(service.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for service in self.services.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def environment(self, **extra: str) -> dict[str, str]:
        """The cluster's settings (short leases), and ``extra``."""
        return {
            **base_environment(),
            "TICKWORK_REDIS_URL": self.redis_url,
            "TICKWORK_REDIS_PREFIX": self.redis_prefix,
            "TICKWORK_LEASE_TTL_SECONDS": str(LEASE_TTL_SECONDS),
            "TICKWORK_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
            "TICKWORK_REAPER_SECONDS": str(REAPER_SECONDS),
            "TICKWORK_MAX_LOST_LEASES": str(MAX_LOST_LEASES),
            "TICKWORK_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> Service:
        port = find_free_port()
        log_path = self.root / "logs" / f"{name}.log"
        workdir = self.root / "work" / name
        workdir.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [*self.release.tickwork, *args, "--metrics-port", str(port)],
                cwd=workdir,
                env={**env, "TICKWORK_METRICS_PORT": str(port)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        service = Service(name, process, log_path, port)
        self.services[name] = service
        return service

    def start_executor(self, name: str, log_dir: Path) -> Service:
        """Start the release's ``tickwork executor``, writing task logs under ``log_dir``."""
        env = self.environment(
            TICKWORK_DATABASE_URL=self.database_url, TICKWORK_LOG_DIR=str(log_dir)
        )
        return self._start(name, ["executor", "--log-dir", str(log_dir)], env)

    def start_agent(self, name: str, *, concurrency: int, grace_seconds: float) -> Service:
        """Start the release's ``tickwork agent`` (no database URL in its environment)."""
        work_dir = self.root / "state" / name
        work_dir.mkdir(parents=True, exist_ok=True)
        args = ["agent", "--concurrency", str(concurrency), "--grace", f"{grace_seconds:g}"]
        return self._start(name, args, self.environment(TICKWORK_AGENT_WORK_DIR=str(work_dir)))

    def wait_ready(self, *services: Service) -> None:
        """Wait until each service answers on its metrics port."""
        for service in services:
            wait_until(
                f"{service.name} answers on its metrics port",
                lambda s=service: s.get("/metrics") is not None or not s.is_alive(),
                START_TIMEOUT_SECONDS,
                poll=0.05,
            )
            assert service.is_alive(), f"{service.name} exited:\n{tail(service.log_path)}"

    def tickwork(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A one-shot ``tickwork ARGS`` of the release with the store's URL, bounded."""
        return subprocess.run(
            [*self.release.tickwork, *args],
            cwd=self.root / "work",
            env=self.environment(TICKWORK_DATABASE_URL=self.database_url),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )

    def submit(self, name: str, text: str, project_dir: Path) -> int:
        """Store workflow ``name`` (its ``.dig`` text, of ``project_dir``) and create an
        attempt with the release's code; its id."""
        job = {
            "name": name,
            "text": text,
            "project_dir": str(project_dir),
            "state_dir": str(self.root / "state"),
            "database_url": self.database_url,
        }
        done = subprocess.run(
            [self.release.python, "-c", SUBMIT_SCRIPT],
            cwd=self.release.tree,  # its own code, whatever the path says
            env=self.environment(),
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    def explain(self) -> str:
        """Every process's status and log tail."""
        parts = []
        for service in self.services.values():
            code = service.process.poll()
            status = "running" if code is None else f"exit {code}"
            parts.append(
                f"--- {service.name} (pid {service.pid}, {status})\n{tail(service.log_path)}"
            )
        return "\n".join(parts)
