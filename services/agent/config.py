"""The agent's settings: ``TICKWORK_*`` variables, read once, flags overriding them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.agent.log_limits import DEFAULT_LOG_HEAD_BYTES, DEFAULT_LOG_TAIL_BYTES, LogLimits
from services.agent.operators.base import ResourceLimits
from shared.config import (
    COMMON_SETTINGS,
    REDIS_SETTINGS,
    Setting,
    SettingValues,
    count_setting,
    int_range,
    invalid,
    log_level,
    port_setting,
    redis_url,
    seconds_at_least,
)
from shared.dispatch.celery_app import RedisSettings
from shared.dispatch.messages import DEFAULT_QUEUE
from shared.domain.workflow import QUEUE_NAME

AGENT_SETTINGS = (
    *REDIS_SETTINGS,
    Setting("TICKWORK_AGENT_QUEUES", DEFAULT_QUEUE, "comma-separated queues to serve"),
    Setting("TICKWORK_AGENT_CONCURRENCY", str(os.cpu_count() or 1), "tasks run at once"),
    Setting("TICKWORK_AGENT_GRACE_SECONDS", "30.0", "after SIGTERM, time for running tasks"),
    Setting("TICKWORK_LEASE_TTL_SECONDS", "30.0", "lease time to live"),
    Setting("TICKWORK_HEARTBEAT_SECONDS", "10.0", "seconds between lease extensions"),
    Setting("TICKWORK_AGENT_WORK_DIR", "", "where task logs wait to be streamed; required"),
    Setting("TICKWORK_AGENT_LOG_HEAD_BYTES", str(DEFAULT_LOG_HEAD_BYTES), "log start kept"),
    Setting("TICKWORK_AGENT_LOG_TAIL_BYTES", str(DEFAULT_LOG_TAIL_BYTES), "log end kept"),
    Setting("TICKWORK_TASK_MAX_MEMORY_MB", "0", "address-space limit of a task's process; 0: none"),
    Setting("TICKWORK_TASK_MAX_OPEN_FILES", "0", "open-file limit of a task's process; 0: none"),
    Setting("TICKWORK_TASK_MAX_CPU_SECONDS", "0", "CPU-time limit of a task's process; 0: none"),
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
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    log_limits: LogLimits = field(default_factory=LogLimits)
    log_level: str = "WARNING"
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
        values = SettingValues(AGENT_SETTINGS, environ, overrides)
        at_least_a_tenth = seconds_at_least(0.1)
        settings = cls(
            redis=RedisSettings(values.get("redis_url", redis_url), values.text("redis_prefix")),
            queues=values.get("agent_queues", queue_names),
            concurrency=values.get("agent_concurrency", int_range(1, 1024)),
            grace_seconds=values.get("agent_grace_seconds", at_least_a_tenth),
            lease_ttl_seconds=values.get("lease_ttl_seconds", at_least_a_tenth),
            heartbeat_seconds=values.get("heartbeat_seconds", at_least_a_tenth),
            work_dir=Path(values.get("agent_work_dir", _work_dir)),
            limits=ResourceLimits(
                values.get("task_max_memory_mb", count_setting),
                values.get("task_max_open_files", count_setting),
                values.get("task_max_cpu_seconds", count_setting),
            ),
            log_limits=LogLimits(
                values.get("agent_log_head_bytes", count_setting),
                values.get("agent_log_tail_bytes", count_setting),
            ),
            log_level=values.get("log_level", log_level),
            metrics_port=values.get("metrics_port", port_setting),
        )
        if settings.heartbeat_seconds >= settings.lease_ttl_seconds:
            raise invalid(
                "TICKWORK_HEARTBEAT_SECONDS",
                f"{settings.heartbeat_seconds:g}s must be shorter than "
                f"TICKWORK_LEASE_TTL_SECONDS ({settings.lease_ttl_seconds:g}s), "
                "or leases expire between extensions",
            )
        return settings


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


def _work_dir(values: Mapping[str, str], name: str) -> str:
    if not values[name].strip():
        raise invalid(name, "must be set (the command line uses a temporary directory)")
    return values[name]
