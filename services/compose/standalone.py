"""``tickwork standalone``: the API, the scheduler, the executor and its agents in one process.

Everything runs on one store (a SQLite file in the state directory unless a database URL
is given): the API is served by waitress in its threads, the scheduler and the executor
each loop in a thread of their own, and tasks run on a pool of in-process agent threads,
whose logs stream to the executor and so into the store, where the API reads them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from sqlalchemy import Engine, event

from tickwork.services.agent.operators.base import ResourceLimits
from tickwork.services.agent.operators.process import terminate_children
from tickwork.services.cli.errors import fail
from tickwork.services.cli.params import POOL_OPTION, parse_pools
from tickwork.services.compose.dispatchers import ControlledDispatcher
from tickwork.services.compose.embedded import make_in_process_runner
from tickwork.services.executor.loop import Recovery, WorkflowExecutor
from tickwork.services.executor.main import run_in_process
from tickwork.services.executor.notifier import Notifier
from tickwork.services.scheduler.loop import Scheduler
from tickwork.services.scheduler.main import run as run_scheduler
from tickwork.shared.clock import utc_now
from tickwork.shared.config import LOG_LEVEL
from tickwork.shared.config_options import passed_on_option
from tickwork.shared.errors import TickworkError
from tickwork.shared.runner import stop_on_signals
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.urls import printable_url

log = logging.getLogger(__name__)

DEFAULT_BIND = "127.0.0.1:8765"
STOP_GRACE_SECONDS = 10.0
"""How long stopping waits for each thread before it gives up on it."""


@dataclass(frozen=True)
class StandaloneSettings:
    """What ``tickwork standalone`` was asked for, validated."""

    state_dir: Path
    database_url: str
    host: str
    port: int
    agents: int
    project_dir: Path | None = None
    project_name: str | None = None
    limits: ResourceLimits = dataclasses.field(default_factory=ResourceLimits)
    task_timeout_seconds: float | None = None
    pools: dict[str, int] = dataclasses.field(default_factory=dict)  # --pool NAME=SLOTS


def parse_bind(raw: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); raises BadParameter naming ``--bind``."""
    host, sep, port = raw.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected HOST:PORT, got {raw!r}", param_hint="'--bind'")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


API_THREADS = 8
"""Threads serving the API's requests."""
FOLLOW_STREAMS = API_THREADS // 2
"""Log follow streams served at once (503 past it): the other threads stay free."""
API_CONNECTIONS = 1000
"""Open connections the API accepts at once."""
CHANNEL_TIMEOUT_SECONDS = 10
"""A connection that sends nothing for this long is closed."""


class Standalone:
    """The threads of one standalone process: start them, and stop them all."""

    def __init__(self, settings: StandaloneSettings, engine: Engine, app: Any) -> None:
        from waitress import create_server

        from tickwork.services.api.waitress_errors import ProblemChannel

        self.settings = settings
        self.engine = engine
        runner = make_in_process_runner(settings.state_dir, engine, settings.limits)
        self.dispatcher = ControlledDispatcher(runner, settings.agents)
        self.executor = WorkflowExecutor(
            engine,
            self.dispatcher,
            task_timeout_seconds=settings.task_timeout_seconds,
            recovery=Recovery(every_seconds=5.0, grace_seconds=2.0),
        )
        self.scheduler = Scheduler(engine)
        self.notifier = Notifier(engine)  # sends the notification rules' deliveries
        self.stopping = threading.Event()  # ends the executor's loop
        # waitress reads a request whole in its event loop before a thread serves it, so a
        # slow or silent client holds no thread; one silent for CHANNEL_TIMEOUT_SECONDS is
        # dropped. Log follow streams do hold a thread each: at most FOLLOW_STREAMS of them.
        self.server = create_server(
            app,
            host=settings.host,
            port=settings.port,
            threads=API_THREADS,
            connection_limit=API_CONNECTIONS,
            channel_timeout=CHANNEL_TIMEOUT_SECONDS,
            cleanup_interval=CHANNEL_TIMEOUT_SECONDS // 2,
            ident="tickwork",
        )
        self.server.channel_class = ProblemChannel  # problem+json for what waitress refuses
        self.threads = [
            _thread("api", self.server.run),
            _thread("scheduler", lambda: run_scheduler(self.scheduler)),
            _thread("executor", lambda: run_in_process(self.executor, self.stopping)),
        ]
        self._watch_commits()

    @property
    def port(self) -> int:
        """The port the API listens on (the one chosen when ``--bind`` asked for port 0)."""
        return int(self.server.effective_port)

    def _watch_commits(self) -> None:
        """Wake the executor when another thread (an API request, the scheduler) commits:
        SQLite has no NOTIFY, and a started attempt should not wait for the next rescan."""
        executor_thread = self.threads[2]

        def on_commit(_conn: Any) -> None:
            if threading.current_thread() is not executor_thread:
                self.dispatcher.wake()

        event.listen(self.engine, "commit", on_commit)

    def start(self) -> None:
        """Start every thread."""
        for thread in self.threads:
            thread.start()
        self.notifier.start()

    def stop(self) -> None:
        """Stop taking requests, stop the loops, kill running tasks, join with a bound.

        The executor stops before the tasks are killed, so a killed task's result is not
        applied: its task stays in flight and the next start runs it again.
        """
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        self.server.close()
        self.scheduler.stop()
        self.stopping.set()
        self.dispatcher.wake()
        api, scheduler, executor = self.threads
        self._join(executor, deadline)
        terminate_children()
        self._join(scheduler, deadline)
        self._join(api, deadline)
        self.notifier.stop(wait=False)
        closer = threading.Thread(target=self.dispatcher.close, daemon=True)
        closer.start()
        self._join(closer, deadline)
        self.engine.dispose()

    @staticmethod
    def _join(thread: threading.Thread, deadline: float) -> None:
        if thread.ident is not None:
            thread.join(max(0.1, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning("thread %s did not stop in time", thread.name)


def _thread(name: str, loop: Callable[[], object]) -> threading.Thread:
    """A thread running ``loop``; if it dies of an error, the whole process stops (a
    standalone without its API, scheduler or executor would only look alive)."""

    def run() -> None:
        try:
            loop()
        except Exception:
            log.exception("the %s thread stopped on an error; stopping", name)
            signal.raise_signal(signal.SIGTERM)

    return threading.Thread(target=run, name=name, daemon=True)


def run_standalone(standalone: Standalone) -> None:
    """Run until SIGINT or SIGTERM, then stop everything."""
    stopping = threading.Event()
    stop_on_signals(stopping.set)
    standalone.start()
    while not stopping.wait(1.0):
        pass
    click.echo("stopping", err=True)
    standalone.stop()


def state_directory(raw: Path) -> Path:
    """The state directory, created if needed; one clear line if it cannot be."""
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"error: cannot use state directory {raw}: {exc.strerror or exc}")
    return raw.resolve()


def check_auth(host: str, tokens: int) -> bool:
    """Whether the API needs tokens: off on loopback without tokens, else on; refuses to
    serve other machines without any."""
    if tokens:
        return True
    if is_loopback(host):
        return False
    fail(
        f"error: --bind {host} accepts connections from other machines, so the API needs "
        "tokens: set TICKWORK_API_TOKENS (e.g. admin:SECRET) or TICKWORK_API_TOKENS_FILE, "
        "or bind to 127.0.0.1"
    )


def describe_error(exc: TickworkError) -> str:
    """One line for an error met while starting."""
    return f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def push_at_start(engine: Engine, directory: Path, name: str) -> list[str]:
    """Push a project directory as the store function the API uses does; the lines that
    say what was pushed (its revision is named after its content, so a restart with the
    same files adds nothing)."""
    from tickwork.shared.clock import utc_now
    from tickwork.shared.dsl.archive import pack_project, read_project_archive
    from tickwork.shared.store.projects import push_revision

    archive = read_project_archive(pack_project(directory))
    with engine.begin() as conn:
        pushed = push_revision(
            conn,
            project_name=name,
            revision_name=f"local-{archive.digest[:16]}",
            archive=archive,
            now=utc_now(),
        )
    state = "new" if pushed.created else "unchanged"
    return [
        f"project  {name} from {directory} (revision {pushed.revision_name}, {state})",
        f"         workflows: {', '.join(pushed.workflows)}",
    ]


def schedule_lines(engine: Engine, project: str | None) -> list[str]:
    """One line per active schedule (of ``project`` only, if given) with its next times."""
    from tickwork.shared.clock import utc_now
    from tickwork.shared.store import schedules as schedule_store
    from tickwork.shared.store.engine import read_only

    with read_only(engine) as conn:
        rows = schedule_store.list_schedules(conn)
    now = utc_now()
    lines = []
    for row in rows:
        if project is not None and row.project_name != project:
            continue
        spec = row.schedule
        name = f"schedule {row.project_name}/{row.workflow_name}: {spec.describe()}"
        if row.paused_at is not None:
            lines.append(f"{name}, paused")
            continue
        upcoming = spec.session_times(max(now, row.last_session_time or now), 1)
        if not upcoming:
            lines.append(f"{name}, no session time ahead")
            continue
        session = spec.local(upcoming[0]).isoformat()
        run = spec.local(spec.run_time(upcoming[0], row.seed)).isoformat()
        lines.append(
            f"{name}, next session {session}" + (f" runs at {run}" if run != session else "")
        )
    return lines


def _banner(settings: StandaloneSettings, port: int, auth: bool, pushed: list[str]) -> list[str]:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    base = f"http://{host}:{port}"
    security = (
        "on (Authorization: Bearer TOKEN)"
        if auth
        else "off (bound to loopback: only this machine can connect)"
    )
    return [
        f"api      {base}  (docs {base}/api/docs)",
        f"auth     {security}",
        f"state    {settings.state_dir}  (task logs in the store)",
        f"store    {printable_url(settings.database_url)}",
        f"agents   {settings.agents} task threads",
        *pushed,
    ]


@click.command("standalone")
@click.option(
    "--state-dir",
    envvar="TICKWORK_STATE_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".tickwork"),
    show_default=True,
    help="Where the SQLite store, task logs and unpacked projects live (env TICKWORK_STATE_DIR).",
)
@click.option(
    "--database-url",
    envvar="TICKWORK_DATABASE_URL",
    help="Use this store instead of <state-dir>/tickwork.db (env TICKWORK_DATABASE_URL).",
)
@click.option("--bind", default=DEFAULT_BIND, show_default=True, help="HOST:PORT of the API.")
@click.option(
    "--project",
    "project_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Push this project directory at start.",
)
@click.option("--project-name", help="Its project name (default: the directory's name).")
@click.option(
    "--agents",
    envvar="TICKWORK_MAX_TASK_THREADS",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Tasks run at once, each on a thread (env TICKWORK_MAX_TASK_THREADS).",
)
@POOL_OPTION
@passed_on_option(LOG_LEVEL)
def standalone_command(
    state_dir: Path,
    database_url: str | None,
    bind: str,
    project_dir: Path | None,
    project_name: str | None,
    agents: int,
    raw_pools: tuple[str, ...],
    log_level: str,
) -> None:
    """Run the API, the scheduler, the executor and agents in this process until SIGTERM.

    Without tokens (TICKWORK_API_TOKENS or TICKWORK_API_TOKENS_FILE) authentication is
    off, which is allowed only when --bind is a loopback address.
    """
    from tickwork.shared.logging import configure_logging

    configure_logging(log_level.upper())
    host, port = parse_bind(bind)
    state = state_directory(state_dir)
    settings = StandaloneSettings(
        state_dir=state,
        database_url=database_url or f"sqlite:///{state / 'tickwork.db'}",
        host=host,
        port=port,
        agents=agents,
        project_dir=project_dir.resolve() if project_dir else None,
        project_name=project_name,
        pools=parse_pools(raw_pools),
    )
    try:
        standalone, auth, pushed = _assemble(settings)
    except TickworkError as exc:
        fail(describe_error(exc), exc)
    except OSError as exc:
        fail(f"error: cannot serve the API on {bind}: {exc.strerror or exc}")
    for line in _banner(settings, standalone.port, auth, pushed):
        click.echo(line)
    for line in schedule_lines(standalone.engine, None):
        click.echo(line)
    run_standalone(standalone)


def _assemble(settings: StandaloneSettings) -> tuple[Standalone, bool, list[str]]:
    """The store migrated, the project pushed, the threads made (not started yet)."""
    from tickwork.services.api.app import create_app
    from tickwork.services.api.config import ApiConfig

    config = ApiConfig.from_environment()
    auth = check_auth(settings.host, len(config.tokens))
    config = dataclasses.replace(
        config,
        database_url=settings.database_url,
        auth_enabled=auth,
        max_follow_streams=min(config.max_follow_streams, FOLLOW_STREAMS),
    )
    engine = open_migrated_store(settings.database_url)
    with engine.begin() as conn:
        for pool, slots in settings.pools.items():
            pool_store.set_pool(conn, pool, slots, None, utc_now())
    pushed: list[str] = []
    if settings.project_dir is not None:
        name = settings.project_name or settings.project_dir.name
        pushed = push_at_start(engine, settings.project_dir, name)
    app = create_app(config, engine)
    return Standalone(settings, engine, app), auth, pushed
