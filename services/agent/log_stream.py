"""Sending a run's log file from the agent's spool to the event stream, head and tail.

The agent's operator writes the log to a spool, kept in memory or in a file under
``<work dir>/logs/<pid>/``.
While it runs, the first :attr:`LogLimits.head_bytes` are streamed as they are written, by
the pool process's one :class:`LogPump` thread (a thread per run would cost a start and a
join on every task, most of which end before there is anything to stream).
When it ends, the rest follows: all of it if the log is at most ``head_bytes +
tail_bytes``; otherwise a marker line ``[tickwork: N bytes cut here]`` and the last
``tail_bytes`` (the end of a log is what explains a failure). The stored file only ever
grows, so a reader following it never sees a byte change. Every read and every Redis
round trip holds at most :data:`LOG_BATCH_CHUNKS` chunks of :data:`LOG_CHUNK_BYTES`:
streaming costs the same memory whatever the size of the log. The spool is a
:class:`~tickwork.services.agent.spool.SpoolLog`: in memory unless a child process writes it or it
grows large; a spool file is removed after the run, and spools of pool processes that
died are removed when the next one starts.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from redis.exceptions import RedisError

from tickwork.services.agent.log_limits import LogLimits
from tickwork.services.agent.spool import SpoolLog
from tickwork.shared.dispatch.messages import (
    AgentEvent,
    TaskFinished,
    TaskLogChunk,
    TaskMessage,
    TaskStarted,
)

log = logging.getLogger(__name__)

LOG_CHUNK_BYTES = 256 * 1024
"""Bytes of a log in one event."""
LOG_BATCH_CHUNKS = 4
"""Log events per Redis round trip: the most of a log held in memory at once."""
LOG_POLL_SECONDS = 0.5
STARTED_HOLD_SECONDS = 0.05

Emit = Callable[[list[AgentEvent]], None]


class EventEmitter(Protocol):
    """Where a run's events go: the event stream of an agent, the executor's own sink in
    one process."""

    def emit(self, events: Sequence[AgentEvent]) -> None:
        """Send ``events`` in order, at once; raise if they could not be sent."""


def cut_marker(cut_bytes: int, *, at_line_start: bool) -> bytes:
    """The line that stands for the ``cut_bytes`` left out of a log (on a line of its own)."""
    line = f"[tickwork: {cut_bytes:,} bytes cut here]\n"
    return (line if at_line_start else "\n" + line).encode("ascii")


@dataclass(frozen=True)
class _Segment:
    """Bytes ``start..end`` of the spool file, stored from byte ``stored_at`` on."""

    start: int
    end: int
    stored_at: int


class LogPump:
    """The thread that streams the logs of a pool process's running tasks.

    Each :class:`LogStreamer` it was given is called again when its time comes (see
    :meth:`LogStreamer.beat`); a streamer whose run ended is forgotten. Adding a streamer
    wakes the thread only when it is due before the thread would wake anyway, and
    removing one never does: a task that ends before its first turn costs the thread
    nothing. The thread starts with the first streamer added.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[LogStreamer, float] = {}  # streamer -> time.monotonic() of its turn
        self._wakes_at = math.inf  # when the waiting thread wakes; -inf while it is busy
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, streamer: LogStreamer, delay_seconds: float) -> None:
        """Give ``streamer`` its turn ``delay_seconds`` from now."""
        due = time.monotonic() + delay_seconds
        with self._cond:
            if self._closed:
                return
            self._due[streamer] = due
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-pump", daemon=True)
                self._thread.start()
            elif due < self._wakes_at:
                self._cond.notify()

    def remove(self, streamer: LogStreamer) -> None:
        """Give ``streamer`` no more turns (one under way is not waited for here)."""
        with self._cond:
            self._due.pop(streamer, None)

    def close(self) -> None:
        """Stop the thread (the logs of runs still going are then sent when they end)."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout=5)

    def _next(self) -> LogStreamer | None:
        """The next streamer whose turn it is, once it is; None once closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                self._wakes_at = math.inf
                if self._due:
                    streamer, due = min(self._due.items(), key=lambda item: item[1])
                    if due <= now:
                        del self._due[streamer]
                        self._wakes_at = -math.inf  # busy: it looks again before waiting
                        return streamer
                    self._wakes_at = due
                self._cond.wait(None if self._wakes_at == math.inf else self._wakes_at - now)
            return None

    def _run(self) -> None:
        while (streamer := self._next()) is not None:
            try:
                delay = streamer.beat()
            except Exception:  # one run's bug must not stop the streaming of the others
                log.exception("streaming a log failed task_id=%d", streamer.message.task_id)
                continue
            if delay is not None:
                with self._cond:
                    if not self._closed and not streamer.ended:
                        self._due[streamer] = time.monotonic() + delay


class LogStreamer:
    """Sends what a run writes to its spool file to the event stream, chunk by chunk, in
    the turns ``pump`` gives it.

    It also holds the run's ``started`` event back for :data:`STARTED_HOLD_SECONDS`: a
    short task then reports started, log and result in one go, and the executor applies
    them in one pass instead of two. After :meth:`finish`, ``stored_bytes`` and
    ``cut_bytes`` say what the stored file holds.
    """

    def __init__(
        self,
        stream: EventEmitter,
        message: TaskMessage,
        relative: Path,
        spool: SpoolLog,
        pump: LogPump,
        limits: LogLimits | None = None,
    ) -> None:
        self.stream = stream
        self.message = message
        self.relative = str(relative)
        self.spool = spool
        self.pump = pump
        self.limits = limits or LogLimits()
        self.offset = 0  # bytes of the head sent so far
        self.stored_bytes = 0
        self.cut_bytes = 0
        self.ended = False  # finish() or stop() was called: no more turns
        self._lock = threading.Lock()  # held through a turn: the end waits for it
        self._started: TaskStarted | None = None

    def start(self, started: TaskStarted) -> None:
        """Stream in the background while the operator runs; report ``started`` soon."""
        self._started = started
        self.pump.add(self, STARTED_HOLD_SECONDS)

    def beat(self) -> float | None:
        """One turn (the pump's): report the held ``started``, or send the head written
        since the last turn. Seconds until the next turn; None once the run ended."""
        with self._lock:
            if self.ended:
                return None
            started, self._started = self._started, None
            try:
                if started is not None:
                    self.stream.emit([started])
                else:
                    self._send_head(self.stream.emit)
            except (OSError, RedisError) as exc:
                log.debug("log streaming paused: %s", exc)
            return LOG_POLL_SECONDS

    def _send_head(self, emit: Emit) -> None:
        """Send the head written since the last call, a batch per round trip; a batch
        counts as sent only once ``emit`` returned."""
        end = min(self._size(), self.limits.head_bytes)
        batch: list[AgentEvent] = []
        for chunk in self._chunks(_Segment(self.offset, end, self.offset)):
            batch.append(chunk)
            if len(batch) == LOG_BATCH_CHUNKS:
                emit(batch)
                self.offset, batch = _after(batch), []
        if batch:
            emit(batch)
            self.offset = _after(batch)

    def stop(self) -> None:
        """Stop streaming and send nothing more (the run's result is not reported)."""
        self._halt()
        with self._lock:
            self._started = None

    def finish(self, emit: Emit) -> list[AgentEvent]:
        """Stop streaming and send the rest of the log through ``emit``, a batch at a
        time; the last events (``started`` first, if still held) are returned, to go out
        with the run's result. The stored file always exists, even for a run that wrote
        nothing."""
        self._halt()
        with self._lock:
            started, self._started = self._started, None
            pending: list[AgentEvent] = [started] if started is not None else []
            size = self._size()
            if size == 0:
                return [*pending, self._chunk(0, b"")]
            for chunk in self._rest(size):
                if len(pending) >= LOG_BATCH_CHUNKS:
                    emit(pending)
                    pending = []
                pending.append(chunk)
            return pending

    def describe(self, finished: TaskFinished) -> TaskFinished:
        """``finished`` saying what the stored log holds (after :meth:`finish`)."""
        return replace(
            finished, log_size_bytes=self.stored_bytes, log_truncated_bytes=self.cut_bytes
        )

    def _halt(self) -> None:
        """No more turns; a turn under way ends first (its events go out before the rest)."""
        self.pump.remove(self)
        with self._lock:
            self.ended = True

    def _rest(self, size: int) -> Iterator[TaskLogChunk]:
        """What is left to send once the run ended, ``size`` bytes long."""
        head, tail = self.limits.head_bytes, self.limits.tail_bytes
        if size <= head + tail:
            self.stored_bytes, self.cut_bytes = size, 0
            yield from self._chunks(_Segment(self.offset, size, self.offset))
            return
        cut = size - head - tail
        marker = cut_marker(cut, at_line_start=head == 0 or self._byte_at(head - 1) == b"\n")
        self.stored_bytes, self.cut_bytes = head + len(marker) + tail, cut
        yield from self._chunks(_Segment(self.offset, head, self.offset))
        yield self._chunk(head, marker)
        yield from self._chunks(_Segment(size - tail, size, head + len(marker)))

    def _chunks(self, segment: _Segment) -> Iterator[TaskLogChunk]:
        """The segment's bytes, read one chunk at a time."""
        if segment.end <= segment.start:
            return
        with self.spool.open_bytes() as spool:
            spool.seek(segment.start)
            position = segment.start
            while position < segment.end:
                data = spool.read(min(LOG_CHUNK_BYTES, segment.end - position))
                if not data:
                    return
                yield self._chunk(segment.stored_at + position - segment.start, data)
                position += len(data)

    def _chunk(self, offset: int, data: bytes) -> TaskLogChunk:
        return TaskLogChunk(
            task_id=self.message.task_id,
            lease_token=self.message.lease_token,
            path=self.relative,
            offset=offset,
            data=data.decode("utf-8", "surrogateescape"),
        )

    def _size(self) -> int:
        return self.spool.size()

    def _byte_at(self, position: int) -> bytes:
        with self.spool.open_bytes() as spool:
            spool.seek(position)
            return spool.read(1)


def _after(batch: Sequence[AgentEvent]) -> int:
    """The stored offset just past the last chunk of ``batch``."""
    last = batch[-1]
    assert isinstance(last, TaskLogChunk)
    return last.offset + len(last.data.encode("utf-8", "surrogateescape"))


def remove_spool(spool: SpoolLog) -> None:
    """Remove a run's spool file, if its log became one (spool files lie side by side)."""
    if spool.on_disk:
        spool.path.unlink(missing_ok=True)


def remove_dead_spools(root: Path) -> int:
    """Remove the spool folders (``root/<pid>``) of pool processes that are gone, and this
    process's own (a dead process with the same pid left it); how many were removed."""
    if not root.is_dir():
        return 0
    removed = 0
    for folder in root.iterdir():
        if folder.is_dir() and folder.name.isdigit():
            pid = int(folder.name)
            if pid == os.getpid() or not _is_running(pid):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    if removed:
        log.info("removed the log spools of %d ended pool processes", removed)
    return removed


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
