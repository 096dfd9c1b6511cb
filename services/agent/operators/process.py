"""Running a child process for an operator: own process group, log capture, time limit."""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed, ResourceLimits
from tickwork.services.agent.operators.supervisor import HEADER_BYTES

KILL_GRACE_SECONDS = 5.0
"""How long a stopped task's processes have between SIGTERM and SIGKILL."""
SUPERVISOR_MARGIN_SECONDS = 2.0
"""How much longer than the grace the agent waits for a stopped task's supervisor before
it kills the process group itself (a supervisor that does not answer)."""
SUPERVISOR = Path(__file__).with_name("supervisor.py")
SWEEPS = os.path.isdir("/proc/self")
"""Whether a supervisor can see (through /proc) and end what its command left running."""


def task_identity(context: OperatorContext) -> dict[str, str]:
    """The variables that tell a task's process which run it is."""
    message = context.message
    return {
        "TICKWORK_TASK_ID": str(message.task_id),
        "TICKWORK_ATTEMPT_ID": str(message.attempt_id),
        "TICKWORK_LEASE_TOKEN": str(message.lease_token),
    }


class Supervisor:
    """One of this process's task supervisors (see
    :mod:`tickwork.services.agent.operators.supervisor`): a small Python process, started
    at the first task that finds none free, that runs one task at a time and then the
    next."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    str(SUPERVISOR),
                    str(os.getpid()),
                    f"{KILL_GRACE_SECONDS:g}",
                    str(theirs.fileno()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                # Out of the agent's group: a SIGKILL or SIGSTOP of that group must leave
                # the supervisor to end its task's processes.
                process_group=0,
            )
        self.channel = ours

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self, task: dict[str, object], output: int, given_input: int | None) -> int:
        """Send a task; the command's pid (0 if it could not start: its status follows)."""
        payload = marshal.dumps(task)
        header = len(payload).to_bytes(HEADER_BYTES, "big")
        socket.send_fds(
            self.channel, [header], [output, *([] if given_input is None else [given_input])]
        )
        self.channel.sendall(payload)
        pid = _read_number(self.channel)
        if pid < 0:
            raise _Refused(-pid, os.strerror(-pid))
        return pid

    def close(self) -> None:
        """Let it go: it exits once its socket is closed (at once, or after its task)."""
        self.channel.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=0)


class _Refused(OSError):
    """The supervisor could not start the task (its working directory, say); it is alive
    and serves the next one."""


def _read_number(channel: socket.socket) -> int:
    """One 8-byte signed number from ``channel``; ConnectionError if it closed first."""
    data = b""
    while len(data) < HEADER_BYTES:
        chunk = channel.recv(HEADER_BYTES - len(data))
        if not chunk:
            raise ConnectionResetError("the task's supervisor exited")
        data += chunk
    return int.from_bytes(data, "big", signed=True)


class Supervisors:
    """This process's idle supervisors, shared by its threads: a task takes one (or
    starts one) and gives it back when it ended. A process forked from this one
    (Celery's pool) starts its own."""

    _lock = threading.Lock()
    _idle: list[Supervisor] = []
    _owner = 0

    @classmethod
    def take(cls) -> Supervisor:
        with cls._lock:
            if cls._owner != os.getpid():
                cls._idle, cls._owner = [], os.getpid()
            if cls._idle:
                return cls._idle.pop()
        return Supervisor()

    @classmethod
    def give_back(cls, supervisor: Supervisor) -> None:
        with cls._lock:
            if cls._owner == os.getpid():
                cls._idle.append(supervisor)
                return
        supervisor.close()


def start_task(
    argv: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    limits: ResourceLimits,
    output: int,
    given_input: int | None,
) -> TaskProcess:
    """Start ``argv`` under a supervisor; ``OSError`` when that cannot be done."""
    task: dict[str, object] = {
        "argv": list(argv),
        "cwd": str(cwd),
        "env": dict(env),
        "limits": limits.as_rlimits(),
    }
    for last_try in (False, True):
        supervisor = Supervisors.take()
        try:
            return TaskProcess(supervisor, supervisor.start(task, output, given_input))
        except _Refused:
            Supervisors.give_back(supervisor)
            raise
        except OSError:
            supervisor.close()  # it died while idle (or was killed): start another
            if last_try:
                raise
    raise AssertionError("unreachable")


class TaskProcess:
    """A task's command under its supervisor: the part of ``subprocess.Popen`` a task
    needs. Signals go to the supervisor, which passes them on as its module says; the
    command's status comes back over the supervisor's socket, which then serves the next
    task."""

    def __init__(self, supervisor: Supervisor, command: int) -> None:
        self.supervisor = supervisor
        self.pid = supervisor.pid
        self.command = command  # leads the task's process group; 0 if it did not start
        self.returncode: int | None = None
        # Whether the supervisor ended whatever the command left before it answered: it
        # did unless it died, or this host has no /proc to show it the descendants.
        self.swept = False
        self._lock = threading.Lock()  # the return code, and whether signals still go
        self._reading = threading.Lock()  # one thread reads the supervisor's answer

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` if ``timeout`` passes first."""
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return code

    def has_ended(self) -> bool:
        """Whether the command ended, even while another thread is yet to read it."""
        with self._lock:  # the answer is read under it: there, or read already
            return self.returncode is not None or self._answered(0)

    def send_signal(self, signum: int) -> None:
        """Signal the supervisor, while it still runs this task."""
        with self._lock:
            if self.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self.pid, signum)

    def kill_group(self) -> None:
        """SIGKILL to the command's process group, where the supervisor did not sweep it.
        After a sweep the group is empty, and its id, free again, may already lead another
        task's group: a kill then would end an unrelated task."""
        if self.command > 0 and not self.swept:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.command, signal.SIGKILL)

    def abandon(self) -> None:
        """The supervisor does not answer: kill it and what it runs; start no task on it."""
        self.kill_group()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)

    def _collect(self, timeout: float | None) -> int | None:
        """The return code once the supervisor said it, waiting up to ``timeout`` (None:
        for ever). One thread reads the answer; another waits for it to (as long as its
        own timeout allows), as the answer is read once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._reading.acquire(timeout=-1 if timeout is None else timeout):
            return self.returncode
        try:
            if self.returncode is None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._answered(left):
                    with self._lock:  # no signal goes to a supervisor given back
                        self.returncode = self._read_status()
        finally:
            self._reading.release()
        return self.returncode

    def _answered(self, timeout: float | None) -> bool:
        """Whether the supervisor's answer (or its end) is there to read, waiting up to
        ``timeout`` seconds (None: for ever)."""
        poller = select.poll()
        poller.register(self.supervisor.channel, select.POLLIN)
        return bool(poller.poll(None if timeout is None else timeout * 1000))

    def _read_status(self) -> int:
        """The command's exit code; a supervisor that ended without saying (killed) counts
        as killed, and is not used again."""
        try:
            status = _read_number(self.supervisor.channel)
        except OSError:
            self.supervisor.close()
            return -signal.SIGKILL
        self.swept = SWEEPS
        Supervisors.give_back(self.supervisor)
        return os.waitstatus_to_exitcode(status)


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
    child = _start_child(context, argv, env, masking, stdin_text)
    with _running_lock:
        _running.add(child)
    if not context.control.attach(lambda: _stop(child), child.has_ended):
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
        # SIGTERM); where it could not (it died, or no /proc), the group goes here.
        child.kill_group()
        if masking is not None:
            masking.close()
    if context.control.reason is not None:
        raise OperatorFailed(f"stopped: {context.control.reason}")
    return code


def _start_child(
    context: OperatorContext,
    argv: Sequence[str],
    env: Mapping[str, str],
    masking: MaskedOutput | None,
    stdin_text: str | None,
) -> TaskProcess:
    """Start ``argv`` under a supervisor, its output to the task log (or the masking
    pipe), ``stdin_text`` written to its input in the background."""
    given_input = os.pipe() if stdin_text is not None else None
    try:
        child = start_task(
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
        if given_input is not None:
            os.close(given_input[1])
        raise OperatorFailed(f"cannot start {argv[0]}: {exc}") from exc
    finally:
        if given_input is not None:
            os.close(given_input[0])
    if masking is not None:
        masking.start()
    if given_input is not None:
        _write_in_background(given_input[1], stdin_text or "")
    return child


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


def terminate_children() -> None:
    """Kill everything every running child started, at once (the agent is shutting down)."""
    with _running_lock:
        children = list(_running)
    for child in children:
        child.send_signal(signal.SIGUSR1)  # the supervisor kills its descendants


def _stop(child: TaskProcess) -> None:
    """SIGTERM to the supervisor, which forwards it and kills what is left after the
    grace; the group is killed here, and the supervisor too, only if it has not answered
    by then."""
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=KILL_GRACE_SECONDS + SUPERVISOR_MARGIN_SECONDS)
    except subprocess.TimeoutExpired:
        child.abandon()
        child.wait()
