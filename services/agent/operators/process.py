"""Running a child process for an operator: own process group, log capture, time limit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence

from services.agent.operators.base import OperatorContext, OperatorFailed

KILL_GRACE_SECONDS = 5.0

_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


def run_child(
    context: OperatorContext,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdin_text: str | None = None,
) -> int:
    """Run ``argv`` in the project directory with output into the task log; its exit code.

    The child leads its own process group, so a timeout kills everything it started.
    """
    timeout = context.message.timeout_seconds
    try:
        child = subprocess.Popen(
            list(argv),
            cwd=context.project_dir,
            env=dict(env),
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=context.log_file,
            stderr=subprocess.STDOUT,
            process_group=0,
            text=True,
        )
    except OSError as exc:
        raise OperatorFailed(f"cannot start {argv[0]}: {exc}") from exc
    with _running_lock:
        _running.add(child)
    try:
        child.communicate(stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(child)
        raise OperatorFailed(f"timed out after {timeout:g}s") from None
    except BaseException:
        _kill_group(child)
        raise
    finally:
        with _running_lock:
            _running.discard(child)
    return child.returncode


def terminate_children() -> None:
    """Kill the process group of every child still running (the agent is shutting down)."""
    with _running_lock:
        children = list(_running)
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)


def _kill_group(child: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
