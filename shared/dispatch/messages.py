"""The messages between executor and agent: JSON-safe dataclasses, nothing else crosses."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


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

    def to_json(self) -> dict[str, Any]:
        """The JSON body of the message."""
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TaskMessage:
        """Inverse of :meth:`to_json`."""
        return cls(**body)


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
    log_size_bytes: int = 0
    output_lines: list[str] = field(default_factory=list)  # a short head of the log

    def to_json(self) -> dict[str, Any]:
        """The JSON body of the message."""
        return asdict(self)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TaskFinished:
        """Inverse of :meth:`to_json`."""
        return cls(**{**body, "outcome": Outcome(body["outcome"])})


TaskEvent = TaskStarted | TaskFinished
