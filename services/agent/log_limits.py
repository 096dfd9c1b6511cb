"""How much of a task's log an agent keeps: a module of its own, so that the CLI can
show the defaults without importing the agent's Redis and Celery code."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LOG_HEAD_BYTES = 32 * 1024 * 1024
DEFAULT_LOG_TAIL_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class LogLimits:
    """How much of a run's log is kept: its first ``head_bytes`` and last ``tail_bytes``."""

    head_bytes: int = DEFAULT_LOG_HEAD_BYTES
    tail_bytes: int = DEFAULT_LOG_TAIL_BYTES
