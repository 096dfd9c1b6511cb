"""``tickwork dev``: the API, the scheduler, the executor and agents as separate local
processes under honcho, with prefixed output, all stopped by Ctrl-C or SIGTERM.

Every input is checked before anything starts (one line and exit status 2 when one is
bad); the PostgreSQL database is created if missing and migrated in this process, so no
service waits for a schema. Each service is ``tickwork <service>`` run by this process's
Python and configured through its ``TICKWORK_*`` variables. honcho runs each in a session
of its own, prefixes and colours its lines, stops them all when one ends or on a signal,
and SIGKILLs what is left 5 s later. A stop is sent as in the container image: SIGTERM to
each service's own process only (see :class:`MainProcessStop`).
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from services.cli.dev_checks import (
    API_HOST,
    DevSettings,
    check_ports,
    check_redis,
    prepare_database,
    read_project,
)
from services.cli.errors import fail
from services.cli.store_access import printable_url

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/tickwork_dev"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
STOP_GRACE_SECONDS = 3
"""How long the API's requests and the agents' tasks may finish after SIGTERM."""
KILL_WAIT_SECONDS = STOP_GRACE_SECONDS + 7
"""When honcho SIGKILLs what is left (its own default is 5 s, counted from the first
service that stopped): well after the grace, as Kubernetes' 330 s are after an agent's
300, so that an agent gives back a task still running and then exits on its own (Celery
takes 2 to 3 s to stop its pool)."""
API_READY_TIMEOUT_SECONDS = 60.0
"""How long the project push waits for the API to answer ``/readyz``."""


@dataclass(frozen=True)
class ServiceProcess:
    """One process to run: its name in the output, its argv and its environment."""

    name: str
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class FirstExit:
    """The process that stopped first, and whether it did so before a SIGINT or SIGTERM."""

    name: str
    returncode: int
    on_its_own: bool


def tickwork_argv() -> list[str]:
    """``tickwork`` for this Python: the script beside it, else its module (which would
    put the current directory, where another ``services`` package may be, on the path)."""
    script = Path(sys.executable).with_name("tickwork")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "services.cli"]


def service_processes(settings: DevSettings, auth: bool) -> list[ServiceProcess]:
    """The API, the scheduler, the executor and the agents, each configured by its env."""
    tickwork = tickwork_argv()
    ports = settings.metrics_ports()
    hidden = ("TICKWORK_DATABASE_URL", "TICKWORK_METRICS_PORT")  # agents reach Redis only
    common = {k: v for k, v in os.environ.items() if k not in hidden}
    common.update(
        TICKWORK_REDIS_URL=settings.redis_url,
        TICKWORK_REDIS_PREFIX=settings.redis_prefix,
        TICKWORK_LOG_LEVEL=settings.log_level,
        PYTHONUNBUFFERED="1",  # lines reach the output as they are written
        TICKWORK_LOG_FORMAT="text",  # read by a person, behind honcho's prefixes
    )
    store = {**common, "TICKWORK_DATABASE_URL": settings.database_url}
    logs = {"TICKWORK_LOG_DIR": str(settings.log_dir)}
    api = {
        **store,
        **logs,
        "TICKWORK_API_BIND": f"{API_HOST}:{settings.api_port}",
        "TICKWORK_API_GRACEFUL_TIMEOUT": str(STOP_GRACE_SECONDS),
    }
    if not auth:
        api["TICKWORK_API_AUTH"] = "off"
    agent = {
        **common,
        "TICKWORK_AGENT_CONCURRENCY": str(settings.concurrency),
        "TICKWORK_AGENT_GRACE_SECONDS": str(STOP_GRACE_SECONDS),
    }

    def metrics(name: str) -> dict[str, str]:
        return {"TICKWORK_METRICS_PORT": str(ports[name])}

    processes = [
        ServiceProcess("api", [*tickwork, "api"], api),
        ServiceProcess("scheduler", [*tickwork, "scheduler"], {**store, **metrics("scheduler")}),
        ServiceProcess(
            "executor", [*tickwork, "executor"], {**store, **logs, **metrics("executor")}
        ),
    ]
    for n in range(1, settings.agents + 1):
        name = f"agent.{n}"
        processes.append(ServiceProcess(name, [*tickwork, "agent"], {**agent, **metrics(name)}))
    return processes


# --- running -------------------------------------------------------------------------------


class ExitWatch:
    """Stands in for a honcho manager's event queue to note which process stopped first,
    and whether that was before a SIGINT or SIGTERM set the manager's ``returncode``:
    honcho itself only prints it."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self._events = manager.events
        self.first: FirstExit | None = None
        manager.events = self

    def put(self, message: Any) -> None:
        self._events.put(message)

    def get(self, timeout: float | None = None) -> Any:
        message = self._events.get(timeout=timeout)
        if message.type == "stop" and self.first is None:
            on_its_own = self._manager.returncode is None
            self.first = FirstExit(message.name, message.data["returncode"], on_its_own)
        return message

    def __reduce__(self) -> tuple[Any, ...]:
        # A process started by spawning (not forking) only puts: give it the plain queue.
        return (_same, (self._events,))


def _same(value: object) -> object:
    return value


class MainProcessStop:
    """A process manager for honcho's manager: ``terminate`` sends SIGTERM to a
    service's own process only, as tini does in the container image, and ``kill`` SIGKILLs
    its whole process group, as honcho does.

    honcho's own terminate signals the whole group. An agent's Celery pool processes would
    then die at once, taking their running tasks with them, instead of going through the
    worker's warm shutdown: the main process stops taking messages, lets running tasks
    finish for ``TICKWORK_AGENT_GRACE_SECONDS``, then tells its pool processes to give them
    back. The API's gunicorn and the other services likewise stop their own children.
    """

    def terminate(self, pid: int) -> None:
        _send(os.kill, pid, signal.SIGTERM)

    def kill(self, pid: int) -> None:
        _send(os.killpg, pid, signal.SIGKILL)


def _send(send: Callable[[int, int], None], pid: int, signum: int) -> None:
    """Send a signal, ignoring a process already gone or no longer ours (as honcho does)."""
    try:
        send(pid, signum)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ESRCH):
            raise


def printer_line(manager: Any) -> Callable[[str], None]:
    """A function printing a line among the services' output, prefixed ``dev``."""
    from honcho.printer import Message  # type: ignore[import-untyped]

    def say(line: str) -> None:
        manager.events.put(Message("line", line + "\n", datetime.now(), "dev", None))

    return say


def push_when_ready(
    settings: DevSettings,
    archive: bytes,
    revision: str,
    token: str | None,
    say: Callable[[str], None],
) -> None:
    """Wait (bounded) for the API to be ready, then push the project over REST."""
    from services.cli.api_client import ApiClient
    from shared.errors import TickworkError

    with ApiClient(settings.api_url, token=token) as client:
        deadline = time.monotonic() + API_READY_TIMEOUT_SECONDS
        while not client.ready():
            if time.monotonic() > deadline:
                say(f"error: {settings.api_url}/readyz did not answer; the project is not pushed")
                return
            time.sleep(0.2)
        try:
            pushed = client.push_project(settings.project_name, archive, revision=revision)
        except TickworkError as exc:
            say(f"error: cannot push {settings.project_dir}: {exc}")
            return
    state = "new" if pushed.get("created", True) else "unchanged"
    say(f"pushed project {settings.project_name} (revision {revision}, {state})")
    say(f"  workflows: {', '.join(pushed.get('workflows') or []) or '-'}")


def banner_lines(settings: DevSettings, auth: bool, created: bool, revision: str) -> list[str]:
    """What runs where, printed before the services start."""
    api = settings.api_url
    created_note = "created, " if created else ""
    security = (
        "on (Authorization: Bearer TOKEN)"
        if auth
        else "off (the API is bound to 127.0.0.1: only this machine can connect)"
    )
    lines = [
        f"tickwork dev: {settings.agents + 3} processes; Ctrl-C stops them all",
        f"  {'api':<10} {api}  (docs {api}/api/docs, metrics {api}/metrics)",
        *(
            f"  {name:<10} http://127.0.0.1:{port}/metrics  (probes /healthz, /readyz)"
            for name, port in settings.metrics_ports().items()
        ),
        f"database {printable_url(settings.database_url)} ({created_note}at revision {revision})",
        f"redis    {printable_url(settings.redis_url)}, keys prefixed {settings.redis_prefix}",
        f"agents   {settings.agents}, each running {settings.concurrency} tasks at once",
        f"auth     {security}",
        f"state    {settings.state_dir}  (task logs in {settings.log_dir})",
    ]
    if settings.project_dir is not None:
        lines.append(
            f"project  {settings.project_name} from {settings.project_dir}, "
            "pushed once the API is ready"
        )
    return lines


def describe_exit(first: FirstExit) -> str:
    """How a process ended: ``api exited with status 2``, ``agent.1 was killed by SIGKILL``."""
    if first.returncode < 0:
        try:
            name = signal.Signals(-first.returncode).name
        except ValueError:
            name = f"signal {-first.returncode}"
        return f"{first.name} was killed by {name}"
    return f"{first.name} exited with status {first.returncode}"


def run_cluster(
    processes: list[ServiceProcess], start_push: Callable[[Callable[[str], None]], None]
) -> int:
    """Run the processes until one ends or a signal comes; the exit status to end with."""
    from honcho import manager as honcho_manager  # type: ignore[import-untyped]

    honcho_manager.KILL_WAIT = KILL_WAIT_SECONDS  # read by Manager.loop at each turn
    manager = honcho_manager.Manager()
    watch = ExitWatch(manager)
    manager._procmgr = MainProcessStop()  # where honcho keeps its process manager
    for process in processes:
        # exec: the process honcho signals is the service itself, not a shell around it.
        manager.add_process(process.name, "exec " + shlex.join(process.argv), env=process.env)
    start_push(printer_line(manager))
    sys.stdout.flush()  # honcho forks its readers: nothing buffered may be printed twice
    manager.loop()
    first = watch.first
    if first is not None and first.on_its_own:
        click.echo(f"error: {describe_exit(first)}, so the others were stopped", err=True)
        return 1
    return manager.returncode or 0


@click.command("dev")
@click.option(
    "--database-url",
    envvar="TICKWORK_DATABASE_URL",
    default=DEFAULT_DATABASE_URL,
    show_default=True,
    help="The PostgreSQL database, created if missing (env TICKWORK_DATABASE_URL).",
)
@click.option(
    "--redis-url",
    envvar="TICKWORK_REDIS_URL",
    default=DEFAULT_REDIS_URL,
    show_default=True,
    help="Redis for queues, leases and events (env TICKWORK_REDIS_URL).",
)
@click.option(
    "--redis-prefix",
    envvar="TICKWORK_REDIS_PREFIX",
    default="tickwork-dev:",
    show_default=True,
    help="Prefix of every Redis key, so this cluster's never mix with another's "
    "(env TICKWORK_REDIS_PREFIX).",
)
@click.option(
    "--agents", type=click.IntRange(1, 64), default=2, show_default=True, help="Agents to run."
)
@click.option(
    "--concurrency",
    envvar="TICKWORK_AGENT_CONCURRENCY",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Tasks each agent runs at once (env TICKWORK_AGENT_CONCURRENCY).",
)
@click.option(
    "--api-port",
    type=click.IntRange(1, 65535),
    default=8765,
    show_default=True,
    help="Port of the API, on 127.0.0.1.",
)
@click.option(
    "--metrics-base-port",
    type=click.IntRange(1, 65535),
    default=9101,
    show_default=True,
    help="Health and metrics port of the scheduler; the executor and the agents take the "
    "ports after it.",
)
@click.option(
    "--project",
    "project_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="A project directory to push over REST once the API is ready, named after it.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".tickwork/dev"),
    show_default=True,
    help="Where the executor writes task logs and the API reads them (in <state-dir>/logs).",
)
@click.option("--log-level", envvar="TICKWORK_LOG_LEVEL", default="INFO", show_default=True)
def dev_command(
    database_url: str,
    redis_url: str,
    redis_prefix: str,
    agents: int,
    concurrency: int,
    api_port: int,
    metrics_base_port: int,
    project_dir: Path | None,
    state_dir: Path,
    log_level: str,
) -> None:
    """Run the API, the scheduler, the executor and agents as local processes until Ctrl-C.

    The database is created if missing and migrated first. Output lines are prefixed with
    the process's name. When one process exits, the others are stopped and the status is
    1; after Ctrl-C (SIGINT) it is 130, after SIGTERM 143. Without API tokens
    (TICKWORK_API_TOKENS or TICKWORK_API_TOKENS_FILE) authentication is off: the API
    listens on 127.0.0.1 only.
    """
    from services.standalone import state_directory

    project = project_dir.resolve() if project_dir is not None else None
    settings = DevSettings(
        database_url=database_url,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        agents=agents,
        concurrency=concurrency,
        api_port=api_port,
        metrics_base_port=metrics_base_port,
        state_dir=state_dir.resolve(),
        log_level=log_level.upper(),
        project_dir=project,
        project_name=project.name if project is not None else "",
    )
    pushed = read_project(project) if project is not None else None
    auth, token = _api_auth()
    check_ports(settings)
    check_redis(settings.redis_url)
    state_directory(settings.state_dir)
    created, revision = prepare_database(settings.database_url)
    for line in banner_lines(settings, auth, created, revision):
        click.echo(line)

    def start_push(say: Callable[[str], None]) -> None:
        if pushed is not None:
            archive, name = pushed
            args = (settings, archive, name, token, say)
            threading.Thread(target=push_when_ready, args=args, name="push", daemon=True).start()

    sys.exit(run_cluster(service_processes(settings, auth), start_push))


def _api_auth() -> tuple[bool, str | None]:
    """Whether the API needs tokens (only if some are configured: it is bound to loopback),
    and an admin token for the push."""
    from services.api.config import ApiConfig
    from shared.errors import TickworkError

    try:
        tokens = ApiConfig.from_environment().tokens
    except TickworkError as exc:
        fail(f"error: {exc}")
    admin = next((t.token for t in tokens if t.role == "admin"), None)
    return bool(tokens), admin
