"""The agent's settings: ``TICKWORK_*`` variables, read once, flags overriding them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tickwork.services.agent.log_limits import (
    DEFAULT_LOG_HEAD_BYTES,
    DEFAULT_LOG_TAIL_BYTES,
    LogLimits,
)
from tickwork.shared.config import (
    COMMON_SETTINGS,
    LOG_LEVEL,
    REDIS_SETTINGS,
    TASK_LIMIT_SETTINGS,
    Setting,
    SettingValues,
    count_setting,
    int_range,
    invalid,
    seconds_at_least,
)
from tickwork.shared.dispatch.messages import DEFAULT_QUEUE
from tickwork.shared.domain.workflow import QUEUE_NAME

# The table is read by `tickwork agent --help`: what only reading the settings needs
# (Celery, the operators) is imported when they are read, so that the help starts fast.
if TYPE_CHECKING:
    from tickwork.services.agent.operators.base import ResourceLimits
    from tickwork.shared.dispatch.celery_app import RedisSettings


def queue_names(values: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Comma-separated queue names; InvalidConfig naming the variable if one is not."""
    names = tuple(part.strip() for part in values[name].split(",") if part.strip())
    if not names:
        raise invalid(name, "name at least one queue")
    for queue in names:
        if not QUEUE_NAME.fullmatch(queue):
            raise invalid(
                name, f"{queue!r} is not a queue name (letters, digits, '_', '.', '-'; up to 64)"
            )
    return names


def work_dir(values: Mapping[str, str], name: str) -> str:
    """The agent's work directory, which must be set; InvalidConfig naming it otherwise."""
    if not values[name].strip():
        raise invalid(name, "must be set (the command line uses a temporary directory)")
    if Path(values[name]).exists() and not Path(values[name]).is_dir():
        raise invalid(name, f"{values[name]!r} is a file, not a directory")
    return values[name]


AT_LEAST_A_TENTH = seconds_at_least(0.1)

AGENT_SETTINGS = (
    *REDIS_SETTINGS,
    Setting(
        "TICKWORK_AGENT_QUEUES",
        DEFAULT_QUEUE,
        "comma-separated queues to serve",
        queue_names,
        "--queues",
        "NAMES",
        "Comma-separated queues to serve; `_queue: NAME` routes a task there",
    ),
    Setting(
        "TICKWORK_AGENT_CONCURRENCY",
        str(os.cpu_count() or 1),
        "tasks run at once",
        int_range(1, 1024),
        "--concurrency",
        "1-1024",
        "Tasks run at once, each in its own worker process",
        shown_default="CPU count",
    ),
    Setting(
        "TICKWORK_AGENT_GRACE_SECONDS",
        "30.0",
        "after SIGTERM, time for running tasks",
        AT_LEAST_A_TENTH,
        "--grace",
        "SECONDS",
        "After SIGTERM, how long running tasks may finish before they are given back",
    ),
    Setting(
        "TICKWORK_LEASE_TTL_SECONDS",
        "30.0",
        "lease time to live",
        AT_LEAST_A_TENTH,
        "--lease-ttl",
        "SECONDS",
    ),
    Setting(
        "TICKWORK_HEARTBEAT_SECONDS",
        "10.0",
        "seconds between lease extensions",
        AT_LEAST_A_TENTH,
        "--heartbeat",
        "SECONDS",
    ),
    Setting(
        "TICKWORK_AGENT_WORK_DIR",
        "",
        "where task logs wait to be streamed; required",
        work_dir,
        "--work-dir",
        "DIRECTORY",
        "Where the agent keeps task logs while it streams them",
        shown_default="a temporary directory",
    ),
    Setting(
        "TICKWORK_AGENT_LOG_HEAD_BYTES",
        str(DEFAULT_LOG_HEAD_BYTES),
        "log start kept",
        count_setting,
        "--log-head-bytes",
        "BYTES",
        "Bytes kept of the start of a task's log (streamed as written)",
    ),
    Setting(
        "TICKWORK_AGENT_LOG_TAIL_BYTES",
        str(DEFAULT_LOG_TAIL_BYTES),
        "log end kept",
        count_setting,
        "--log-tail-bytes",
        "BYTES",
        "Bytes kept of the end of a task's log; what lies between head and tail is cut and "
        "a line [tickwork: N bytes cut here] stands for it",
    ),
    *TASK_LIMIT_SETTINGS,
    *COMMON_SETTINGS,
)
"""Every variable ``tickwork agent`` reads, with its default and meaning."""


@dataclass(frozen=True)
class AgentSettings:
    """What one ``tickwork agent`` runs with."""

    redis: RedisSettings
    queues: tuple[str, ...]
    concurrency: int
    grace_seconds: float
    lease_ttl_seconds: float
    heartbeat_seconds: float
    work_dir: Path
    limits: ResourceLimits = field(default_factory=lambda: _resource_limits(0, 0, 0))
    log_limits: LogLimits = field(default_factory=LogLimits)
    log_level: str = LOG_LEVEL.default
    metrics_port: int = 0

    @property
    def done_mark_ms(self) -> int:
        """How long a finished run's ``done`` mark refuses duplicates of its message."""
        return int(max(10 * self.lease_ttl_seconds, 300) * 1000)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> AgentSettings:
        """Read the settings (``overrides`` by key, e.g. ``agent_concurrency=4``, win over
        the environment); raises InvalidConfig naming the variable on a bad value."""
        from tickwork.shared.dispatch.celery_app import RedisSettings

        values = SettingValues(AGENT_SETTINGS, environ, overrides)
        settings = cls(
            redis=RedisSettings(values.value("redis_url"), values.value("redis_prefix")),
            queues=values.value("agent_queues"),
            concurrency=values.value("agent_concurrency"),
            grace_seconds=values.value("agent_grace_seconds"),
            lease_ttl_seconds=values.value("lease_ttl_seconds"),
            heartbeat_seconds=values.value("heartbeat_seconds"),
            work_dir=Path(values.value("agent_work_dir")),
            limits=_resource_limits(
                values.value("task_max_memory_mb"),
                values.value("task_max_open_files"),
                values.value("task_max_cpu_seconds"),
            ),
            log_limits=LogLimits(
                values.value("agent_log_head_bytes"), values.value("agent_log_tail_bytes")
            ),
            log_level=values.value("log_level"),
            metrics_port=values.value("metrics_port"),
        )
        if settings.heartbeat_seconds >= settings.lease_ttl_seconds:
            raise invalid(
                "TICKWORK_HEARTBEAT_SECONDS",
                f"{settings.heartbeat_seconds:g}s must be shorter than "
                f"TICKWORK_LEASE_TTL_SECONDS ({settings.lease_ttl_seconds:g}s), "
                "or leases expire between extensions",
            )
        return settings


def _resource_limits(memory_mb: int, open_files: int, cpu_seconds: int) -> ResourceLimits:
    from tickwork.services.agent.operators.base import ResourceLimits

    return ResourceLimits(memory_mb, open_files, cpu_seconds)
