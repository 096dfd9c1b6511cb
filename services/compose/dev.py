"""``tickwork dev``: the API, the scheduler, the executor and agents as separate local
processes, their log records in one format behind each one's name, all stopped together.

Every input is checked before anything starts (one line and exit status 2 when one is
bad); the API's and the metrics' ports are the defaults, or the first free ones after
them when those are taken and were not asked for; the PostgreSQL database (its own,
``tickwork_dev``, not the one TICKWORK_DATABASE_URL names for other commands) is created if
missing and migrated in this process, so no service waits for a schema. Each service is
``tickwork <service>`` run by this process's Python and configured through its
``TICKWORK_*`` variables, in a session of its own (services/compose/dev_processes.py).

Whatever starts the stop, every service is stopped and waited for (bounded, then
SIGKILLed): SIGINT, SIGTERM or SIGHUP to this process, a service that exits, or the reader
of this process's output gone (``tickwork dev | head``, a killed ``tee``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

from tickwork.services.cli.errors import fail
from tickwork.services.compose.dev_checks import (
    API_HOST,
    DEFAULT_API_PORT,
    DEFAULT_METRICS_BASE_PORT,
    DevSettings,
    check_ports,
    check_redis,
    choose_api_port,
    choose_metrics_base_port,
    database_name,
    prepare_database,
    read_project,
)
from tickwork.services.compose.dev_processes import (
    DEV_SERVICE,
    POLL_SECONDS,
    DevOutput,
    ServiceGroup,
    ServiceProcess,
    StopSignals,
    describe_exit,
)
from tickwork.shared.config import LOG_LEVEL
from tickwork.shared.config_options import passed_on_option
from tickwork.shared.store.urls import printable_url

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/tickwork_dev"
DATABASE_URL_ENV = "TICKWORK_DEV_DATABASE_URL"
"""Its own variable: TICKWORK_DATABASE_URL names what ``tickwork standalone`` (``make
run``) and the other commands use, which a cluster must not share by accident."""
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
STOP_GRACE_SECONDS = 3
"""How long the API's requests and the agents' tasks may finish after SIGTERM."""
KILL_WAIT_SECONDS = STOP_GRACE_SECONDS + 7
"""When what is left after SIGTERM is SIGKILLed: well after the grace, as Kubernetes' 330 s
are after an agent's 300, so that an agent gives back a task still running and then exits
on its own (Celery takes 2 to 3 s to stop its pool)."""
API_READY_TIMEOUT_SECONDS = 60.0
"""How long the project push waits for the API to answer ``/readyz``."""
BROKEN_OUTPUT_STATUS = 128 + signal.SIGPIPE
"""The exit status when the output's reader went away, as a shell reports SIGPIPE."""


def tickwork_argv() -> list[str]:
    """``tickwork`` for this Python: the script beside it, else its module (which would
    put the current directory, where another ``services`` package may be, on the path)."""
    script = Path(sys.executable).with_name("tickwork")
    return (
        [str(script)] if script.is_file() else [sys.executable, "-m", "tickwork.services.compose"]
    )


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
        TICKWORK_LOG_FORMAT="json",  # records this process reads, then writes in its format
    )
    store = {**common, "TICKWORK_DATABASE_URL": settings.database_url}
    api = {
        **store,
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
        ServiceProcess("executor", [*tickwork, "executor"], {**store, **metrics("executor")}),
    ]
    for n in range(1, settings.agents + 1):
        name = f"agent.{n}"
        processes.append(ServiceProcess(name, [*tickwork, "agent"], {**agent, **metrics(name)}))
    return processes


def push_when_ready(
    settings: DevSettings, archive: bytes, revision: str, token: str | None, output: DevOutput
) -> None:
    """Wait (bounded) for the API to be ready, then push the project over REST."""
    from tickwork.services.cli.api_client import ApiClient
    from tickwork.shared.errors import TickworkError

    with ApiClient(settings.api_url, token=token) as client:
        deadline = time.monotonic() + API_READY_TIMEOUT_SECONDS
        while not client.ready():
            if time.monotonic() > deadline:
                output.say(f"{settings.api_url}/readyz did not answer: no push", "error")
                return
            time.sleep(0.2)
        try:
            pushed = client.push_project(settings.project_name, archive, revision=revision)
        except TickworkError as exc:
            output.say(f"cannot push {settings.project_dir}: {exc}", "error")
            return
    state = "new" if pushed.get("created", True) else "unchanged"
    workflows = ", ".join(pushed.get("workflows") or []) or "-"
    output.say(
        f"pushed project {settings.project_name} (revision {revision}, {state}); "
        f"workflows: {workflows}"
    )


def banner_lines(settings: DevSettings, auth: bool, created: bool, revision: str) -> list[str]:
    """What runs where, said before the services start; the API's address first."""
    api = settings.api_url
    moved = settings.api_port != DEFAULT_API_PORT
    created_note = "created, " if created else ""
    security = (
        "on (Authorization: Bearer TOKEN)"
        if auth
        else "off (the API is bound to 127.0.0.1: only this machine can connect)"
    )
    lines = [
        f"api at {api}  (docs {api}/api/docs, metrics {api}/metrics)",
        f"tickwork dev: {settings.agents + 3} processes; Ctrl-C stops them all",
        *([f"client   tickwork -e {api} ...  (or TICKWORK_ENDPOINT={api})"] if moved else []),
        *(
            f"metrics  {name} http://127.0.0.1:{port}/metrics  (probes /healthz, /readyz)"
            for name, port in settings.metrics_ports().items()
        ),
        f"database {printable_url(settings.database_url)} ({created_note}at revision {revision})",
        f"redis    {printable_url(settings.redis_url)}, keys prefixed {settings.redis_prefix}",
        f"agents   {settings.agents}, each running {settings.concurrency} tasks at once",
        f"auth     {security}",
        f"state    {settings.state_dir}  (task logs in the database)",
    ]
    if settings.project_dir is not None:
        lines.append(
            f"project  {settings.project_name} from {settings.project_dir}, "
            "pushed once the API is ready"
        )
    return lines


def run_cluster(
    processes: list[ServiceProcess], output: DevOutput, start_push: Callable[[], None]
) -> int:
    """Run the processes until a signal comes, one of them ends or the output's reader is
    gone; stop them all, and return the exit status to end with."""
    signals = StopSignals()
    signals.install()  # before any start: no signal may leave a service behind
    group = ServiceGroup(output)
    try:
        group.start(processes)
        start_push()
        status = wait_for_stop(group, signals, output)
    finally:
        group.stop(KILL_WAIT_SECONDS, signals.repeated)
    return status


def wait_for_stop(group: ServiceGroup, signals: StopSignals, output: DevOutput) -> int:
    """Wait until something asks for the stop; say what, and return the exit status."""
    while True:
        received = signals.first
        if received is not None:
            output.say(f"{received.name} received")
            return 128 + received
        exited = group.first_exit()
        if exited is not None:
            output.say(f"{describe_exit(*exited)}, so the others are stopped", "error")
            return 1
        if output.broken:
            _tell_stderr("tickwork dev: the output's reader is gone; stopping the services")
            return BROKEN_OUTPUT_STATUS
        time.sleep(POLL_SECONDS)


def _tell_stderr(line: str) -> None:
    """Say ``line`` on stderr, if anyone still reads it."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:
        pass


def _output_format(chosen: str) -> bool:
    """Whether to write JSON lines: as ``--log-format`` says, else unless stdout is a
    terminal."""
    if chosen == "auto":
        return not sys.stdout.isatty()
    return chosen == "json"


@click.command("dev")
@click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    default=DEFAULT_DATABASE_URL,
    show_default=True,
    help=f"The PostgreSQL database, created if missing (env {DATABASE_URL_ENV}).",
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
    help="Prefix of every Redis key, so this cluster's never mix with another's "
    "(env TICKWORK_REDIS_PREFIX)  [default: tickwork-dev:<database name>:]",
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
    help=f"Port of the API, on 127.0.0.1  [default: {DEFAULT_API_PORT}, or the first free "
    "one after it]",
)
@click.option(
    "--metrics-base-port",
    type=click.IntRange(1, 65535),
    help="Health and metrics port of the scheduler; the executor and the agents take the "
    f"ports after it  [default: {DEFAULT_METRICS_BASE_PORT}, or the first free block after]",
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
    help="Where the services keep what they make locally (the SQLite file, agents' scratch).",
)
@passed_on_option(LOG_LEVEL)
@click.option(
    "--log-format",
    envvar="TICKWORK_LOG_FORMAT",
    type=click.Choice(["auto", "json", "text"], case_sensitive=False),
    default="auto",
    show_default=True,
    help="json: a JSON object per line; text: HH:MM:SS service | LEVEL logger message; "
    "auto: JSON unless the output is a terminal (env TICKWORK_LOG_FORMAT).",
)
def dev_command(
    database_url: str,
    redis_url: str,
    redis_prefix: str | None,
    agents: int,
    concurrency: int,
    api_port: int | None,
    metrics_base_port: int | None,
    project_dir: Path | None,
    state_dir: Path,
    log_level: str,
    log_format: str,
) -> None:
    """Run the API, the scheduler, the executor and agents as local processes until Ctrl-C.

    The database is created if missing and migrated first. Every line of the output is a
    log record of one process, named: JSON lines when the output is not a terminal, else
    text (--log-format). When one process exits, the others are stopped and the status is
    1; after Ctrl-C (SIGINT) it is 130, after SIGTERM 143, after SIGHUP 129, when the
    output's reader is gone 141. Without API tokens (TICKWORK_API_TOKENS or
    TICKWORK_API_TOKENS_FILE) authentication is off: the API listens on 127.0.0.1 only.
    """
    from tickwork.services.compose.standalone import state_directory

    project = project_dir.resolve() if project_dir is not None else None
    chosen_api_port = choose_api_port(api_port)
    settings = DevSettings(
        database_url=database_url,
        redis_url=redis_url,
        redis_prefix=redis_prefix or f"tickwork-dev:{database_name(database_url)}:",
        agents=agents,
        concurrency=concurrency,
        api_port=chosen_api_port,
        metrics_base_port=choose_metrics_base_port(metrics_base_port, agents + 2, chosen_api_port),
        state_dir=state_dir.resolve(),
        log_level=log_level,
        project_dir=project,
        project_name=project.name if project is not None else "",
    )
    pushed = read_project(project) if project is not None else None
    auth, token = _api_auth()
    check_ports(settings)
    check_redis(settings.redis_url)
    state_directory(settings.state_dir)
    created, revision = prepare_database(settings.database_url)
    processes = service_processes(settings, auth)
    width = max(len(name) for name in [DEV_SERVICE, *(p.name for p in processes)])
    output = DevOutput(sys.stdout, json_lines=_output_format(log_format.lower()), width=width)
    for line in banner_lines(settings, auth, created, revision):
        output.say(line)

    def start_push() -> None:
        if pushed is not None:
            archive, name = pushed
            args = (settings, archive, name, token, output)
            threading.Thread(target=push_when_ready, args=args, name="push", daemon=True).start()

    sys.exit(run_cluster(processes, output, start_push))


def _api_auth() -> tuple[bool, str | None]:
    """Whether the API needs tokens (only if some are configured: it is bound to loopback),
    and an admin token for the push."""
    from tickwork.services.api.config import ApiConfig
    from tickwork.shared.errors import TickworkError

    try:
        tokens = ApiConfig.from_environment().tokens
    except TickworkError as exc:
        fail(f"error: {exc}")
    admin = next((t.token for t in tokens if t.role == "admin"), None)
    return bool(tokens), admin
