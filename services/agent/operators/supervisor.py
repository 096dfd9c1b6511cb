"""The parent of every task command: it makes the command, and all it starts, end with the task.

Each agent process keeps supervisors, one per task it runs at a time, each started once
and used for task after task (so no task waits for an interpreter to start). A supervisor
runs by path in isolated mode (``python -I -S supervisor.py PARENT GRACE CHANNEL``), with
nothing but the standard library. It

1. becomes a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a descendant orphaned by
   its parent, even one that double-forked and ``setsid()``-ed out of the process group,
   is re-parented to the supervisor instead of to init, so it is always found;
2. asks for ``SIGHUP`` when its parent dies (``PR_SET_PDEATHSIG``), and checks that the
   parent (the agent, pid ``PARENT``) did not die before that;
3. takes a task from the agent on the Unix socket ``CHANNEL`` (see :func:`serve`) and
   starts its command, the leader of a new process group, with ``posix_spawn``; a task
   with resource limits is forked instead, and the child sets them before its exec, so
   the supervisor itself runs unlimited and a tight memory limit cannot break it;
4. waits, handling signals synchronously (they are blocked and taken with sigwaitinfo):

   - ``SIGTERM``/``SIGINT`` (the task is stopped: time limit, kill, agent drain): every
     descendant gets ``SIGTERM``, and after ``GRACE`` seconds every one left is killed;
   - ``SIGUSR1``: every descendant is killed at once (the agent shuts down): all are
     stopped first, then killed, so none can act on another's death (a pipeline's reader
     seeing the end of its input as its writer dies);
   - ``SIGHUP`` while the parent is no longer ``PARENT``: the agent died, so every
     descendant is killed at once and the supervisor exits. Linux also sends it when the
     *thread* that started the supervisor exits while its process lives; the parent check
     ignores that.

5. When the command exits, whatever it left running is killed (as it would be with the
   process group: ``cmd &``), and the command's wait status goes back to the agent; then
   the supervisor waits for the next task. It exits when the agent closes the socket.

Why a supervisor and not a cgroup or a PID namespace: both need privileges an agent
running as non-root in a Kubernetes pod does not have, and ``PR_SET_PDEATHSIG`` alone is
cleared in every process the command forks. The cost is one small Python process per task
an agent process runs at a time.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import resource
import signal
import socket
import sys
import time

TYPE_CHECKING = False  # not imported from typing: the supervisor starts as fast as it can
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DEATH_SIGNAL = signal.SIGHUP
KILL_NOW_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
HANDLED = frozenset({signal.SIGCHLD, PARENT_DEATH_SIGNAL, KILL_NOW_SIGNAL, *STOP_SIGNALS})
PARENT_GONE_STATUS = 137
"""Exit status when the parent died before the supervisor could serve it (128 + SIGKILL)."""
CANNOT_START_STATUS = 127
HEADER_BYTES = 8
MAX_FDS = 2
SWEEP_PAUSE_SECONDS = 0.005
FREEZE_LOOKS = 5
"""How often the supervisor looks for processes started while it stops them, before a
kill (those it still misses are killed by the next sweep)."""


def parent_of_each_process(proc: str = "/proc") -> dict[int, int]:
    """The parent pid of every process, by pid (empty where there is no ``/proc``)."""
    parents: dict[int, int] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return parents
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue  # exited meanwhile
        # After the command name, which is in parentheses and may hold anything.
        fields = text.rpartition(b")")[2].split()
        if len(fields) > 1:
            parents[int(name)] = int(fields[1])
    return parents


def descendants_of(root: int, parents: dict[int, int]) -> list[int]:
    """Every pid below ``root`` in the tree ``parents`` describes, parents first."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    pending = [root]
    while pending:
        below = children.get(pending.pop(), [])
        found.extend(below)
        pending.extend(below)
    return found


class Supervisor:
    """The commands of one task after another and everything they start; see the module
    docstring."""

    def __init__(self, parent: int, grace_seconds: float) -> None:
        self.parent = parent
        self.grace_seconds = grace_seconds
        self.command = 0
        self.status: int | None = None  # the command's wait status, once reaped
        self.kill_at: float | None = None  # when a stopped command's grace ends

    def start(
        self,
        argv: list[str],
        limits: dict[str, int],
        env: Mapping[str, str],
        stdio: Sequence[int],
    ) -> None:
        """Start ``argv`` with ``env``, its input, output and error ``stdio``, under
        ``limits``, leading a process group of its own. If it cannot start, that is said
        on its error and its status is 127."""
        self.command, self.status, self.kill_at = 0, None, None
        try:
            if limits:
                self.command = self.fork(argv, limits, env, stdio)
            else:
                # posix_spawnp searches this process's PATH: the task's, or the default
                # execvpe would use, never what the task before left.
                os.environ["PATH"] = env.get("PATH", os.defpath)
                self.command = os.posix_spawnp(
                    argv[0],
                    argv,
                    env,
                    file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate(stdio)],
                    setpgroup=0,
                    setsigmask=(),
                    setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                )
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                os.write(stdio[2], f"cannot start {argv[0]}: {exc}\n".encode())
            self.status = CANNOT_START_STATUS << 8

    def fork(
        self, argv: list[str], limits: dict[str, int], env: Mapping[str, str], stdio: Sequence[int]
    ) -> int:
        """Fork a child that takes ``stdio``, sets ``limits`` and execs ``argv`` (or
        exits 127, saying why)."""
        pid = os.fork()
        if pid:
            return pid
        try:
            os.setpgid(0, 0)
            for n, fd in enumerate(stdio):
                os.dup2(fd, n)
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))
            for ignored_by_python in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(ignored_by_python, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execvpe(argv[0], argv, env)
        except (OSError, ValueError) as exc:
            os.write(2, f"cannot start {argv[0]}: {exc}\n".encode())
        finally:
            os._exit(CANNOT_START_STATUS)

    def run(self) -> int:
        """Handle signals until the command has exited; its wait status."""
        while self.status is None:
            if self.kill_at is None:
                info = signal.sigwaitinfo(HANDLED)
                signum = info.si_signo
            else:
                timeout = max(0.0, self.kill_at - time.monotonic())
                taken = signal.sigtimedwait(HANDLED, timeout)
                signum = taken.si_signo if taken is not None else 0
            self.handle(signum)
        self.signal_descendants(signal.SIGKILL, until_none_left=True)
        return self.status

    def handle(self, signum: int) -> None:
        """React to one signal (0: the grace of a stopped command is over)."""
        if signum == signal.SIGCHLD:
            self.reap()
        elif signum in STOP_SIGNALS and self.kill_at is None:
            self.kill_at = time.monotonic() + self.grace_seconds
            self.signal_descendants(signal.SIGTERM)
        elif signum == PARENT_DEATH_SIGNAL and os.getppid() != self.parent:
            self.signal_descendants(signal.SIGKILL, until_none_left=True)
            os._exit(PARENT_GONE_STATUS)
        elif signum == KILL_NOW_SIGNAL or (signum == 0 and self.kill_at is not None):
            self.kill_at = None
            self.signal_descendants(signal.SIGKILL)

    def reap(self) -> None:
        """Collect every child that exited; note the command's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.command:
                self.status = status

    def signal_descendants(self, signum: int, *, until_none_left: bool = False) -> None:
        """Send ``signum`` to every descendant; with ``until_none_left``, repeat and reap
        until no child is left (so none is left below them either)."""
        if until_none_left and not self.has_children():
            return  # the usual end: nothing was left behind, no need to look in /proc
        while True:
            found = self.descendants()
            if signum == signal.SIGKILL:
                found = self.freeze(found)
            for pid in found:
                _send(pid, signum)
            if not until_none_left:
                return
            self.reap()
            if not self.has_children():
                return  # no child left, hence no descendant
            time.sleep(SWEEP_PAUSE_SECONDS)  # some are still dying

    def descendants(self) -> list[int]:
        """Every process below the supervisor, parents first."""
        found = descendants_of(os.getpid(), parent_of_each_process())
        if not found and self.status is None:
            found = [self.command]  # no /proc: the command is all we know of
        return found

    def freeze(self, found: list[int]) -> list[int]:
        """Stop every descendant (``found`` and any started meanwhile) so none can act on
        another's death: killed one by one, a pipeline's reader could see the end of its
        input as its writer dies and write before its own signal came. The stopped pids."""
        stopped: list[int] = []
        for _ in range(FREEZE_LOOKS):
            new = [pid for pid in found if pid not in stopped]
            if not new:
                break
            for pid in new:
                _send(pid, signal.SIGSTOP)
            stopped.extend(new)
            found = self.descendants()
        return stopped

    def has_children(self) -> bool:
        """Whether a child is left, running or not yet reaped."""
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        return True


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        return  # gone meanwhile


def prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def serve(channel: socket.socket, parent: int, grace_seconds: float) -> None:
    """Run the agent's tasks one after another until it closes ``channel`` (a socket).

    A task is an 8-byte length and, with it as ``SCM_RIGHTS``, the command's output (also
    its error) and, if it has one, its input; then that many bytes of a dict in
    :mod:`marshal`'s format (``argv``, ``cwd``, ``env``, ``limits``). The answer is the
    command's pid as 8 bytes (0 if it could not start, minus an ``errno`` if the working
    directory cannot be entered), and once it ended, but for an ``errno``, its wait status
    as 8 more.
    """
    supervisor = Supervisor(parent, grace_seconds)
    while True:
        try:
            header, fds, _flags, _address = socket.recv_fds(
                channel, HEADER_BYTES, MAX_FDS, socket.MSG_CMSG_CLOEXEC
            )
        except ConnectionError:
            return
        if len(header) < HEADER_BYTES:
            return  # the agent is gone or done
        task = marshal.loads(_read_exactly(channel, int.from_bytes(header, "big")))
        _take_stale_signals(supervisor)
        stdio = [fds[1] if len(fds) > 1 else os.open(os.devnull, os.O_RDONLY), fds[0], fds[0]]
        try:
            os.chdir(task["cwd"])
        except OSError as exc:
            _close(stdio)
            _send_number(channel, -(exc.errno or 1))
            continue
        supervisor.start(task["argv"], task["limits"], task["env"], stdio)
        _close(stdio)  # the command's now: a pipe must see its input's end go away
        _send_number(channel, supervisor.command)
        _send_number(channel, supervisor.run())


def _send_number(channel: socket.socket, number: int) -> None:
    channel.sendall(number.to_bytes(HEADER_BYTES, "big", signed=True))


def _take_stale_signals(supervisor: Supervisor) -> None:
    """Handle what came while no task ran: a stop meant for the task before (sent as it
    ended) is dropped; the parent's death still ends the supervisor."""
    while (taken := signal.sigtimedwait(HANDLED, 0)) is not None:
        if taken.si_signo == PARENT_DEATH_SIGNAL and os.getppid() != supervisor.parent:
            os._exit(PARENT_GONE_STATUS)


def _close(fds: list[int]) -> None:
    for fd in set(fds):
        with contextlib.suppress(OSError):
            os.close(fd)


def _read_exactly(channel: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = channel.recv(min(size, 1 << 20))
        if not chunk:
            os._exit(0)  # the agent went away in the middle of a task
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def main(args: list[str]) -> None:
    """``PARENT GRACE CHANNEL``: serve the agent (pid ``PARENT``) its tasks on the socket
    ``CHANNEL`` (an inherited descriptor) until it closes it."""
    parent, grace, channel = int(args[0]), float(args[1]), int(args[2])
    os.set_inheritable(channel, False)  # no command may hold it
    # Blocked before anything can send them; each command gets the mask cleared. An
    # agent started under nohup, or in the background of a shell, ignores SIGHUP or
    # SIGINT: a signal ignored is discarded, not left for sigwaitinfo (nor the parent's
    # death noticed), and the commands would inherit it. Back to the defaults, then.
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_DFL)
    if sys.platform == "linux":
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    if os.getppid() != parent:
        os._exit(PARENT_GONE_STATUS)  # the parent died before it could have told us
    serve(socket.socket(fileno=channel), parent, grace)


if __name__ == "__main__":
    main(sys.argv[1:])
