"""What every operator gets and returns: the message, a log file, and the params it stores."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Protocol

from tickwork.shared.dispatch.messages import TaskMessage
from tickwork.shared.errors import TaskFailed
from tickwork.shared.secrets import Masker


@dataclass(frozen=True)
class ResourceLimits:
    """Limits on each operator's child process; zero means no limit."""

    max_memory_mb: int = 0
    max_open_files: int = 0
    max_cpu_seconds: int = 0

    def as_rlimits(self) -> dict[str, int]:
        """``resource`` limit names and values to set; empty when nothing is limited."""
        limits: dict[str, int] = {}
        if self.max_memory_mb:
            limits["RLIMIT_AS"] = self.max_memory_mb * 1024 * 1024
        if self.max_open_files:
            limits["RLIMIT_NOFILE"] = self.max_open_files
        if self.max_cpu_seconds:
            limits["RLIMIT_CPU"] = self.max_cpu_seconds
        if limits:
            limits["RLIMIT_CORE"] = 0  # a limited child that crashes leaves no core file
        return limits


class StopReason(StrEnum):
    """Why an operator run was stopped from outside; the value is the message shown."""

    LEASE_LOST = "lost its lease"  # another agent may own the task now: report nothing
    SHUTDOWN = "the agent is shutting down"  # give the task back to be requeued at once
    KILLED = "killed"  # its attempt was killed: report nothing


class RunControl:
    """Stopping one operator run from outside: its lease was lost, it was killed, or the
    agent is shutting down. The operator's child process registers itself here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop_child: Callable[[], None] | None = None  # stops the running child
        self._child_ended: Callable[[], bool] | None = None  # has the child exited?
        self._child_done = False  # the last child started has ended and was seen to
        self._finished = False
        self.reason: StopReason | None = None  # why the run was stopped; None unless it was

    def attach(self, stop_child: Callable[[], None], child_ended: Callable[[], bool]) -> bool:
        """Register how to stop the child just started and how to tell whether it exited;
        False if the run is already stopped (the caller then stops the child itself)."""
        with self._lock:
            if self.reason is not None:
                return False
            self._stop_child, self._child_ended = stop_child, child_ended
            self._child_done = False
            return True

    def detach(self) -> None:
        """The child ended (the operator is about to return what it did)."""
        with self._lock:
            self._stop_child = self._child_ended = None
            self._child_done = True

    def finish(self) -> None:
        """The operator returned: from now on its outcome stands and stop() does nothing."""
        with self._lock:
            self._finished = True

    def stop(self, reason: StopReason | str) -> bool:
        """Stop the run unless the operator already returned; a running child is stopped
        in the background (SIGTERM to its group, SIGKILL after a grace). True if stopped.

        ``reason`` given as text must be one of :class:`StopReason`'s values (ValueError)."""
        reason = StopReason(reason)
        with self._lock:
            # A child that already exited has finished the operator's work, even if the
            # thread running the operator has not returned yet (the agent was stopped).
            ended = self._child_done or (self._child_ended is not None and self._child_ended())
            if self._finished or ended:
                return False
            if self.reason is None:
                self.reason = reason
            stop_child, self._stop_child = self._stop_child, None
        if stop_child is not None:
            threading.Thread(target=stop_child, name="stop-operator", daemon=True).start()
        return True


class OperatorFailed(TaskFailed):
    """Raised by an operator when its task fails; the message becomes ``${error.message}``."""


@dataclass
class OperatorContext:
    """One run of one operator task on an agent."""

    message: TaskMessage
    log_file: IO[str]
    log_path: Path
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    control: RunControl = field(default_factory=RunControl)

    @property
    def project_dir(self) -> Path:
        """The directory the task runs in."""
        return Path(self.message.project_dir)

    @property
    def working_dir(self) -> Path:
        """The folder the task's commands run in: its ``_workdir`` in the project
        directory. OperatorFailed if that folder leaves the project or does not exist."""
        root = self.project_dir.resolve()
        directory = (root / self.message.workdir).resolve()
        if not directory.is_relative_to(root):
            raise OperatorFailed(f"_workdir '{self.message.workdir}' is outside the project")
        if not directory.is_dir():
            raise OperatorFailed(f"_workdir '{self.message.workdir}' is not a folder")
        return directory

    written: list[str] = field(default_factory=list)  # what write_log wrote
    child_wrote: bool = False  # a child process wrote into the log file too
    # What a py> task produced besides its store: params exported to the subtasks it added
    # (``digdag.env.export``) and those subtasks, as a TaskSpec config (``^sub``).
    export: dict[str, Any] = field(default_factory=dict)
    subtasks: dict[str, Any] | None = None
    masker: Masker = field(default_factory=lambda: Masker(()))  # the task's secret values
    secrets: dict[str, str] = field(default_factory=dict, repr=False)  # decrypted, by name

    def write_log(self, text: str) -> None:
        """Append text to the task's log, secret values masked."""
        text = self.masker.mask(text)
        self.log_file.write(text)
        self.log_file.flush()
        self.written.append(text)


class Operator(Protocol):
    """Runs a task; returns the params it stores for later tasks, or raises OperatorFailed."""

    def __call__(self, context: OperatorContext) -> dict[str, Any]: ...
