"""Configuration from ``TICKWORK_*`` environment variables, read once into frozen dataclasses."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.errors import InvalidConfig, Problem


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default and one-line meaning."""

    name: str
    default: str
    doc: str


EMBEDDED_SETTINGS = (
    Setting("TICKWORK_STATE_DIR", "", "state directory (default: <project>/.tickwork)"),
    Setting("TICKWORK_DATABASE_URL", "", "database URL (default: SQLite in the state dir)"),
    Setting("TICKWORK_MAX_TASK_THREADS", "8", "tasks run at once by the embedded agent"),
    Setting("TICKWORK_TASK_TIMEOUT_SECONDS", "86400", "time limit of one operator run"),
    Setting("TICKWORK_TASK_MAX_MEMORY_MB", "0", "address-space limit of a task's process; 0: none"),
    Setting("TICKWORK_TASK_MAX_OPEN_FILES", "0", "open-file limit of a task's process; 0: none"),
    Setting("TICKWORK_TASK_MAX_CPU_SECONDS", "0", "CPU-time limit of a task's process; 0: none"),
    Setting("TICKWORK_MAX_TASKS_PER_ATTEMPT", "10000", "tasks one attempt may have, generated too"),
    Setting("TICKWORK_LOG_LEVEL", "WARNING", "level of tickwork's own log lines"),
)


@dataclass(frozen=True)
class EmbeddedConfig:
    """Settings of ``tickwork run``: one process, SQLite by default."""

    state_dir: Path | None
    database_url: str | None
    max_task_threads: int
    task_timeout_seconds: float
    task_max_memory_mb: int
    task_max_open_files: int
    task_max_cpu_seconds: int
    max_tasks_per_attempt: int
    log_level: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EmbeddedConfig:
        """Read the settings; raises InvalidConfig naming the variable on a bad value."""
        env = os.environ if environ is None else environ
        values = {s.name: env.get(s.name, s.default) for s in EMBEDDED_SETTINGS}
        state_dir = values["TICKWORK_STATE_DIR"]
        return cls(
            state_dir=Path(state_dir) if state_dir else None,
            database_url=values["TICKWORK_DATABASE_URL"] or None,
            max_task_threads=positive_int(values, "TICKWORK_MAX_TASK_THREADS"),
            task_timeout_seconds=float(positive_int(values, "TICKWORK_TASK_TIMEOUT_SECONDS")),
            task_max_memory_mb=count_setting(values, "TICKWORK_TASK_MAX_MEMORY_MB"),
            task_max_open_files=count_setting(values, "TICKWORK_TASK_MAX_OPEN_FILES"),
            task_max_cpu_seconds=count_setting(values, "TICKWORK_TASK_MAX_CPU_SECONDS"),
            max_tasks_per_attempt=positive_int(values, "TICKWORK_MAX_TASKS_PER_ATTEMPT"),
            log_level=_log_level(values, "TICKWORK_LOG_LEVEL"),
        )


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(values: Mapping[str, str], name: str) -> str:
    level = values[name].strip().upper()
    if level not in LOG_LEVELS:
        problem = Problem(
            name, None, f"expected one of {', '.join(LOG_LEVELS)}, got {values[name]!r}"
        )
        raise InvalidConfig(str(problem))
    return level


def positive_int(values: Mapping[str, str], name: str) -> int:
    """The setting ``name`` as an integer >= 1; InvalidConfig naming it otherwise."""
    return _integer(values, name, minimum=1)


def count_setting(values: Mapping[str, str], name: str) -> int:
    """The setting ``name`` as an integer >= 0; InvalidConfig naming it otherwise."""
    return _integer(values, name, minimum=0)


def _integer(values: Mapping[str, str], name: str, *, minimum: int) -> int:
    raw = values[name]
    try:
        number = int(raw)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        kind = "a positive integer" if minimum > 0 else "a whole number >= 0"
        problem = Problem(name, None, f"expected {kind}, got {raw!r}")
        raise InvalidConfig(str(problem))
    return number
