"""Running a child process for an operator: own process group, log capture, time limit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from services.agent.operators.base import OperatorContext, OperatorFailed, ResourceLimits

KILL_GRACE_SECONDS = 5.0

# Sets the limits in the child, asks Linux to kill it if the agent dies (so a task of a
# dead agent does not keep running beside its replacement), then becomes the command
# (isolated mode: no site, no env).
_START = (
    "import json, os, resource, signal, sys\n"
    "for name, value in json.loads(sys.argv[1]).items():\n"
    "    resource.setrlimit(getattr(resource, name), (value, value))\n"
    "if sys.platform == 'linux':\n"
    "    import ctypes\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "    if os.getppid() != int(sys.argv[2]):\n"
    "        sys.exit(137)  # the agent died before the line above\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


def limited(argv: Sequence[str], limits: ResourceLimits) -> list[str]:
    """``argv`` wrapped so that it runs under ``limits`` and dies with this process.

    Both are set in the child by a tiny Python start-up, not by ``preexec_fn``, which is
    unsafe in a threaded agent.
    """
    rlimits = json.dumps(limits.as_rlimits())
    return [sys.executable, "-I", "-S", "-c", _START, rlimits, str(os.getpid()), *argv]


def task_identity(context: OperatorContext) -> dict[str, str]:
    """The variables that tell a task's process which run it is."""
    message = context.message
    return {
        "TICKWORK_TASK_ID": str(message.task_id),
        "TICKWORK_ATTEMPT_ID": str(message.attempt_id),
        "TICKWORK_LEASE_TOKEN": str(message.lease_token),
    }


_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


def task_environment() -> dict[str, str]:
    """The agent's environment without tickwork's own settings (a database URL, say):
    what a task's process starts from."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}


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
    context.child_wrote = True
    if context.control.reason is not None:
        raise OperatorFailed(f"stopped before it started: {context.control.reason}")
    masking = MaskedOutput(context) if context.masker else None
    try:
        child = subprocess.Popen(
            limited(argv, context.limits),
            cwd=context.project_dir,
            env={**env, **context.message.env, **task_identity(context)},
            stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
            stdout=context.log_file if masking is None else masking.write_end,
            stderr=subprocess.STDOUT,
            process_group=0,
            text=True,
        )
    except OSError as exc:
        if masking is not None:
            masking.close()
        raise OperatorFailed(f"cannot start {argv[0]}: {exc}") from exc
    if masking is not None:
        masking.start()
    with _running_lock:
        _running.add(child)
    if not context.control.attach(lambda: _stop_leader(child), lambda: _has_exited(child)):
        _stop_leader(child)
    try:
        child.communicate(stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_leader(child)
        raise OperatorFailed(f"timed out after {timeout:g}s") from None
    except BaseException:
        _stop_leader(child)
        raise
    finally:
        context.control.detach()
        with _running_lock:
            _running.discard(child)
        # Whatever is left in the group (`cmd &`, a child that ignored SIGTERM) ends with
        # the task, however the task ended.
        _signal_group(child, signal.SIGKILL)
        if masking is not None:
            masking.close()
    if context.control.reason is not None:
        raise OperatorFailed(f"stopped: {context.control.reason}")
    return child.returncode


class MaskedOutput:
    """A pipe for a child's output whose lines reach the task log with secret values
    masked (a task that uses secrets). Lines are masked whole, so a value split across
    two writes of the child is still masked; only a value spanning lines is not."""

    def __init__(self, context: OperatorContext) -> None:
        self.context = context
        read_end, self.write_end = os.pipe()
        self._reader = os.fdopen(read_end, "rb")
        self._thread = threading.Thread(target=self._copy, name="mask-output", daemon=True)

    def start(self) -> None:
        """The child has the write end now: close ours and copy until it is closed."""
        os.close(self.write_end)
        self.write_end = -1
        self._thread.start()

    def _copy(self) -> None:
        log_file, masker = self.context.log_file, self.context.masker
        with self._reader:
            while line := self._reader.readline(MASKED_LINE_BYTES):
                log_file.write(masker.mask(line.decode("utf-8", "replace")))
                log_file.flush()

    def close(self) -> None:
        """Wait for the copy to end (the child's group is gone, so the pipe is closed)."""
        if self.write_end >= 0:
            os.close(self.write_end)
            self._reader.close()
            return
        self._thread.join(timeout=KILL_GRACE_SECONDS)


MASKED_LINE_BYTES = 1024 * 1024


def _has_exited(child: subprocess.Popen[str]) -> bool:
    """Whether the child exited, without reaping it (the thread running it does that)."""
    if child.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already reaped


def terminate_children() -> None:
    """Kill the process group of every child still running (the agent is shutting down)."""
    with _running_lock:
        children = list(_running)
    for child in children:
        _signal_group(child, signal.SIGKILL)


def _stop_leader(child: subprocess.Popen[str]) -> None:
    """SIGTERM to the group, then SIGKILL if its leader has not exited within the grace."""
    _signal_group(child, signal.SIGTERM)
    try:
        child.wait(timeout=KILL_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        child.wait()


def _signal_group(child: subprocess.Popen[str], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)
