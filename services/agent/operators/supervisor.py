"""The parent of every task command: it makes the command, and all it starts, end with the task.

Forked for each task by the agent's task starter (:mod:`starter`, a warm process, so no
task waits for an interpreter to start), or run by path in isolated mode (``python -I -S
supervisor.py LIMITS PARENT GRACE ARGV...``, LIMITS as :func:`format_limits` writes them),
with nothing but the standard library, as the leader of the task's process group. It

1. becomes a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a descendant orphaned by
   its parent, even one that double-forked and ``setsid()``-ed out of the process group,
   is re-parented to the supervisor instead of to init, so it is always found;
2. asks for ``SIGHUP`` when its parent dies (``PR_SET_PDEATHSIG``), and checks that the
   parent (the task starter, or the agent: pid ``PARENT``) did not die before that;
3. forks the command, which gets the resource limits ``LIMITS`` and execs ``ARGV``; the
   supervisor itself runs unlimited, so a tight memory limit cannot break it;
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
   process group: ``cmd &``), and the supervisor exits like the command did: the same
   status, or killed by the same signal.

Why a supervisor and not a cgroup or a PID namespace: both need privileges an agent
running as non-root in a Kubernetes pod does not have, and ``PR_SET_PDEATHSIG`` alone is
cleared in every process the command forks. The cost is one fork of a small Python process
per task.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import time

TYPE_CHECKING = False  # not imported from typing: every task waited for that import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DEATH_SIGNAL = signal.SIGHUP
KILL_NOW_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
HANDLED = frozenset({signal.SIGCHLD, PARENT_DEATH_SIGNAL, KILL_NOW_SIGNAL, *STOP_SIGNALS})
PARENT_GONE_STATUS = 137
"""Exit status when the parent died before the command could start (128 + SIGKILL)."""
CANNOT_START_STATUS = 127
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
    """One command and everything it starts; see the module docstring."""

    def __init__(self, parent: int, grace_seconds: float) -> None:
        self.parent = parent
        self.grace_seconds = grace_seconds
        self.command = 0
        self.status: int | None = None  # the command's wait status, once reaped
        self.kill_at: float | None = None  # when a stopped command's grace ends

    def start(
        self, argv: list[str], limits: dict[str, int], env: dict[str, str] | None = None
    ) -> None:
        """Start the command under ``limits``, with ``env`` (or this process's environment):
        a fork that execs ``argv`` or exits 127. Without limits it is ``posix_spawn``, which
        copies nothing of this process (a fork of a Python process copies its page tables,
        and then every page either side writes to before the exec)."""
        if not limits:
            self.command = self.spawn(argv, os.environ if env is None else env)
            return
        pid = os.fork()
        if pid:
            self.command = pid
            return
        try:
            for name, value in limits.items():
                resource.setrlimit(getattr(resource, name), (value, value))
            for ignored_by_python in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(ignored_by_python, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execvpe(argv[0], argv, os.environ if env is None else env)
        except (OSError, ValueError) as exc:
            os.write(2, f"cannot start {argv[0]}: {exc}\n".encode())
        finally:
            os._exit(CANNOT_START_STATUS)

    def spawn(self, argv: list[str], env: Mapping[str, str]) -> int:
        """``posix_spawnp`` ``argv``, found on ``env``'s PATH, with the signals Python
        ignores back at their defaults and none blocked; 0 if it cannot start (said on
        stderr, and the status is 127)."""
        if "PATH" in env:
            os.environ["PATH"] = env["PATH"]  # posix_spawnp searches this process's PATH
        try:
            return os.posix_spawnp(
                argv[0], argv, env, setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
            )
        except (OSError, ValueError) as exc:
            os.write(2, f"cannot start {argv[0]}: {exc}\n".encode())
            self.status = CANNOT_START_STATUS << 8
            return 0

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


_libc: list[Any] = []  # loaded once: the supervisors a starter forks find it loaded


def prctl(option: int, value: int) -> None:
    import ctypes

    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    if _libc[0].prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def format_limits(limits: dict[str, int]) -> str:
    """``LIMITS`` for the command line: ``NAME=value,...`` (``-`` for none). Not JSON: the
    supervisor imports as little as it can, as every task waits for its start-up."""
    return ",".join(f"{name}={value}" for name, value in limits.items()) or "-"


def parse_limits(text: str) -> dict[str, int]:
    """The inverse of :func:`format_limits`."""
    pairs = (item.partition("=") for item in text.split(",") if item != "-")
    return {name: int(value) for name, _, value in pairs}


def exit_like(status: int) -> NoReturn:
    """Exit as a process with wait status ``status`` did: the same code or signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signum,))
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


def supervise(
    argv: list[str],
    limits: dict[str, int],
    parent: int,
    grace_seconds: float,
    *,
    env: dict[str, str] | None = None,
    status_fd: int = -1,
) -> NoReturn:
    """Run ``argv`` under a supervisor in this process, which must be a child of ``parent``
    (the agent, or its task starter); never returns. The command's wait status is written
    to ``status_fd`` (as decimal digits and a newline), if given, before the exit."""
    # Blocked before anything can send them; the command gets the mask cleared. As a fork
    # of the task starter this process also inherited its handlers: back to the defaults,
    # or the command would inherit ignored signals.
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_DFL)
    if sys.platform == "linux":
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    if os.getppid() != parent:
        os._exit(PARENT_GONE_STATUS)  # the parent died before it could have told us
    supervisor = Supervisor(parent, grace_seconds)
    supervisor.start(argv, limits, env)
    os.close(0)  # the command's input is the command's: a pipe must see it go away
    status = supervisor.run()
    if status_fd >= 0:
        with contextlib.suppress(OSError):  # the agent is gone: nobody to tell
            os.write(status_fd, b"%d\n" % status)
    exit_like(status)


def main(args: list[str]) -> None:
    """``LIMITS PARENT GRACE ARGV...``: run ARGV under the supervisor; never returns."""
    supervise(args[3:], parse_limits(args[0]), int(args[1]), float(args[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
