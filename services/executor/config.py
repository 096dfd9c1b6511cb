"""The executor's settings: ``TICKWORK_*`` variables, read once, flags overriding them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tickwork.shared.config import (
    COMMON_SETTINGS,
    LOG_LEVEL,
    MAX_TASKS_PER_ATTEMPT,
    REDIS_SETTINGS,
    TASK_TIMEOUT_SECONDS,
    Setting,
    SettingValues,
    int_range,
    one_of,
    required_text,
    seconds_at_least,
)
from tickwork.shared.domain.partitions import DEFAULT_PARTITION_COUNT, MAX_PARTITION_COUNT

# The table is read by `tickwork executor --help`: what only reading the settings needs
# (Celery, the store) is imported when they are read, so that the help starts fast.
if TYPE_CHECKING:
    from tickwork.services.executor.report import Recovery
    from tickwork.shared.dispatch.celery_app import RedisSettings


def crash_point(values: Mapping[str, str], name: str) -> str:
    """A fault test's crash point, one of CRASH_POINTS (or none)."""
    from tickwork.shared.dispatch.celery_dispatch import CRASH_POINTS

    return one_of(CRASH_POINTS, f"the crash points are {', '.join(CRASH_POINTS)}")(values, name)


EXECUTOR_SETTINGS = (
    Setting(
        "TICKWORK_DATABASE_URL", "", "the store (PostgreSQL in production); required", required_text
    ),
    *REDIS_SETTINGS,
    Setting(
        "TICKWORK_REAPER_SECONDS",
        "5.0",
        "seconds between reaper passes",
        seconds_at_least(0.1),
        "--reaper-interval",
        "SECONDS",
    ),
    Setting(
        "TICKWORK_MAX_LOST_LEASES",
        "3",
        "a task whose agent was lost this many times fails",
        int_range(1, 100),
        "--max-lost-leases",
        "1-100",
    ),
    MAX_TASKS_PER_ATTEMPT,
    TASK_TIMEOUT_SECONDS,
    Setting(
        "TICKWORK_EXECUTOR_PARTITIONS",
        str(DEFAULT_PARTITION_COUNT),
        "partitions attempts are spread over among executors; the same in every executor",
        int_range(1, MAX_PARTITION_COUNT),
        "--partitions",
        f"1-{MAX_PARTITION_COUNT}",
        "Partitions the attempts are spread over among the running executors; every "
        "executor of a deployment uses the same number",
    ),
    Setting(
        "TICKWORK_CRASH_POINT",
        "",
        "fault tests only: exit at this point of a dispatch",
        crash_point,
    ),
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
    max_tasks_per_attempt: int = int(MAX_TASKS_PER_ATTEMPT.default)
    metrics_port: int = 0
    log_level: str = LOG_LEVEL.default
    partition_count: int = DEFAULT_PARTITION_COUNT

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ExecutorSettings:
        """Read the settings (``overrides`` by key, e.g. ``reaper_seconds=2.0``, win over
        the environment); raises InvalidConfig naming the variable on a bad value."""
        from tickwork.services.executor.report import Recovery
        from tickwork.shared.dispatch.celery_app import RedisSettings

        values = SettingValues(EXECUTOR_SETTINGS, environ, overrides)
        return cls(
            database_url=values.value("database_url"),
            redis=RedisSettings(values.value("redis_url"), values.value("redis_prefix")),
            recovery=Recovery(
                every_seconds=values.value("reaper_seconds"),
                max_lost=values.value("max_lost_leases"),
            ),
            task_timeout_seconds=values.value("task_timeout_seconds"),
            crash_point=values.value("crash_point"),
            max_tasks_per_attempt=values.value("max_tasks_per_attempt"),
            metrics_port=values.value("metrics_port"),
            log_level=values.value("log_level"),
            partition_count=values.value("executor_partitions"),
        )
