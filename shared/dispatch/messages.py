"""The messages between executor and agent: JSON-safe dataclasses, nothing else crosses."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

DEFAULT_QUEUE = "default"
"""The queue of tasks without ``_queue``; ``tickwork agent`` serves it unless told otherwise."""


@dataclass(frozen=True)
class TaskMessage:
    """Everything an agent needs to run one operator task; it never reads the database."""

    task_id: int
    attempt_id: int
    lease_token: int
    full_name: str
    operator: str
    command: Any
    params: dict[str, Any]
    project_dir: str
    timeout_seconds: float | None = None
    queue: str = DEFAULT_QUEUE
    dispatched_at: float = 0.0  # unix seconds when the executor published it
    env: dict[str, str] = field(default_factory=dict)  # _env: variables for its processes
    # SHA-256 of the pushed project's archive: the agent runs the task in that archive's
    # files (fetched through Redis, see tickwork.shared.dispatch.archives) instead of project_dir.
    archive_digest: str | None = None
    # Secrets the task uses, by name, encrypted under TICKWORK_SECRET_KEY (never in clear);
    # ``<secret_marker>name<secret_marker>`` in command, env and params stands for a value.
    secrets: dict[str, str] = field(default_factory=dict)
    secret_marker: str = ""
    # The folder the task's commands run in (``_workdir``), from the project's root.
    workdir: str = ""
    # The partition of the attempt: the agent sends the task's events to its stream
    # (None: to the single stream of executors before partitions).
    event_partition: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON body of the message (shallow: its values are the message's own)."""
        return {name: getattr(self, name) for name in _MESSAGE_FIELDS}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TaskMessage:
        """Inverse of :meth:`to_json`; unknown keys (a newer executor's) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in body.items() if k in known})


_MESSAGE_FIELDS = tuple(f.name for f in fields(TaskMessage))

_UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9_.=-]+")


def run_log_path(message: TaskMessage) -> str:
    """The log file of the run of ``message``, relative to the log root:
    ``<attempt id>/<task name>.<task id>.<lease token>.log``; it never escapes the root.

    The agent writes it and the executor indexes it when it dispatches the run, so both
    name it here."""
    # The name is only for people; the task id and the token make the file unique.
    name = _UNSAFE_IN_FILE_NAME.sub("_", message.full_name).strip("._")[:120] or "task"
    file_name = f"{name}.{int(message.task_id)}.{int(message.lease_token)}.log"
    return f"{int(message.attempt_id)}/{file_name}"


def attempt_of_log_path(path: str) -> int | None:
    """The attempt a run's log name (:func:`run_log_path`) belongs to; None if it names none."""
    head, _, _ = path.partition("/")
    return int(head) if head.isascii() and head.isdigit() and len(head) <= 18 else None


class Outcome(StrEnum):
    """How an operator run ended."""

    SUCCESS = "success"
    ERROR = "error"


@dataclass(frozen=True)
class TaskStarted:
    """An agent took the task under ``lease_token`` and started the operator."""

    task_id: int
    lease_token: int
    started_at: float  # unix seconds


@dataclass(frozen=True)
class TaskFinished:
    """The operator ended; ``store`` holds the params it stored for later tasks."""

    task_id: int
    lease_token: int
    outcome: Outcome
    finished_at: float  # unix seconds
    store: dict[str, Any] = field(default_factory=dict)
    error_message: str | None = None
    log_path: str | None = None  # relative to the log root
    log_size_bytes: int = 0  # of the stored log
    log_truncated_bytes: int = 0  # cut from the middle of the log (head and tail kept)
    output_lines: list[str] = field(default_factory=list)  # a short head of the log
    # py>: params exported to the subtasks it added, and those subtasks (a ``^sub``
    # TaskSpec config, checked on the agent) for the executor to generate.
    export: dict[str, Any] = field(default_factory=dict)
    subtasks: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON body of the message (``log_truncated_bytes`` only when a log was cut,
        which an executor older than that field could not read)."""
        body = _shallow(self)
        if not self.log_truncated_bytes:
            del body["log_truncated_bytes"]
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TaskFinished:
        """Inverse of :meth:`to_json`; fields it does not know (a newer agent's) are
        left out."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in body.items() if k in known}
        return cls(**{**values, "outcome": Outcome(body["outcome"])})


@dataclass(frozen=True)
class TaskReleased:
    """An agent gave the task up unfinished (it is shutting down): requeue it at once."""

    task_id: int
    lease_token: int
    reason: str


@dataclass(frozen=True)
class TaskLogChunk:
    """``data`` at byte ``offset`` of the log of a task's run (``path``, its log name:
    ``<attempt id>/...``); the executor stores it in the run's pass. Chunks may repeat;
    storing one twice changes nothing."""

    task_id: int
    lease_token: int
    path: str
    offset: int
    data: str


@dataclass(frozen=True)
class WorkCommitted:
    """Another process committed work for the executor (a new attempt, a kill)."""


TaskEvent = TaskStarted | TaskFinished | TaskReleased | TaskLogChunk | WorkCommitted
"""What an executor hears: an agent's events (its log chunks too), and wake-ups."""
AgentEvent = TaskEvent

_EVENT_KINDS: dict[str, type[AgentEvent]] = {
    "wake": WorkCommitted,
    "started": TaskStarted,
    "finished": TaskFinished,
    "released": TaskReleased,
    "log": TaskLogChunk,
}
_KIND_OF = {cls: kind for kind, cls in _EVENT_KINDS.items()}


def event_to_json(event: AgentEvent) -> dict[str, Any]:
    """An event as JSON, with its ``kind``."""
    body = event.to_json() if isinstance(event, TaskFinished) else _shallow(event)
    return {"kind": _KIND_OF[type(event)], **body}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _shallow(event: Any) -> dict[str, Any]:
    """A dataclass's fields by name, its values as they are (``asdict`` would copy every
    nested value, for a body that is serialised at once)."""
    names = _FIELD_NAMES.get(type(event))
    if names is None:
        names = _FIELD_NAMES[type(event)] = tuple(f.name for f in fields(event))
    return {name: getattr(event, name) for name in names}


def event_from_json(body: dict[str, Any]) -> AgentEvent:
    """Inverse of :func:`event_to_json`; raises ValueError on an unknown or bad body."""
    kind = body.get("kind")
    cls = _EVENT_KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown event kind {kind!r}")
    values = {k: v for k, v in body.items() if k != "kind"}
    if cls is TaskFinished:
        return TaskFinished.from_json(values)
    try:
        return cls(**values)
    except TypeError as exc:
        raise ValueError(f"bad {kind} event: {exc}") from None
