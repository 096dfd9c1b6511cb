"""``tickwork scheduler``, ``tickwork executor`` and ``tickwork agent``: the services of the
distributed mode, each in its own process (``tickwork api`` is services/api/command.py,
``tickwork standalone`` services/standalone.py).

The scheduler talks to PostgreSQL; the executor to PostgreSQL and Redis; agents to Redis
only. Every option can also be set by the environment variable its help names (12-factor).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from redis.exceptions import RedisError

from services.agent.log_limits import DEFAULT_LOG_HEAD_BYTES, DEFAULT_LOG_TAIL_BYTES
from services.cli.errors import fail, fail_unavailable
from services.cli.params import DATABASE_OPTION
from shared.dispatch.messages import DEFAULT_QUEUE
from shared.domain.partitions import DEFAULT_PARTITION_COUNT, MAX_PARTITION_COUNT
from shared.domain.workflow import QUEUE_NAME
from shared.errors import InvalidConfig, StoreUnavailable
from shared.logging import configure_logging
from shared.store.urls import printable_url

# Celery and the services are imported by the commands that run them, so that the help
# of each starts fast.

F = TypeVar("F", bound=Callable[..., Any])


def _redis_options(command: F) -> F:
    command = click.option(
        "--redis-prefix",
        envvar="TICKWORK_REDIS_PREFIX",
        default="tickwork:",
        show_default=True,
        help="Prefix of every Redis key, queues included (env TICKWORK_REDIS_PREFIX).",
    )(command)
    return click.option(
        "--redis-url",
        envvar="TICKWORK_REDIS_URL",
        default="redis://127.0.0.1:6379/0",
        show_default=True,
        callback=_redis_url,
        help="Redis for queues, leases and events (env TICKWORK_REDIS_URL).",
    )(command)


def _redis_url(_ctx: click.Context, _param: click.Parameter, url: str) -> str:
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise click.BadParameter("expected a redis://, rediss:// or unix:// URL")
    return url


def _common_options(command: F) -> F:
    command = click.option(
        "--log-level", envvar="TICKWORK_LOG_LEVEL", default="INFO", show_default=True
    )(command)
    return click.option(
        "--metrics-port",
        envvar="TICKWORK_METRICS_PORT",
        type=click.IntRange(0, 65535),
        default=0,
        help="Serve Prometheus metrics on this port (env TICKWORK_METRICS_PORT; 0: off).",
    )(command)


def _seconds(name: str, envvar: str, default: float, doc: str) -> Callable[[F], F]:
    return click.option(
        name,
        envvar=envvar,
        type=click.FloatRange(min=0.1),
        default=default,
        show_default=True,
        help=f"{doc} (env {envvar}).",
    )


def _log_bytes(name: str, envvar: str, default: int, doc: str) -> Callable[[F], F]:
    return click.option(
        name,
        envvar=envvar,
        type=click.IntRange(min=0),
        default=default,
        show_default=True,
        help=f"{doc} (env {envvar}).",
    )


def _limit(name: str, envvar: str, doc: str) -> Callable[[F], F]:
    return click.option(
        name,
        envvar=envvar,
        type=click.IntRange(min=0),
        default=0,
        help=f"The {doc} of each task's process; 0: none (env {envvar}).",
    )


@click.command("scheduler")
@DATABASE_OPTION
@_common_options
def scheduler_command(database_url: str, metrics_port: int, log_level: str) -> None:
    """Run the scheduler: emit one session per scheduled time until SIGTERM."""
    from services.scheduler.config import SchedulerSettings
    from services.scheduler.main import serve

    configure_logging(log_level.upper())
    try:
        serve(
            SchedulerSettings.from_environment(
                database_url=database_url, metrics_port=metrics_port, log_level=log_level.upper()
            )
        )
    except (InvalidConfig, StoreUnavailable) as exc:
        fail(f"error: {exc}", exc)


@click.command("executor")
@DATABASE_OPTION
@_redis_options
@_seconds("--reaper-interval", "TICKWORK_REAPER_SECONDS", 5.0, "Seconds between reaper passes")
@click.option(
    "--max-lost-leases",
    envvar="TICKWORK_MAX_LOST_LEASES",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="A task whose agent was lost this many times fails (env TICKWORK_MAX_LOST_LEASES).",
)
@click.option(
    "--max-tasks-per-attempt",
    envvar="TICKWORK_MAX_TASKS_PER_ATTEMPT",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="Tasks one attempt may have, generated ones included; a task that would generate "
    "more fails (env TICKWORK_MAX_TASKS_PER_ATTEMPT).",
)
@click.option(
    "--task-timeout",
    envvar="TICKWORK_TASK_TIMEOUT_SECONDS",
    type=click.FloatRange(min=1),
    default=86400.0,
    show_default=True,
    help="Time limit of one operator run, in seconds (env TICKWORK_TASK_TIMEOUT_SECONDS).",
)
@click.option(
    "--partitions",
    envvar="TICKWORK_EXECUTOR_PARTITIONS",
    type=click.IntRange(1, MAX_PARTITION_COUNT),
    default=DEFAULT_PARTITION_COUNT,
    show_default=True,
    help="Partitions the attempts are spread over among the running executors; every "
    "executor of a deployment uses the same number (env TICKWORK_EXECUTOR_PARTITIONS).",
)
@_common_options
def executor_command(
    database_url: str,
    redis_url: str,
    redis_prefix: str,
    reaper_interval: float,
    max_lost_leases: int,
    max_tasks_per_attempt: int,
    task_timeout: float,
    partitions: int,
    metrics_port: int,
    log_level: str,
) -> None:
    """Run the executor: start attempts, dispatch their tasks to agents, apply results."""
    from services.executor.config import ExecutorSettings
    from services.executor.main import serve

    configure_logging(log_level.upper())
    try:
        settings = ExecutorSettings.from_environment(
            os.environ,
            database_url=database_url,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
            reaper_seconds=reaper_interval,
            max_lost_leases=max_lost_leases,
            max_tasks_per_attempt=max_tasks_per_attempt,
            task_timeout_seconds=task_timeout,
            executor_partitions=partitions,
            metrics_port=metrics_port,
            log_level=log_level.upper(),
        )
        serve(settings)
    except (InvalidConfig, StoreUnavailable) as exc:
        fail(f"error: {exc}", exc)
    except RedisError as exc:
        fail_unavailable(f"error: cannot use Redis at {printable_url(redis_url)}: {exc}")


def _queues(_ctx: click.Context, _param: click.Parameter, raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    if not names:
        raise click.BadParameter("name at least one queue")
    for name in names:
        if not QUEUE_NAME.fullmatch(name):
            raise click.BadParameter(
                f"{name!r} is not a queue name (letters, digits, '_', '.', '-'; up to 64)"
            )
    return names


@click.command("agent")
@_redis_options
@click.option(
    "--queues",
    envvar="TICKWORK_AGENT_QUEUES",
    default=DEFAULT_QUEUE,
    show_default=True,
    callback=_queues,
    help="Comma-separated queues to serve; `_queue: NAME` routes a task there "
    "(env TICKWORK_AGENT_QUEUES).",
)
@click.option(
    "--concurrency",
    envvar="TICKWORK_AGENT_CONCURRENCY",
    type=click.IntRange(1, 1024),
    default=os.cpu_count() or 1,
    show_default="CPU count",
    help="Tasks run at once, each in its own worker process (env TICKWORK_AGENT_CONCURRENCY).",
)
@_seconds(
    "--grace",
    "TICKWORK_AGENT_GRACE_SECONDS",
    30.0,
    "After SIGTERM, how long running tasks may finish before they are given back",
)
@_seconds("--lease-ttl", "TICKWORK_LEASE_TTL_SECONDS", 30.0, "Lease time to live")
@_seconds("--heartbeat", "TICKWORK_HEARTBEAT_SECONDS", 10.0, "Seconds between lease extensions")
@click.option(
    "--work-dir",
    envvar="TICKWORK_AGENT_WORK_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the agent keeps task logs while it streams them (default: a temporary "
    "directory; env TICKWORK_AGENT_WORK_DIR).",
)
@_log_bytes(
    "--log-head-bytes",
    "TICKWORK_AGENT_LOG_HEAD_BYTES",
    DEFAULT_LOG_HEAD_BYTES,
    "Bytes kept of the start of a task's log (streamed as written)",
)
@_log_bytes(
    "--log-tail-bytes",
    "TICKWORK_AGENT_LOG_TAIL_BYTES",
    DEFAULT_LOG_TAIL_BYTES,
    "Bytes kept of the end of a task's log; what lies between head and tail is cut and "
    "a line [tickwork: N bytes cut here] stands for it",
)
@_limit("--max-memory-mb", "TICKWORK_TASK_MAX_MEMORY_MB", "address-space limit, in MiB")
@_limit("--max-open-files", "TICKWORK_TASK_MAX_OPEN_FILES", "open-file limit")
@_limit("--max-cpu-seconds", "TICKWORK_TASK_MAX_CPU_SECONDS", "CPU-time limit, in seconds")
@_common_options
def agent_command(
    redis_url: str,
    redis_prefix: str,
    queues: tuple[str, ...],
    concurrency: int,
    grace: float,
    lease_ttl: float,
    heartbeat: float,
    work_dir: Path | None,
    log_head_bytes: int,
    log_tail_bytes: int,
    max_memory_mb: int,
    max_open_files: int,
    max_cpu_seconds: int,
    metrics_port: int,
    log_level: str,
) -> None:
    """Run an agent: a Celery worker that runs tasks under leases. It needs Redis only."""
    from services.agent.config import AgentSettings
    from services.agent.main import serve

    configure_logging(log_level.upper())
    if heartbeat >= lease_ttl:
        fail(
            f"error: --heartbeat ({heartbeat:g}s) must be shorter than --lease-ttl "
            f"({lease_ttl:g}s), or leases expire between extensions"
        )
    if os.environ.pop("TICKWORK_DATABASE_URL", None) is not None:
        click.echo("warning: agents do not use TICKWORK_DATABASE_URL; ignoring it", err=True)
    try:
        settings = AgentSettings.from_environment(
            os.environ,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
            agent_queues=queues,
            agent_concurrency=concurrency,
            agent_grace_seconds=grace,
            lease_ttl_seconds=lease_ttl,
            heartbeat_seconds=heartbeat,
            agent_work_dir=work_dir or _temporary_directory("tickwork-agent-"),
            agent_log_head_bytes=log_head_bytes,
            agent_log_tail_bytes=log_tail_bytes,
            task_max_memory_mb=max_memory_mb,
            task_max_open_files=max_open_files,
            task_max_cpu_seconds=max_cpu_seconds,
            metrics_port=metrics_port,
            log_level=log_level.upper(),
        )
    except InvalidConfig as exc:
        fail(f"error: {exc}")
    serve(settings)


def _temporary_directory(prefix: str) -> Path:
    """A new directory removed when the process exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)
