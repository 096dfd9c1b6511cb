"""The executor's settings: ``TICKWORK_*`` variables, read once, flags overriding them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.executor.report import Recovery
from services.executor.scope import MAX_TASKS_PER_ATTEMPT
from shared.config import (
    COMMON_SETTINGS,
    REDIS_SETTINGS,
    Setting,
    SettingValues,
    int_range,
    log_level,
    one_of,
    port_setting,
    redis_url,
    required_text,
    seconds_at_least,
)
from shared.dispatch.celery_app import RedisSettings
from shared.dispatch.celery_dispatch import CRASH_POINTS
from shared.domain.partitions import DEFAULT_PARTITION_COUNT, MAX_PARTITION_COUNT

EXECUTOR_SETTINGS = (
    Setting("TICKWORK_DATABASE_URL", "", "the store (PostgreSQL in production); required"),
    *REDIS_SETTINGS,
    Setting("TICKWORK_REAPER_SECONDS", "5.0", "seconds between reaper passes"),
    Setting("TICKWORK_MAX_LOST_LEASES", "3", "a task whose agent was lost this many times fails"),
    Setting("TICKWORK_MAX_TASKS_PER_ATTEMPT", "10000", "tasks one attempt may have, generated too"),
    Setting("TICKWORK_TASK_TIMEOUT_SECONDS", "86400", "time limit of one operator run"),
    Setting(
        "TICKWORK_EXECUTOR_PARTITIONS",
        str(DEFAULT_PARTITION_COUNT),
        "partitions attempts are spread over among executors; the same in every executor",
    ),
    Setting("TICKWORK_CRASH_POINT", "", "fault tests only: exit at this point of a dispatch"),
    *COMMON_SETTINGS,
)
"""Every variable ``tickwork executor`` reads, with its default and meaning."""


@dataclass(frozen=True)
class ExecutorSettings:
    """What one ``tickwork executor`` runs with."""

    database_url: str
    redis: RedisSettings
    recovery: Recovery
    task_timeout_seconds: float | None = None
    crash_point: str = ""  # a fault test's, one of CRASH_POINTS
    max_tasks_per_attempt: int = MAX_TASKS_PER_ATTEMPT
    metrics_port: int = 0
    log_level: str = "INFO"
    partition_count: int = DEFAULT_PARTITION_COUNT

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ExecutorSettings:
        """Read the settings (``overrides`` by key, e.g. ``reaper_seconds=2.0``, win over
        the environment); raises InvalidConfig naming the variable on a bad value."""
        values = SettingValues(EXECUTOR_SETTINGS, environ, overrides)
        crash_points = f"the crash points are {', '.join(CRASH_POINTS)}"
        return cls(
            database_url=values.get("database_url", required_text),
            redis=RedisSettings(values.get("redis_url", redis_url), values.text("redis_prefix")),
            recovery=Recovery(
                every_seconds=values.get("reaper_seconds", seconds_at_least(0.1)),
                max_lost=values.get("max_lost_leases", int_range(1, 100)),
            ),
            task_timeout_seconds=values.get("task_timeout_seconds", seconds_at_least(1.0)),
            crash_point=values.get("crash_point", one_of(CRASH_POINTS, crash_points)),
            max_tasks_per_attempt=values.get("max_tasks_per_attempt", int_range(1)),
            metrics_port=values.get("metrics_port", port_setting),
            log_level=values.get("log_level", log_level),
            partition_count=values.get("executor_partitions", int_range(1, MAX_PARTITION_COUNT)),
        )
