"""The task starter: a warm process that forks each task's supervisor.

Starting a Python interpreter for every task's supervisor cost about 15 ms of CPU, many
times the command's own fork and exec. Instead, each agent process keeps one small Python
process, started once with nothing but the standard library (``python -I -S starter.py
AGENT CHANNEL``), and asks it over a Unix socket for each task: it forks, and the child
becomes the task's :func:`supervisor.supervise`, the leader of a new process group.

A request is an 8-byte length and, with it as ``SCM_RIGHTS``, the task's output, the end
of a socket the supervisor writes the command's wait status to, and the task's input if
it has one; then that many bytes of JSON (``argv``, ``cwd``, ``env``, ``limits``,
``grace``). The answer is 8 bytes: the supervisor's pid, or minus an ``errno`` when the
fork failed.

What holds the task's processes to the agent's life is a chain of parent-death signals:
the starter asks for ``SIGHUP`` when the agent dies (and then exits; it also exits when
the agent closes the socket), each supervisor asks for it when the starter dies, and the
supervisor kills everything its command started. The starter ignores ``SIGINT`` and
``SIGTERM``, which a terminal or ``kill`` of the agent's process group would send: the
agent decides when its tasks stop. The starter reaps the supervisors as they exit; the
agent learns a task's end from its status socket.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import sys
import warnings  # noqa: F401  (os.execvpe imports it: once here, not in every task)

try:
    from tickwork.services.agent.operators import supervisor
except ImportError:  # run by path in isolated mode: the module next to this one
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import supervisor  # type: ignore[import-not-found,no-redef]

TYPE_CHECKING = False  # not imported from typing: the starter starts as fast as it can
if TYPE_CHECKING:
    from typing import Any

HEADER_BYTES = 8
MAX_FDS = 3


def serve(channel: socket.socket, agent: int) -> None:
    """Answer the agent's requests until it closes ``channel``."""
    while True:
        header, fds = _receive_header(channel)
        if header is None:
            return  # the agent is gone or done
        request = json.loads(_read_exactly(channel, int.from_bytes(header, "big")))
        # Blocked across the fork: the child must not run this process's handlers; it
        # takes what came meanwhile once it supervises.
        signal.pthread_sigmask(signal.SIG_BLOCK, supervisor.HANDLED)
        try:
            pid = os.fork()
        except OSError as exc:
            pid = -(exc.errno or 1)
        if pid == 0:
            _become_supervisor(channel, request, fds)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, supervisor.HANDLED)
        for fd in fds:
            os.close(fd)
        if pid > 0:
            with contextlib.suppress(OSError):  # it already exited
                os.setpgid(pid, pid)  # done in both: the agent may signal the group at once
        channel.sendall(pid.to_bytes(HEADER_BYTES, "big", signed=True))


def _become_supervisor(channel: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the task's files, then supervise its command."""
    os.close(channel.detach())
    os.setpgid(0, 0)
    output, status = fds[0], fds[1]
    os.set_inheritable(status, False)  # the supervisor's: the command must not hold it
    given_input = fds[2] if len(fds) > 2 else os.open(os.devnull, os.O_RDONLY)
    os.dup2(given_input, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for fd in {output, given_input}:
        if fd > 2:
            os.close(fd)
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        os.write(2, f"cannot start {request['argv'][0]}: {exc}\n".encode())
        os.write(status, b"%d\n" % (supervisor.CANNOT_START_STATUS << 8))
        os._exit(supervisor.CANNOT_START_STATUS)
    supervisor.supervise(
        request["argv"],
        request["limits"],
        os.getppid(),
        request["grace"],
        env=request["env"],
        status_fd=status,
    )


def _receive_header(channel: socket.socket) -> tuple[bytes | None, list[int]]:
    """A request's length (``None`` at the end) and the descriptors sent with it."""
    try:
        data, fds, _flags, _address = socket.recv_fds(
            channel, HEADER_BYTES, MAX_FDS, socket.MSG_CMSG_CLOEXEC
        )
    except ConnectionError:
        return None, []
    if not data:
        return None, fds
    if len(data) < HEADER_BYTES:
        data += _read_exactly(channel, HEADER_BYTES - len(data))
    return data, fds


def _read_exactly(channel: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = channel.recv(min(size, 1 << 20))
        if not chunk:
            os._exit(0)  # the agent went away in the middle of a request
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _reap(_signum: int, _frame: object) -> None:
    """Collect every supervisor that exited (so that its CPU time, and its command's, is
    counted as this process's children's, as it was the agent's before)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        return


def main(args: list[str]) -> None:
    """``AGENT CHANNEL``: serve the agent (pid ``AGENT``) on the socket ``CHANNEL`` (an
    inherited descriptor)."""
    agent, channel = int(args[0]), socket.socket(fileno=int(args[1]))
    signal.signal(signal.SIGCHLD, _reap)
    for left_to_the_agent in (signal.SIGINT, signal.SIGTERM):
        signal.signal(left_to_the_agent, signal.SIG_IGN)

    def on_parent_death(_signum: int, _frame: object) -> None:
        # Linux also sends it when the agent's *thread* that started this one ends.
        if os.getppid() != agent:
            os._exit(0)

    signal.signal(supervisor.PARENT_DEATH_SIGNAL, on_parent_death)
    if sys.platform == "linux":
        supervisor.prctl(supervisor.PR_SET_PDEATHSIG, supervisor.PARENT_DEATH_SIGNAL)
    if os.getppid() != agent:
        return  # the agent died before it could have told us
    # What is loaded now is shared with every supervisor forked from here, as long as no
    # collection touches it (which would copy its pages into each of them).
    gc.disable()
    gc.freeze()
    serve(channel, agent)


if __name__ == "__main__":
    main(sys.argv[1:])
