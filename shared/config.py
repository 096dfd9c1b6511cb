"""Configuration from ``TICKWORK_*`` environment variables, read once into frozen dataclasses.

Each service declares its variables as a table of :class:`Setting` in its own
``config.py`` (name, default, meaning, parser with its bounds, command-line flag) and
reads them with :class:`SettingValues`: a flag given on the command line overrides its
variable, and a bad value raises InvalidConfig naming the variable. The command line's
options and the documented table of variables are derived from the same declarations.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from tickwork.shared.errors import InvalidConfig, Problem
from tickwork.shared.redis_url import BadRedisUrl, parse_redis_url

T = TypeVar("T")
Parser = Callable[[Mapping[str, str], str], Any]
"""Reads the variable ``name`` of ``values`` into its typed value, or raises InvalidConfig."""


def text_setting(values: Mapping[str, str], name: str) -> str:
    """The setting ``name`` as given (an empty string when unset and without default)."""
    return values[name]


@dataclass(frozen=True)
class Setting:
    """One environment variable, declared once: its name, default and one-line meaning,
    the parser that types and bounds it, and the command-line flag that overrides it.

    ``help`` is the flag's longer help (``doc`` when empty); ``shown_default`` is what a
    help shows as the default when the declared one is computed (``CPU count``).
    """

    name: str
    default: str
    doc: str
    parse: Parser = text_setting
    flag: str = ""
    metavar: str = "TEXT"
    help: str = ""
    shown_default: str = ""

    @property
    def key(self) -> str:
        """The name a flag overrides it by: ``TICKWORK_REAPER_SECONDS`` -> ``reaper_seconds``."""
        return self.name.removeprefix("TICKWORK_").lower()

    def parse_text(self, raw: str) -> Any:
        """``raw`` read as this setting's value; InvalidConfig naming the variable otherwise."""
        return self.parse({self.name: raw}, self.name)


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
        return self.get(key, text_setting)

    def value(self, key: str) -> Any:
        """The override for ``key`` if given, else its variable read by its declared parser."""
        return self.get(key, self.declared[key].parse)


def invalid(name: str, message: str) -> InvalidConfig:
    """InvalidConfig naming the variable ``name``."""
    return InvalidConfig(str(Problem(name, None, message)))


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


def redis_url(values: Mapping[str, str], name: str) -> str:
    """The setting ``name`` as a Redis URL; InvalidConfig naming it otherwise."""
    url = values[name]
    try:
        parse_redis_url(url)
    except BadRedisUrl as exc:
        raise invalid(name, str(exc)) from None
    return url


REDIS_SETTINGS = (
    Setting(
        "TICKWORK_REDIS_URL",
        "redis://127.0.0.1:6379/0",
        "Redis for queues, leases, events: redis://, rediss://, unix://, or its sentinels "
        "as sentinel://HOST:PORT,.../MASTER/DB (sentinels:// with TLS)",
        redis_url,
        "--redis-url",
        help="Redis for queues, leases and events (or sentinel://HOST:PORT,.../MASTER/DB)",
    ),
    Setting(
        "TICKWORK_REDIS_PREFIX",
        "tickwork:",
        "prefix of every Redis key, queues included",
        flag="--redis-prefix",
    ),
)
"""The Redis settings the executor and agents share."""

LOG_LEVEL = Setting(
    "TICKWORK_LOG_LEVEL",
    "INFO",
    "level of the service's log lines",
    log_level,
    "--log-level",
    "[DEBUG|INFO|WARNING|ERROR|CRITICAL]",
)
"""The level of a long-running service's log lines: INFO, so that state changes show."""

COMMON_SETTINGS = (
    Setting(
        "TICKWORK_METRICS_PORT",
        "0",
        "port of /metrics and the probes; 0: off",
        port_setting,
        "--metrics-port",
        "PORT",
        "Serve Prometheus metrics and the probes on this port; 0: off",
    ),
    LOG_LEVEL,
)
"""Settings every long-running service has."""

TASK_TIMEOUT_SECONDS = Setting(
    "TICKWORK_TASK_TIMEOUT_SECONDS",
    "86400",
    "time limit of one operator run",
    seconds_at_least(1.0),
    "--task-timeout",
    "SECONDS",
    "Time limit of one operator run, in seconds",
)

MAX_TASKS_PER_ATTEMPT = Setting(
    "TICKWORK_MAX_TASKS_PER_ATTEMPT",
    "10000",
    "tasks one attempt may have, generated too",
    int_range(1),
    "--max-tasks-per-attempt",
    "COUNT",
    "Tasks one attempt may have, generated ones included; a task that would generate more fails",
)

TASK_LIMIT_SETTINGS = (
    Setting(
        "TICKWORK_TASK_MAX_MEMORY_MB",
        "0",
        "address-space limit of a task's process; 0: none",
        count_setting,
        "--max-memory-mb",
        "MIB",
        "The address-space limit, in MiB, of each task's process; 0: none",
    ),
    Setting(
        "TICKWORK_TASK_MAX_OPEN_FILES",
        "0",
        "open-file limit of a task's process; 0: none",
        count_setting,
        "--max-open-files",
        "COUNT",
        "The open-file limit of each task's process; 0: none",
    ),
    Setting(
        "TICKWORK_TASK_MAX_CPU_SECONDS",
        "0",
        "CPU-time limit of a task's process; 0: none",
        count_setting,
        "--max-cpu-seconds",
        "SECONDS",
        "The CPU-time limit, in seconds, of each task's process; 0: none",
    ),
)
"""The resource limits of a task's process, the same in an agent and in one process."""

EMBEDDED_SETTINGS = (
    Setting("TICKWORK_STATE_DIR", "", "state directory (default: <project>/.tickwork)"),
    Setting("TICKWORK_DATABASE_URL", "", "database URL (default: SQLite in the state dir)"),
    Setting(
        "TICKWORK_MAX_TASK_THREADS", "8", "tasks run at once by the embedded agent", positive_int
    ),
    TASK_TIMEOUT_SECONDS,
    *TASK_LIMIT_SETTINGS,
    MAX_TASKS_PER_ATTEMPT,
    # One run on a terminal: its progress display speaks, the log only when something is wrong.
    replace(LOG_LEVEL, default="WARNING", doc="level of tickwork's own log lines"),
)
"""Every variable ``tickwork run`` reads, with its default and meaning."""


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
        values = SettingValues(EMBEDDED_SETTINGS, environ)
        state_dir = values.text("state_dir")
        return cls(
            state_dir=Path(state_dir) if state_dir else None,
            database_url=values.text("database_url") or None,
            max_task_threads=values.value("max_task_threads"),
            task_timeout_seconds=values.value("task_timeout_seconds"),
            task_max_memory_mb=values.value("task_max_memory_mb"),
            task_max_open_files=values.value("task_max_open_files"),
            task_max_cpu_seconds=values.value("task_max_cpu_seconds"),
            max_tasks_per_attempt=values.value("max_tasks_per_attempt"),
            log_level=values.value("log_level"),
        )
