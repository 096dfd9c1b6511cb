"""A distributed tickwork cluster of real processes for fault tests, and a ledger of task runs.

:class:`Cluster` starts ``tickwork executor`` and ``tickwork agent`` processes against the
test's PostgreSQL database and Redis keyspace (``redis_prefix``), with short leases (TTL 3 s,
heartbeat 1 s, reaper 1 s) so that a lost agent is noticed within seconds. Only the
executor gets ``TICKWORK_DATABASE_URL``; agents reach nothing but Redis.

- Every process runs in its own session (``start_new_session=True``): its pid is its
  process group and session id, so a test can stop, continue or kill an agent with all
  its pool workers at once (``os.killpg``). Operator commands lead process groups of their
  own inside that session: a signal to the agent's group does not reach them.
- Each process writes its output to ``<tmp>/logs/<name>.log``; :meth:`Cluster.explain`
  shows the tails of all of them (and the ledger) for assertion messages.
- However a test ends, leaving the context kills every process of every session it started
  (orphaned task commands included) and reaps what it started.
- Results the executor applied are read from the store: it ends the ``task_logs`` row of
  each task and lease token whose result it applied (:meth:`Cluster.applied_results`).

Work is submitted directly to the store (there is no REST API yet) with
:func:`tickwork.services.compose.embedded.create_run_attempt`; the executor picks the attempt up.

The ledger (``<project>/ledger.txt``) is how a test sees who ran what: a task built by
:meth:`Ledger.task` appends ``start <task> <lease token> <shell pid> <shell parent pid>``
when it starts and the same with ``end`` when it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import TracebackType

import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from tests.e2e._run import tickwork_command
from tests.support.servers import RedisAddress, RespClient, find_free_port
from tests.support.waiting import wait_until
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.states import TaskState
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.tables import attempts, task_logs, tasks
from tickwork.shared.store.tasks import TaskRow, list_attempt_tasks

LEASE_TTL_SECONDS = 3
HEARTBEAT_SECONDS = 1
REAPER_SECONDS = 1
MAX_LOST_LEASES = 3

START_TIMEOUT_SECONDS = 20.0
"""How long a service may take to answer on its metrics port after it was started."""
STOP_TIMEOUT_SECONDS = 10.0
"""How long a process may take to exit after SIGKILL (or to be reaped)."""
COMMAND_TIMEOUT_SECONDS = 20.0
"""Bound of a one-shot ``tickwork`` command such as ``tickwork kill``."""
METRICS_TIMEOUT_SECONDS = 2.0
LOG_TAIL_LINES = 40

DONE_ATTEMPT_STATES = frozenset({"success", "error", "killed", "canceled"})
"""Attempt states after which nothing runs any more (stored values)."""


def base_environment() -> dict[str, str]:
    """This process's environment without any ``TICKWORK_*`` variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}


def literal(command: str) -> str:
    """``command`` with every ``$`` doubled: the workflow renders it back as written."""
    return command.replace("$", "$$")


def workflow_text(tasks: Mapping[str, str], *, parallel: bool = False) -> str:
    """A workflow of ``sh>`` tasks (name -> shell command, taken literally), in order.

    With ``parallel`` the tasks are children of one ``_parallel: true`` group ``+all``.
    """
    lines: list[str] = []
    indent = ""
    if parallel:
        lines += ["+all:", "  _parallel: true"]
        indent = "  "
    for name, command in tasks.items():
        lines += [f"{indent}+{name}:", f"{indent}  sh>: {json.dumps(literal(command))}"]
    return "\n".join(lines) + "\n"


def session_of(pid: int) -> int | None:
    """The session id of process ``pid``; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # Fields after the command name, which is in parentheses and may hold anything.
    fields = stat.rpartition(")")[2].split()
    return int(fields[3])


def process_state(pid: int) -> str | None:
    """The one-letter state of process ``pid`` (``Z`` for a zombie); None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[0]


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (dead, waiting to be reaped)."""
    state = process_state(pid)
    return state is not None and state not in ("Z", "X")


def command_line(pid: int) -> list[str]:
    """The argv of process ``pid``; empty once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def processes_in_session(session: int) -> list[int]:
    """Pids of every live process whose session id is ``session``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and session_of(int(entry.name)) == session:
            found.append(int(entry.name))
    return found


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a text file; a note if it does not exist."""
    if not path.exists():
        return f"({path} does not exist)"
    text = path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


WORKER = "$(awk '/^PPid:/ {print $2}' /proc/$PPID/status)"
"""Shell text for the pid of the agent's worker process running a task: the parent of the
task's supervisor, which is the parent of the task's shell (``$PPID``)."""


@dataclass(frozen=True)
class LedgerEntry:
    """One line a task appended to the ledger."""

    event: str  # "start" or "end"
    task: str
    token: int
    pid: int  # the task's shell ($$)
    worker: int  # the agent process that ran the task: the parent of its supervisor


@dataclass(frozen=True)
class Ledger:
    """The file tasks append ``start``/``end`` lines to, and the commands that do so."""

    path: Path

    def note(self, event: str, task: str) -> str:
        """Shell text that appends ``<event> <task> <token> <pid> <worker>`` to the ledger
        (the shell's parent, ``$PPID``, is the supervisor that the agent's worker started)."""
        line = f"{event} {task} $TICKWORK_LEASE_TOKEN $$ {WORKER}"
        return f'echo "{line}" >> {shlex.quote(str(self.path))}'

    def task(self, name: str, *, sleep_seconds: float = 0.0, middle: str = "") -> str:
        """A command that notes ``start``, runs ``middle``, sleeps, then notes ``end``."""
        parts = [self.note("start", name)]
        if middle:
            parts.append(middle)
        if sleep_seconds:
            parts.append(f"sleep {sleep_seconds:g}")
        parts.append(self.note("end", name))
        return " && ".join(parts)

    def entries(self, task: str | None = None, event: str | None = None) -> list[LedgerEntry]:
        """Complete lines so far, in order; only ``task``'s / ``event``'s if given."""
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split()
            if len(parts) != 5 or not all(p.isdigit() for p in parts[2:]):
                continue  # a line still being written, or not ours
            entry = LedgerEntry(parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
            if (task is None or entry.task == task) and (event is None or entry.event == event):
                found.append(entry)
        return found

    def starts(self, task: str | None = None) -> list[LedgerEntry]:
        return self.entries(task, "start")

    def ends(self, task: str | None = None) -> list[LedgerEntry]:
        return self.entries(task, "end")

    def text(self) -> str:
        """The whole ledger, for assertion messages."""
        return self.path.read_text(encoding="utf-8") if self.path.exists() else "(empty)"


@dataclass
class Service:
    """One started ``tickwork`` process: its own session, log file and metrics port."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int

    @property
    def pid(self) -> int:
        """The process id, which is also its process group and session id."""
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def metrics_text(self) -> str | None:
        """The Prometheus text of ``/metrics``; None if the endpoint does not answer."""
        return self.get("/metrics")

    def get(self, path: str) -> str | None:
        """The body of ``GET path`` on the service's port; None unless it answers 200."""
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_SECONDS) as response:
                body: bytes = response.read()
        except (OSError, urllib.error.URLError):
            return None
        return body.decode("utf-8", errors="replace")

    def metric(self, sample: str, **labels: str) -> float:
        """The sum of the samples named ``sample`` whose labels include ``labels``.

        0 when there is no such sample yet; fails when the endpoint does not answer.
        """
        text = self.metrics_text()
        assert text is not None, f"{self.name}: /metrics on port {self.metrics_port} is down"
        total = 0.0
        for family in text_string_to_metric_families(text):
            for found in family.samples:
                if found.name == sample and all(
                    found.labels.get(k) == v for k, v in labels.items()
                ):
                    total += found.value
        return total

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the process group: the agent and its pool workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def wait_exit(self, timeout_seconds: float) -> int:
        """Wait for the process to exit; its exit code. Fails after ``timeout_seconds``."""
        try:
            return self.process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) still running after {timeout_seconds}s:\n"
                f"{tail(self.log_path)}"
            ) from None


@dataclass
class Cluster:
    """An executor and agents on one store and Redis prefix; see the module docstring."""

    database_url: str
    redis_url: str
    redis_prefix: str
    root: Path
    services: dict[str, Service] = field(default_factory=dict)
    _started: list[Service] = field(default_factory=list)
    _engine: Engine | None = None
    _executors: int = 0

    @property
    def project_dir(self) -> Path:
        return self.root / "project"

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.project_dir / "ledger.txt")

    @property
    def engine(self) -> Engine:
        assert self._engine is not None, "use the cluster as a context manager"
        return self._engine

    @property
    def executor(self) -> Service:
        """The executor started last."""
        assert "executor" in self.services, "no executor was started"
        return self.services["executor"]

    def agent(self, name: str) -> Service:
        return self.services[name]

    # --- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        for directory in ("project", "logs", "state", "work"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        # Migrate before any service starts, so that none of them races another to it.
        self._engine = open_migrated_store(self.database_url)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill_everything()
        if self._engine is not None:
            self._engine.dispose()

    def kill_everything(self) -> None:
        """SIGKILL every process of every session started here, then reap the services.

        A session outlives its leader while a process is left in it (an orphaned task
        command), and Linux does not reuse its id meanwhile. A leader already reaped here
        whose pid exists again is somebody else's process: its session is left alone.
        """
        for service in self._started:
            if service.process.poll() is not None and Path(f"/proc/{service.pid}").exists():
                continue
            for pid in processes_in_session(service.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for service in self._started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def _environment(self, *, database: bool, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = base_environment()
        env.update(
            TICKWORK_REDIS_URL=self.redis_url,
            TICKWORK_REDIS_PREFIX=self.redis_prefix,
            TICKWORK_LEASE_TTL_SECONDS=str(LEASE_TTL_SECONDS),
            TICKWORK_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS),
            TICKWORK_REAPER_SECONDS=str(REAPER_SECONDS),
            TICKWORK_MAX_LOST_LEASES=str(MAX_LOST_LEASES),
            TICKWORK_LOG_LEVEL="INFO",
            PYTHONUNBUFFERED="1",
        )
        if database:
            env["TICKWORK_DATABASE_URL"] = self.database_url
        env.update(extra or {})
        return env

    def _start(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        *,
        metrics: bool = True,
        port: int | None = None,
    ) -> Service:
        port = port or find_free_port()
        log_path = self.root / "logs" / f"{name}.log"
        workdir = self.root / "work" / name
        workdir.mkdir(parents=True, exist_ok=True)
        if metrics:
            env = {**env, "TICKWORK_METRICS_PORT": str(port)}
            args = [*args, "--metrics-port", str(port)]
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [*tickwork_command(), *args],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        service = Service(name, process, log_path, port)
        self._started.append(service)
        self.services[name] = service
        return service

    def _wait_ready(self, service: Service, path: str = "/metrics") -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while service.get(path) is None:
            if not service.is_alive():
                raise AssertionError(
                    f"{service.name} exited with {service.process.returncode} before it was "
                    f"ready:\n{tail(service.log_path)}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{service.name} did not answer on its metrics port within "
                    f"{START_TIMEOUT_SECONDS}s:\n{tail(service.log_path)}"
                )
            time.sleep(0.05)

    def start_executor(self, env: Mapping[str, str] | None = None, *, wait: bool = True) -> Service:
        """Start ``tickwork executor`` (the one :attr:`executor` names from now on)."""
        self._executors += 1
        service = self._start(
            f"executor-{self._executors}",
            ["executor"],
            self._environment(database=True, extra=dict(env or {})),
        )
        self.services["executor"] = service
        if wait:
            self._wait_ready(service)
        return service

    def start_scheduler(self, name: str = "scheduler") -> Service:
        """Start ``tickwork scheduler`` on the store."""
        service = self._start(name, ["scheduler"], self._environment(database=True, extra=None))
        self._wait_ready(service)
        return service

    def start_api(
        self,
        tokens: str,
        *,
        workers: int = 2,
        name: str = "api",
        env: Mapping[str, str] | None = None,
    ) -> Service:
        """Start ``tickwork api`` (gunicorn) with ``tokens`` (TICKWORK_API_TOKENS) as
        ``services[name]`` (replicas under names of their own); its
        :attr:`Service.metrics_port` is the port it serves on."""
        port = find_free_port()
        extra = {"TICKWORK_API_TOKENS": tokens, **(env or {})}
        args = ["api", "--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
        environment = self._environment(database=True, extra=extra)
        service = self._start(name, args, environment, metrics=False, port=port)
        self._wait_ready(service, "/readyz")
        return service

    def stop_executor(self, timeout_seconds: float = STOP_TIMEOUT_SECONDS) -> int:
        """SIGTERM the executor and return its exit code."""
        self.executor.process.send_signal(signal.SIGTERM)
        return self.executor.wait_exit(timeout_seconds)

    def restart_executor(self, env: Mapping[str, str] | None = None) -> Service:
        """Stop the executor (SIGTERM) and start a new one."""
        if self.executor.is_alive():
            self.stop_executor()
        return self.start_executor(env)

    def start_agent(
        self,
        name: str,
        *,
        concurrency: int = 1,
        grace_seconds: float = 20,
        queues: str = "default",
        wait: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Service:
        """Start ``tickwork agent`` (no database URL in its environment)."""
        work_dir = self.root / "state" / name
        work_dir.mkdir(parents=True, exist_ok=True)
        args = [
            "agent",
            "--queues",
            queues,
            "--concurrency",
            str(concurrency),
            "--grace",
            f"{grace_seconds:g}",
        ]
        extra = {"TICKWORK_AGENT_WORK_DIR": str(work_dir), **(env or {})}
        service = self._start(name, args, self._environment(database=False, extra=extra))
        if wait:
            self._wait_ready(service)
        return service

    def stop_agent(self, name: str) -> None:
        """SIGTERM the agent's main process (a warm shutdown)."""
        self.agent(name).process.send_signal(signal.SIGTERM)

    def kill_agent(self, name: str) -> None:
        """SIGKILL the agent's whole process group (main process and pool workers)."""
        self.agent(name).signal_group(signal.SIGKILL)

    def pause_agent(self, name: str) -> None:
        """SIGSTOP the agent's process group; its operator commands keep running."""
        self.agent(name).signal_group(signal.SIGSTOP)

    def resume_agent(self, name: str) -> None:
        """SIGCONT the agent's process group."""
        self.agent(name).signal_group(signal.SIGCONT)

    # --- work ----------------------------------------------------------------------------

    def submit(self, name: str, text: str, *, session_time: datetime | None = None) -> int:
        """Store workflow ``name`` (its ``.dig`` text) and create an attempt; its id."""
        definition = parse_workflow_text(
            textwrap.dedent(text).lstrip(), f"{name}.dig", self.project_dir
        )
        now = utc_now()
        request = RunRequest(
            definition=definition,
            project_dir=self.project_dir,
            state_dir=self.root / "state",
            database_url=self.database_url,
            params={},
            session_time=session_time or now.replace(microsecond=0),
        )
        with self.engine.begin() as conn:
            outcome = create_run_attempt(conn, request, now)
        return outcome.attempt_id

    def attempt_state(self, attempt_id: int) -> str:
        """The stored state of an attempt (a string: it may be one this code does not know)."""
        with self.engine.connect() as conn:
            query = sa.select(attempts.c.state).where(attempts.c.id == attempt_id)
            return str(conn.execute(query).scalar_one())

    def wait_for_attempt_end(self, attempt_id: int, timeout_seconds: float) -> str:
        """Wait until the attempt is done; its final state."""
        states: list[str] = []

        def done() -> bool:
            states.append(self.attempt_state(attempt_id))
            return states[-1] in DONE_ATTEMPT_STATES

        try:
            wait_until(f"attempt {attempt_id} ends", done, timeout_seconds, poll=0.1)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc} (still {states[-1] if states else '?'})\n{self.explain(attempt_id)}"
            ) from None
        return states[-1]

    def tasks(self, attempt_id: int) -> list[TaskRow]:
        with self.engine.connect() as conn:
            return list_attempt_tasks(conn, attempt_id)

    def task(self, attempt_id: int, name: str) -> TaskRow:
        """The one operator task (not a group) of the attempt whose name is ``name``."""
        found = [
            t for t in self.tasks(attempt_id) if t.full_name.endswith(f"+{name}") and not t.is_group
        ]
        assert len(found) == 1, f"tasks named {name}: {[t.full_name for t in found]}"
        return found[0]

    def succeeded_tasks(self, attempt_id: int) -> int:
        """How many operator tasks of the attempt the executor has marked succeeded."""
        query = sa.select(sa.func.count()).where(
            tasks.c.attempt_id == attempt_id,
            tasks.c.is_group.is_(False),
            tasks.c.state == TaskState.SUCCESS.value,
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def seconds_to_progress(
        self, attempt_id: int, since: float, timeout_seconds: float, *, poll: float = 0.05
    ) -> float:
        """Seconds from ``since`` (monotonic) until one more task of the attempt succeeded
        than when called: the executor applied a result again. Fails after the timeout;
        a store that does not answer yet counts as no progress."""
        baseline = self.succeeded_tasks(attempt_id)
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                if self.succeeded_tasks(attempt_id) > baseline:
                    return time.monotonic() - since
            time.sleep(poll)
        raise AssertionError(f"no task succeeded within {timeout_seconds}s\n{self.explain()}")

    def applied_per_task(self, attempt_id: int) -> Counter[int]:
        """How many results the executor applied to each operator task of the attempt."""
        query = (
            sa.select(task_logs.c.task_id, sa.func.count())
            .join(tasks, tasks.c.id == task_logs.c.task_id)
            .where(tasks.c.attempt_id == attempt_id, task_logs.c.ended_at.is_not(None))
            .group_by(task_logs.c.task_id)
        )
        with self.engine.connect() as conn:
            return Counter({int(task): int(n) for task, n in conn.execute(query)})

    def applied_results(self, attempt_id: int, name: str) -> list[int]:
        """Lease tokens of the results the executor applied to task ``name``, in order.

        Applying a result ends its run's log row (one per task and token, indexed when
        the run was dispatched); a refused, stale result leaves it as it was.
        """
        task_id = self.task(attempt_id, name).id
        query = (
            sa.select(task_logs.c.lease_token)
            .where(task_logs.c.task_id == task_id, task_logs.c.ended_at.is_not(None))
            .order_by(task_logs.c.id)
        )
        with self.engine.connect() as conn:
            return [int(token) for token in conn.scalars(query)]

    def wait_for_start(self, task: str, timeout_seconds: float, count: int = 1) -> LedgerEntry:
        """Wait until ``task`` noted its ``count``-th start; that ledger entry."""
        wait_until(
            f"{task} noted start #{count}",
            lambda: len(self.ledger.starts(task)) >= count,
            timeout_seconds,
            poll=0.02,
        )
        return self.ledger.starts(task)[count - 1]

    def tickwork(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A one-shot ``tickwork ARGS`` with the store's URL (or ``env``), bounded in time."""
        return subprocess.run(
            [*tickwork_command(), *args],
            cwd=self.root / "work",
            env=self._environment(database=True, extra=env),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )

    def delete_redis_keys(self) -> int:
        """Delete every Redis key of this cluster (its prefix): Redis restarted empty."""
        with RespClient(RedisAddress.from_url(self.redis_url)) as client:
            return client.delete_keys_with_prefix(self.redis_prefix)

    # --- diagnostics ---------------------------------------------------------------------

    def explain(self, attempt_id: int | None = None) -> str:
        """The tasks' stored states, the ledger and every process's log tail."""
        parts: list[str] = []
        if attempt_id is not None:
            with contextlib.suppress(Exception):
                rows = [
                    f"  {t.full_name} {t.state.value} token={t.lease_token} "
                    f"retries={t.retry_count} error={t.error}"
                    for t in self.tasks(attempt_id)
                    if not t.is_group
                ]
                shown = rows[:20] + ([f"  ... {len(rows) - 20} more"] if len(rows) > 20 else [])
                parts.append(f"--- tasks of attempt {attempt_id}\n" + "\n".join(shown))
        ledger = self.ledger.text().splitlines()
        parts.append("--- ledger (last 30 lines)\n" + "\n".join(ledger[-30:]))
        for service in self._started:
            code = service.process.poll()
            status = "running" if code is None else f"exit {code}"
            parts.append(
                f"--- {service.name} (pid {service.pid}, {status})\n{tail(service.log_path)}"
            )
        return "\n".join(parts)
