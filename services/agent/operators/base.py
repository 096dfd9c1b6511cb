"""What every operator gets and returns: the message, a log file, and the params it stores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from shared.dispatch.messages import TaskMessage


class OperatorFailed(Exception):
    """Raised by an operator when its task fails; the message becomes ``${error.message}``."""


@dataclass
class OperatorContext:
    """One run of one operator task on an agent."""

    message: TaskMessage
    log_file: IO[str]
    log_path: Path

    @property
    def project_dir(self) -> Path:
        """The directory the task runs in."""
        return Path(self.message.project_dir)

    def write_log(self, text: str) -> None:
        """Append text to the task's log."""
        self.log_file.write(text)
        self.log_file.flush()


class Operator(Protocol):
    """Runs a task; returns the params it stores for later tasks, or raises OperatorFailed."""

    def __call__(self, context: OperatorContext) -> dict[str, Any]: ...
