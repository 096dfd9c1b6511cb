"""What every operator gets and returns: the message, a log file, and the params it stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from shared.dispatch.messages import TaskMessage


@dataclass(frozen=True)
class ResourceLimits:
    """Limits on each operator's child process; zero means no limit."""

    max_memory_mb: int = 0
    max_open_files: int = 0

    def as_rlimits(self) -> dict[str, int]:
        """``resource`` limit names and values to set; empty when nothing is limited."""
        limits: dict[str, int] = {}
        if self.max_memory_mb:
            limits["RLIMIT_AS"] = self.max_memory_mb * 1024 * 1024
        if self.max_open_files:
            limits["RLIMIT_NOFILE"] = self.max_open_files
        if limits:
            limits["RLIMIT_CORE"] = 0  # a limited child that crashes leaves no core file
        return limits


class OperatorFailed(Exception):
    """Raised by an operator when its task fails; the message becomes ``${error.message}``."""


@dataclass
class OperatorContext:
    """One run of one operator task on an agent."""

    message: TaskMessage
    log_file: IO[str]
    log_path: Path
    limits: ResourceLimits = field(default_factory=ResourceLimits)

    @property
    def project_dir(self) -> Path:
        """The directory the task runs in."""
        return Path(self.message.project_dir)

    written: list[str] = field(default_factory=list)  # what write_log wrote
    child_wrote: bool = False  # a child process wrote into the log file too

    def write_log(self, text: str) -> None:
        """Append text to the task's log."""
        self.log_file.write(text)
        self.log_file.flush()
        self.written.append(text)


class Operator(Protocol):
    """Runs a task; returns the params it stores for later tasks, or raises OperatorFailed."""

    def __call__(self, context: OperatorContext) -> dict[str, Any]: ...
