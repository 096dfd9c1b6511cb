"""Running a child process for an operator: own process group, log capture, time limit."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed, ResourceLimits
from tickwork.services.agent.operators.starter import HEADER_BYTES

KILL_GRACE_SECONDS = 5.0
"""How long a stopped task's processes have between SIGTERM and SIGKILL."""
SUPERVISOR_MARGIN_SECONDS = 2.0
"""How much longer than the grace the agent waits for a stopped task's supervisor before
it kills the process group itself (a supervisor that does not answer)."""
SUPERVISOR = Path(__file__).with_name("supervisor.py")
STARTER = Path(__file__).with_name("starter.py")


def task_identity(context: OperatorContext) -> dict[str, str]:
    """The variables that tell a task's process which run it is."""
    message = context.message
    return {
        "TICKWORK_TASK_ID": str(message.task_id),
        "TICKWORK_ATTEMPT_ID": str(message.attempt_id),
        "TICKWORK_LEASE_TOKEN": str(message.lease_token),
    }


class TaskProcess:
    """A task's supervisor, forked by this process's task starter: the part of
    ``subprocess.Popen`` a task needs. Its end and the command's status come over the
    status socket the supervisor writes to (it is the starter's child, not ours)."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._status = status
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The command's exit code (minus the signal that killed it) once it ended."""
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` if ``timeout`` passes first."""
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, signum)

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            poller = select.poll()
            poller.register(self._status, select.POLLIN)
            readable = poller.poll(None if timeout is None else timeout * 1000)
            with self._lock:
                if readable and self.returncode is None:
                    self.returncode = _exit_code(self._status)
                    self._status.close()
        return self.returncode


def _exit_code(status: socket.socket) -> int:
    """What the supervisor wrote: the command's wait status as an exit code; a supervisor
    that ended without a word (killed) counts as killed."""
    text = b""
    with contextlib.suppress(OSError):
        while chunk := status.recv(64):
            text += chunk
    return os.waitstatus_to_exitcode(int(text)) if text.strip().isdigit() else -signal.SIGKILL


class TaskStarter:
    """This process's task starter (see :mod:`tickwork.services.agent.operators.starter`):
    started at the first task, again if it died. Threads share it; a process forked from
    this one (Celery's pool) starts its own."""

    _lock = threading.Lock()
    _current: TaskStarter | None = None

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(STARTER), str(os.getpid()), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        self.owner = os.getpid()
        self.channel = ours
        self.broken = False

    @classmethod
    def start_task(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str],
        limits: ResourceLimits,
        output: int,
        given_input: int | None,
    ) -> TaskProcess:
        """Fork ``argv``'s supervisor; ``OSError`` when that cannot be done."""
        request = {
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            "limits": limits.as_rlimits(),
            "grace": KILL_GRACE_SECONDS,
        }
        payload = json.dumps(request).encode()
        ours, theirs = socket.socketpair()
        try:
            with theirs, cls._lock:
                fds = [output, theirs.fileno(), *([] if given_input is None else [given_input])]
                pid = cls._ask(payload, fds)
        except BaseException:
            ours.close()
            raise
        return TaskProcess(pid, ours)

    @classmethod
    def _ask(cls, payload: bytes, fds: list[int]) -> int:
        for last_try in (False, True):
            starter = cls._current
            if starter is None or starter.broken or starter.owner != os.getpid():
                starter = cls._current = TaskStarter()
            try:
                pid = starter.ask(payload, fds)
            except OSError:
                starter.close()
                if last_try:
                    raise
                continue
            if pid < 0:
                raise OSError(-pid, os.strerror(-pid))  # the fork failed: out of processes
            return pid
        raise AssertionError("unreachable")

    def ask(self, payload: bytes, fds: list[int]) -> int:
        """One request; the supervisor's pid, or minus the ``errno`` of a failed fork."""
        header = len(payload).to_bytes(HEADER_BYTES, "big")
        socket.send_fds(self.channel, [header], fds)
        self.channel.sendall(payload)
        answer = b""
        while len(answer) < HEADER_BYTES:
            chunk = self.channel.recv(HEADER_BYTES - len(answer))
            if not chunk:
                raise ConnectionResetError("the task starter exited")
            answer += chunk
        return int.from_bytes(answer, "big", signed=True)

    def close(self) -> None:
        """Let it go (it exits when its socket closes)."""
        self.broken = True
        self.channel.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=0)


_running: set[TaskProcess] = set()
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
    masking = MaskedOutput(context) if context.masker else None
    given_input = os.pipe() if stdin_text is not None else None
    try:
        child = TaskStarter.start_task(
            argv,
            cwd=context.working_dir,
            env={**env, **context.message.env, **task_identity(context)},
            limits=context.limits,
            output=context.log_file.fileno() if masking is None else masking.write_end,
            given_input=None if given_input is None else given_input[0],
        )
    except OSError as exc:
        if masking is not None:
            masking.close()
        raise OperatorFailed(f"cannot start {argv[0]}: {exc}") from exc
    finally:
        if given_input is not None:
            os.close(given_input[0])
    if masking is not None:
        masking.start()
    if given_input is not None:
        _write_in_background(given_input[1], stdin_text or "")
    with _running_lock:
        _running.add(child)
    if not context.control.attach(lambda: _stop(child), lambda: _has_exited(child)):
        _stop(child)
    try:
        code = child.wait(timeout)
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
    return code


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


def _write_in_background(fd: int, text: str) -> None:
    """Write ``text`` to the pipe ``fd`` and close it, in a thread: a command that reads
    nothing must not stop the task from being waited for."""

    def write() -> None:
        with open(fd, "w", encoding="utf-8") as pipe, contextlib.suppress(BrokenPipeError):
            pipe.write(text)

    threading.Thread(target=write, name="task-input", daemon=True).start()


def _has_exited(child: TaskProcess) -> bool:
    """Whether the child exited (the thread running it collects the status too)."""
    return child.poll() is not None


def terminate_children() -> None:
    """Kill everything every running child started, at once (the agent is shutting down)."""
    with _running_lock:
        children = list(_running)
    for child in children:
        child.send_signal(signal.SIGUSR1)  # the supervisor kills its descendants


def _stop(child: TaskProcess) -> None:
    """SIGTERM to the supervisor, which forwards it and kills what is left after the
    grace; the group is killed here only if the supervisor has not exited by then."""
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=KILL_GRACE_SECONDS + SUPERVISOR_MARGIN_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        child.wait()


def _signal_group(child: TaskProcess, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)
