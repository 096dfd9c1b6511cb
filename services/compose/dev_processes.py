"""The processes of ``tickwork dev``: each service started in a session of its own, its log
records written one line each behind its name, and all of them stopped together.

Every service logs JSON records (``TICKWORK_LOG_FORMAT=json``) to one pipe, read by a
thread of this process. :class:`DevOutput` writes each record as one line, in one format for
every service and for ``tickwork dev`` itself (named ``dev``): a JSON object with a
``service`` key (``--log-format json``, the default when the output is not a terminal), or
``HH:MM:SS service | LEVEL logger message`` (``text``, the default on a terminal; a
traceback's lines follow, each behind the same prefix). A line a service prints outside its
logging becomes a record of logger ``output``.

:class:`ServiceGroup` stops the services as the container image does: SIGTERM to each
service's own process only (as tini does), so that an agent goes through Celery's warm
shutdown and gives its running tasks back instead of its pool processes dying with them;
then, after a bounded wait or at once when asked, SIGKILL to each service's process group;
then SIGKILL to whatever is left in each service's session (a task's process group an
agent left behind).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TextIO

DEV_SERVICE = "dev"
"""The name ``tickwork dev``'s own records carry."""
POLL_SECONDS = 0.1
REAP_TIMEOUT_SECONDS = 5.0
"""How long SIGKILLed processes may take to be gone and their output read to its end."""


@dataclass(frozen=True)
class ServiceProcess:
    """One process to run: its name in the output, its argv and its environment."""

    name: str
    argv: list[str]
    env: dict[str, str]


class DevOutput:
    """Where ``tickwork dev`` writes its records and its services', one line each, from
    any thread. Once the output's reader is gone (EPIPE) the output is broken: what comes
    after is dropped (the reading threads go on draining the services' pipes, so that no
    service ever blocks on its output), and :attr:`broken` says so."""

    def __init__(self, stream: TextIO, *, json_lines: bool, width: int) -> None:
        self._stream = stream
        self._json_lines = json_lines
        self._width = width
        self._lock = threading.Lock()
        self._broken = False

    @property
    def broken(self) -> bool:
        """Whether a write failed with EPIPE, or would: the pipe's reader is gone."""
        if not self._broken and _reader_gone(self._stream):
            with self._lock:
                self._break()
        return self._broken

    def say(self, message: str, level: str = "info") -> None:
        """Write a record of ``tickwork dev`` itself."""
        record = {"time": _now(), "level": level, "logger": "tickwork.dev", "message": message}
        self.write_record(DEV_SERVICE, record)

    def write_service_line(self, service: str, raw: bytes) -> None:
        """Write what a service printed on one line: its JSON record, or the line as one."""
        text = raw.decode("utf-8", "replace").rstrip()
        if text.strip():
            self.write_record(service, record_of(text))

    def write_record(self, service: str, record: dict[str, Any]) -> None:
        """Write one record of ``service`` in the output's format."""
        line = self.render(service, record)
        with self._lock:
            if self._broken:
                return
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except (OSError, ValueError):  # EPIPE, or EIO from a terminal that closed
                self._break()

    def render(self, service: str, record: dict[str, Any]) -> str:
        """A record as the output shows it (more than one line only for a traceback or a
        message of several lines in text, each behind the same prefix)."""
        if self._json_lines:
            rest = {k: v for k, v in record.items() if k not in ("time", "service")}
            return json.dumps({"time": record.get("time") or _now(), "service": service, **rest})
        prefix = f"{_clock_time(record.get('time'))} {service:<{self._width}} | "
        level = str(record.get("level") or "info").upper()
        text = f"{level} {record.get('logger') or '-'} {record.get('message', '')}"
        if record.get("exception"):
            text += f"\n{record['exception']}"
        return "\n".join(prefix + line for line in text.splitlines())

    def _break(self) -> None:
        """Mark the output broken and point its descriptor at /dev/null, so that nothing
        buffered fails again at exit (called holding the lock)."""
        self._broken = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)


def record_of(text: str) -> dict[str, Any]:
    """A line a service printed as a log record: the JSON record it is, or a record of
    logger ``output`` whose message is the line."""
    if text.startswith("{"):
        with contextlib.suppress(ValueError):
            entry = json.loads(text)
            if isinstance(entry, dict) and "message" in entry:
                return entry
    return {"time": _now(), "level": "info", "logger": "output", "message": text}


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _clock_time(iso: object) -> str:
    """``HH:MM:SS`` in local time of a record's ISO 8601 time (now, if it has none)."""
    try:
        moment = datetime.fromisoformat(str(iso)) if iso else datetime.now(UTC)
    except ValueError:
        moment = datetime.now(UTC)
    return moment.astimezone().strftime("%H:%M:%S")


def _reader_gone(stream: IO[str]) -> bool:
    """Whether ``stream`` is a pipe whose reading end is closed (a write would fail with
    EPIPE): poll reports POLLERR for it without anything being written."""
    try:
        descriptor = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(descriptor).st_mode):
            return False
    except (OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(descriptor, 0)  # no event asked for: errors are always reported
    return any(events & select.POLLERR for _fd, events in poller.poll(0))


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP, noted by their handlers (which do nothing else, so
    that no lock is ever taken inside one): the first asks for a stop, a second for the
    SIGKILL without waiting."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: list[int] = []

    def install(self) -> None:
        """Handle the signals in this process from now on, but SIGINT and SIGHUP if they
        are ignored (``nohup``, a shell's background job), as Python does for SIGINT."""
        for signum in self.HANDLED:
            ignored = signal.getsignal(signum) is signal.SIG_IGN
            if signum == signal.SIGTERM or not ignored:
                signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    @property
    def first(self) -> signal.Signals | None:
        return signal.Signals(self.received[0]) if self.received else None

    def repeated(self) -> bool:
        return len(self.received) > 1


@dataclass
class _Running:
    name: str
    process: subprocess.Popen[bytes]
    reader: threading.Thread
    reported: bool = False


class ServiceGroup:
    """The running services of one ``tickwork dev``, each in a session of its own (its pid
    is its process group and session id), their output written to a :class:`DevOutput`."""

    def __init__(self, output: DevOutput) -> None:
        self._output = output
        self._running: list[_Running] = []

    def start(self, services: list[ServiceProcess]) -> None:
        """Start every service, each with a thread reading its output."""
        for service in services:
            process = subprocess.Popen(
                service.argv,
                env=service.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            assert process.stdout is not None
            reader = threading.Thread(
                target=self._read,
                args=(service.name, process.stdout),
                name=f"read-{service.name}",
                daemon=True,
            )
            reader.start()
            self._running.append(_Running(service.name, process, reader))
            self._output.say(f"{service.name} started pid={process.pid}")

    def _read(self, name: str, pipe: IO[bytes]) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                self._output.write_service_line(name, raw)

    def first_exit(self) -> tuple[str, int] | None:
        """The first service found to have exited on its own, and its status."""
        for running in self._running:
            status = running.process.poll()
            if status is not None:
                return running.name, status
        return None

    def stop(self, kill_wait_seconds: float, kill_now: Callable[[], bool]) -> None:
        """SIGTERM each service's own process; SIGKILL each service's process group still
        there after ``kill_wait_seconds`` (or once ``kill_now()``); then SIGKILL whatever
        is left in their sessions, and read their output to its end (all bounded)."""
        alive = [r for r in self._running if r.process.poll() is None]
        if alive:
            names = ", ".join(r.name for r in alive)
            self._output.say(
                f"stopping {names}: SIGTERM to each, SIGKILL {kill_wait_seconds:g}s on"
            )
        for running in alive:
            _send(os.kill, running.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + kill_wait_seconds
        while self._report_exits() and time.monotonic() < deadline and not kill_now():
            time.sleep(POLL_SECONDS)
        for running in self._running:
            if running.process.poll() is None:
                self._output.say(f"{running.name} is still running: SIGKILL", "warning")
                _send(os.killpg, running.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + REAP_TIMEOUT_SECONDS
        while self._report_exits() and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        for running in self._running:
            kill_session(running.process.pid)
        for running in self._running:
            running.reader.join(max(0.0, deadline - time.monotonic()))

    def _report_exits(self) -> bool:
        """Say which services exited since the last call; whether any is still running."""
        running_still = False
        for running in self._running:
            status = running.process.poll()
            if status is None:
                running_still = True
            elif not running.reported:
                running.reported = True
                self._output.say(describe_exit(running.name, status))
        return running_still


def describe_exit(name: str, status: int) -> str:
    """How a process ended: ``api exited with status 2``, ``agent.1 was killed by SIGKILL``."""
    if status < 0:
        try:
            signal_name = signal.Signals(-status).name
        except ValueError:
            signal_name = f"signal {-status}"
        return f"{name} was killed by {signal_name}"
    return f"{name} exited with status {status}"


def kill_session(session_id: int) -> None:
    """SIGKILL every process left in a service's session: its process group, and the
    process groups of its own (a task's) that /proc shows, where there is a /proc."""
    _send(os.killpg, session_id, signal.SIGKILL)
    for pid in processes_in_session(session_id):
        _send(os.kill, pid, signal.SIGKILL)


def processes_in_session(session_id: int) -> list[int]:
    """Pids of the processes whose session is ``session_id``, as /proc shows them (none
    where there is no /proc)."""
    found = []
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat_line = (entry / "stat").read_text(encoding="ascii", errors="replace")
            except OSError:
                continue  # gone meanwhile
            fields = stat_line.rpartition(")")[2].split()  # after the command's name
            if len(fields) > 3 and int(fields[3]) == session_id:
                found.append(int(entry.name))
    return found


def _send(send: Callable[[int, int], None], pid: int, signum: int) -> None:
    """Send a signal, ignoring a process already gone or no longer ours."""
    try:
        send(pid, signum)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ESRCH):
            raise
