"""Configuration from ``TICKWORK_*`` environment variables, read once into frozen dataclasses.

Each service declares its variables as a table of :class:`Setting` in its own
``config.py`` and reads them with :class:`SettingValues`: a flag given on the command
line overrides its variable, and a bad value raises InvalidConfig naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from shared.errors import InvalidConfig, Problem


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default and one-line meaning."""

    name: str
    default: str
    doc: str

    @property
    def key(self) -> str:
        """The name a flag overrides it by: ``TICKWORK_REAPER_SECONDS`` -> ``reaper_seconds``."""
        return self.name.removeprefix("TICKWORK_").lower()


T = TypeVar("T")


class SettingValues:
    """The raw values of declared settings, from the environment (or their defaults),
    with overrides (flags given on the command line) taking their place.

    An override is already a typed value and is used as it is; a variable that is
    overridden is not read, so a bad value there does not matter.
    """

    def __init__(
        self,
        declared: Iterable[Setting],
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.declared = {s.key: s for s in declared}
        self.raw = {s.name: env.get(s.name, s.default) for s in self.declared.values()}
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        unknown = sorted(set(self.overrides) - set(self.declared))
        if unknown:
            raise TypeError(f"no such setting: {', '.join(unknown)}")

    def get(self, key: str, parse: Callable[[Mapping[str, str], str], T]) -> T:
        """The override for ``key`` if given, else its variable read by ``parse``."""
        if key in self.overrides:
            return self.overrides[key]  # type: ignore[no-any-return]
        return parse(self.raw, self.declared[key].name)

    def text(self, key: str) -> str:
        """The setting as given (an empty string when unset and without default)."""
        return self.get(key, lambda values, name: values[name])


def invalid(name: str, message: str) -> InvalidConfig:
    """InvalidConfig naming the variable ``name``."""
    return InvalidConfig(str(Problem(name, None, message)))


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


def log_level(values: Mapping[str, str], name: str) -> str:
    """The setting ``name`` as a log level name; InvalidConfig naming it otherwise."""
    return _log_level(values, name)


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


def required_text(values: Mapping[str, str], name: str) -> str:
    """The setting ``name``, which must be set; InvalidConfig naming it otherwise."""
    if not values[name].strip():
        raise invalid(name, "must be set")
    return values[name]


def port_setting(values: Mapping[str, str], name: str) -> int:
    """The setting ``name`` as a TCP port, 0 for none; InvalidConfig naming it otherwise."""
    port = count_setting(values, name)
    if port > 65535:
        raise invalid(name, f"expected a port (0-65535), got {values[name]!r}")
    return port


def int_range(minimum: int, maximum: int | None = None) -> Callable[[Mapping[str, str], str], int]:
    """A parser of an integer in ``[minimum, maximum]``, naming the variable when it is not."""

    def parse(values: Mapping[str, str], name: str) -> int:
        number = _integer(values, name, minimum=minimum)
        if maximum is not None and number > maximum:
            raise invalid(name, f"expected at most {maximum}, got {values[name]!r}")
        return number

    return parse


def seconds_at_least(minimum: float) -> Callable[[Mapping[str, str], str], float]:
    """A parser of a number of seconds >= ``minimum``, naming the variable when it is not."""

    def parse(values: Mapping[str, str], name: str) -> float:
        raw = values[name]
        try:
            number = float(raw)
        except ValueError:
            number = float("nan")
        if not number >= minimum:
            raise invalid(name, f"expected a number of seconds >= {minimum:g}, got {raw!r}")
        return number

    return parse


def one_of(choices: Iterable[str], message: str) -> Callable[[Mapping[str, str], str], str]:
    """A parser of a value among ``choices`` (or empty); ``message`` says which they are."""
    allowed = frozenset(choices)

    def parse(values: Mapping[str, str], name: str) -> str:
        if values[name] and values[name] not in allowed:
            raise invalid(name, message)
        return values[name]

    return parse


REDIS_SETTINGS = (
    Setting("TICKWORK_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis for queues, leases, events"),
    Setting("TICKWORK_REDIS_PREFIX", "tickwork:", "prefix of every Redis key, queues included"),
)
"""The Redis settings the executor and agents share."""

COMMON_SETTINGS = (
    Setting("TICKWORK_METRICS_PORT", "0", "port of /metrics and the probes; 0: off"),
    Setting("TICKWORK_LOG_LEVEL", "INFO", "level of the service's log lines"),
)
"""Settings every long-running service has."""


def redis_url(values: Mapping[str, str], name: str) -> str:
    """The setting ``name`` as a Redis URL; InvalidConfig naming it otherwise."""
    url = values[name]
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise invalid(name, "expected a redis://, rediss:// or unix:// URL")
    return url
