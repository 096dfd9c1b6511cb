"""Running a child process for an operator: own process group, log capture, time limit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed, ResourceLimits
from tickwork.services.agent.operators.supervisor import format_limits

KILL_GRACE_SECONDS = 5.0
"""How long a stopped task's processes have between SIGTERM and SIGKILL."""
SUPERVISOR_MARGIN_SECONDS = 2.0
"""How much longer than the grace the agent waits for a stopped task's supervisor before
it kills the process group itself (a supervisor that does not answer)."""
SUPERVISOR = Path(__file__).with_name("supervisor.py")


def supervised(argv: Sequence[str], limits: ResourceLimits) -> list[str]:
    """``argv`` run by the supervisor (see :mod:`tickwork.services.agent.operators.supervisor`):
    under ``limits``, and ended with everything it started when the task ends or when
    this process dies.

    The limits are set by the supervisor in the child it forks, not by ``preexec_fn``,
    which is unsafe in a threaded agent.
    """
    return [
        sys.executable,
        "-I",
        "-S",
        str(SUPERVISOR),
        format_limits(limits.as_rlimits()),
        str(os.getpid()),
        f"{KILL_GRACE_SECONDS:g}",
        *argv,
    ]


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
    """Run ``argv`` in the task's working directory with output into the task log; its exit code.

    The child is the task's supervisor, leading its own process group: a timeout, a kill
    or the agent's death ends everything the command started.
    """
    timeout = context.message.timeout_seconds
    context.child_wrote = True
    if context.control.reason is not None:
        raise OperatorFailed(f"stopped before it started: {context.control.reason}")
    cwd = context.working_dir
    masking = MaskedOutput(context) if context.masker else None
    try:
        child = subprocess.Popen(
            supervised(argv, context.limits),
            cwd=cwd,
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
    if not context.control.attach(lambda: _stop(child), lambda: _has_exited(child)):
        _stop(child)
    try:
        child.communicate(stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(child)
        raise OperatorFailed(f"timed out after {timeout:g}s") from None
    except BaseException:
        _stop(child)
        raise
    finally:
        context.control.detach()
        with _running_lock:
            _running.discard(child)
        # The supervisor killed whatever the command left (`cmd &`, a child that ignored
        # SIGTERM); where it cannot see descendants (no /proc), the group goes here.
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
    """Kill everything every running child started, at once (the agent is shutting down)."""
    with _running_lock:
        children = list(_running)
    for child in children:
        child.send_signal(signal.SIGUSR1)  # the supervisor kills its descendants


def _stop(child: subprocess.Popen[str]) -> None:
    """SIGTERM to the supervisor, which forwards it and kills what is left after the
    grace; the group is killed here only if the supervisor has not exited by then."""
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=KILL_GRACE_SECONDS + SUPERVISOR_MARGIN_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        child.wait()


def _signal_group(child: subprocess.Popen[str], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)
