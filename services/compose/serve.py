"""``tickwork scheduler``, ``tickwork executor`` and ``tickwork agent``: the services of the
distributed mode, each in its own process (``tickwork api`` is services/api/command.py,
``tickwork standalone`` services/compose/standalone.py).

The scheduler talks to PostgreSQL; the executor to PostgreSQL and Redis; agents to Redis
only. Every option is derived from the service's table of settings and can also be set by
the environment variable its help names (12-factor); a flag not given leaves the variable,
else the declared default, to decide.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from tickwork.services.agent.config import AGENT_SETTINGS
from tickwork.services.cli.errors import fail, fail_unavailable
from tickwork.services.compose.options import DATABASE_URL_OPTION
from tickwork.services.executor.config import EXECUTOR_SETTINGS
from tickwork.services.scheduler.config import SCHEDULER_SETTINGS
from tickwork.shared.config_options import setting_options
from tickwork.shared.errors import InvalidConfig, StoreUnavailable
from tickwork.shared.logging import configure_logging
from tickwork.shared.store.urls import printable_url

# Celery, Redis and the services' loops are imported by the commands that run them, so
# that the help of each starts fast.


@click.command("scheduler")
@DATABASE_URL_OPTION
@setting_options(SCHEDULER_SETTINGS)
def scheduler_command(database_url: str, **flags: Any) -> None:
    """Run the scheduler: emit one session per scheduled time until SIGTERM."""
    from tickwork.services.scheduler.config import SchedulerSettings
    from tickwork.services.scheduler.main import serve

    try:
        settings = SchedulerSettings.from_environment(database_url=database_url, **flags)
        configure_logging(settings.log_level)
        serve(settings)
    except (InvalidConfig, StoreUnavailable) as exc:
        fail(f"error: {exc}", exc)


@click.command("executor")
@DATABASE_URL_OPTION
@setting_options(EXECUTOR_SETTINGS)
def executor_command(database_url: str, **flags: Any) -> None:
    """Run the executor: start attempts, dispatch their tasks to agents, apply results."""
    from redis.exceptions import RedisError

    from tickwork.services.executor.config import ExecutorSettings
    from tickwork.services.executor.main import serve

    try:
        settings = ExecutorSettings.from_environment(os.environ, database_url=database_url, **flags)
        configure_logging(settings.log_level)
        serve(settings)
    except (InvalidConfig, StoreUnavailable) as exc:
        fail(f"error: {exc}", exc)
    except RedisError as exc:
        fail_unavailable(f"error: cannot use Redis at {printable_url(settings.redis.url)}: {exc}")


@click.command("agent")
@setting_options(AGENT_SETTINGS)
def agent_command(**flags: Any) -> None:
    """Run an agent: a Celery worker that runs tasks under leases. It needs Redis only."""
    from tickwork.services.agent.config import AgentSettings
    from tickwork.services.agent.main import serve

    if os.environ.pop("TICKWORK_DATABASE_URL", None) is not None:
        click.echo("warning: agents do not use TICKWORK_DATABASE_URL; ignoring it", err=True)
    if flags["agent_work_dir"] is None and not os.environ.get("TICKWORK_AGENT_WORK_DIR"):
        flags["agent_work_dir"] = str(_temporary_directory("tickwork-agent-"))
    try:
        settings = AgentSettings.from_environment(os.environ, **flags)
    except InvalidConfig as exc:
        fail(f"error: {exc}")
    configure_logging(settings.log_level)
    serve(settings)


def _temporary_directory(prefix: str) -> Path:
    """A new directory removed when the process exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return Path(path)
