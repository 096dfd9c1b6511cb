"""The scheduler's settings: ``TICKWORK_*`` variables, read once, flags overriding them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwork.shared.config import COMMON_SETTINGS, LOG_LEVEL, Setting, SettingValues, required_text
from tickwork.shared.retention_policy import RETENTION_SETTINGS, RetentionPolicy

SCHEDULER_SETTINGS = (
    Setting(
        "TICKWORK_DATABASE_URL", "", "the store (PostgreSQL in production); required", required_text
    ),
    *COMMON_SETTINGS,
    *RETENTION_SETTINGS,
)
"""Every variable ``tickwork scheduler`` reads, with its default and meaning."""


@dataclass(frozen=True)
class SchedulerSettings:
    """What one ``tickwork scheduler`` runs with."""

    database_url: str
    metrics_port: int = 0
    log_level: str = LOG_LEVEL.default
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> SchedulerSettings:
        """Read the settings (``overrides`` by key, e.g. ``metrics_port=9100``, win over
        the environment); raises InvalidConfig naming the variable on a bad value."""
        values = SettingValues(SCHEDULER_SETTINGS, environ, overrides)
        return cls(
            database_url=values.value("database_url"),
            metrics_port=values.value("metrics_port"),
            log_level=values.value("log_level"),
            retention=RetentionPolicy.from_settings(values),
        )
