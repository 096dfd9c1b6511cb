"""Task logs of an attempt: the list of its runs' logs, a log's text (or a byte range of
it), and a server-sent event stream that follows the attempt's logs as they are written.

Logs live in the store (see :mod:`tickwork.shared.store.logs`, which every reader goes through):
any replica serves any log, whichever executor stored it. A follower wakes on the
executor's PostgreSQL notices (one listening connection per server process, see
:mod:`tickwork.shared.store.log_notices`) and reads the store once per change; on SQLite it polls.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar, cast

from apiflask import APIBlueprint
from flask import Response, current_app, request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine

from tickwork.services.api.database import current_engine, read_connection
from tickwork.services.api.errors import ApiProblem, InvalidParameter
from tickwork.services.api.extensions import api_config
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store import logs as log_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import read_only
from tickwork.shared.store.log_notices import LogNotices
from tickwork.shared.store.sessions import get_attempt_state

blueprint = APIBlueprint("logs", __name__, tag="Logs")

FOLLOW_SLOTS_KEY = "tickwork.follow_slots"
NOTICES_KEY = "tickwork.log_notices"
SNAPSHOTS_KEY = "tickwork.log_snapshots"
SNAPSHOTS_KEPT = 1000
"""Attempts whose last read followers share, at most (older ones are dropped past it)."""
FOLLOW_MAX_SECONDS = 600.0
FOLLOW_POLL_SECONDS = 0.5
# Where nothing notifies (SQLite), a stream whose attempt wrote nothing polls less often,
# up to this; new text resets it: hundreds of quiet streams at 0.5 s would take a
# server's CPU from every other request.
FOLLOW_IDLE_POLL_SECONDS = 2.0
# With notices, a stream reads the store at most this often (a busy attempt is notified
# by every pass), and at least every FOLLOW_CHECK_SECONDS should a notice be lost.
FOLLOW_MIN_READ_SECONDS = 0.25
FOLLOW_CHECK_SECONDS = 5.0
TEXT_TYPE = "text/plain; charset=utf-8"
# Most bytes of a log one follow event carries: a follower holds no more of it in memory.
FOLLOW_EVENT_BYTES = 256 * 1024
T = TypeVar("T")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
# A stream offset as ``Last-Event-ID`` carries it: ASCII digits a 64-bit integer holds.
_EVENT_ID = re.compile(r"[0-9]{1,18}")


class LogFileOut(BaseModel):
    """The log of one run of a task."""

    id: str
    task: str = Field(description="The task's full name.")
    task_id: str
    run: int = Field(description="The lease token of the run that wrote it.")
    path: str = Field(description="The run's log name: `<attempt id>/<task>.<task id>.<run>.log`.")
    size_bytes: int = Field(
        description="Of the log now: a run still going may write more (a run that wrote "
        "nothing yet reads as empty)."
    )
    missing_bytes: int = Field(
        description="Bytes of it that never reached the store (a gap, read as NUL bytes). "
        "0: the log is whole."
    )
    truncated_bytes: int = Field(
        description="Bytes cut from the middle of a large log: the log holds its head, a "
        "line `[tickwork: N bytes cut here]`, then its tail. 0: nothing was cut."
    )
    created_at: datetime = Field(description="When the run was handed to an agent.")
    ended_at: datetime | None = Field(
        description="When the run's result recorded the log; null while the run goes on, "
        "and for a run that ended without a result (killed, its agent lost)."
    )
    pruned_at: datetime | None = Field(
        None,
        description="When the log retention (`TICKWORK_LOG_RETENTION`) removed its text; "
        "reading it then is a 404.",
    )


class LogFileList(BaseModel):
    """The logs of an attempt, one per run of a task, in the order the runs were
    handed to agents: those still going and those that ended without a result (killed,
    timed out, their agent lost) too."""

    items: list[LogFileOut]
    next_cursor: str | None = None


class FilesQuery(BaseModel):
    """Which files to list."""

    model_config = ConfigDict(extra="forbid")

    task: str | None = Field(None, max_length=2000, description="Full-name prefix: `+wf+load`.")


class ContentQuery(BaseModel):
    """A part of a file instead of a Range header."""

    model_config = ConfigDict(extra="forbid")

    offset: int | None = Field(None, ge=0, description="First byte to send.")
    length: int | None = Field(None, ge=0, description="At most this many bytes.")
    download: bool = Field(
        False,
        description="The whole log as a file to save (`Content-Disposition: attachment`), "
        "however large; `offset`, `length` and `Range` are then ignored.",
    )


class FollowQuery(BaseModel):
    """Where to resume and how long to follow."""

    model_config = ConfigDict(extra="forbid")

    offset: int = Field(0, ge=0, description="Bytes of the stream already received.")
    max_seconds: float = Field(
        FOLLOW_MAX_SECONDS, gt=0, le=FOLLOW_MAX_SECONDS, description="Stop after this long."
    )


@blueprint.get("/api/logs/<id:attempt_id>/files")
@blueprint.input(FilesQuery, location="query", arg_name="query")
@blueprint.output(LogFileList)
@blueprint.doc(responses={404: "No such attempt"})
def list_files(attempt_id: int, query: FilesQuery) -> dict[str, Any]:
    """The attempt's logs, optionally of the tasks under a name prefix."""
    with read_connection() as conn:
        get_attempt_state(conn, attempt_id)
        logs = log_store.list_run_logs(conn, attempt_id, task_prefix=query.task)
    return {"items": [log_out(log) for log in logs], "next_cursor": None}


def log_out(log: log_store.RunLog) -> dict[str, Any]:
    """A run's log as the API shows it."""
    return {
        "id": str(log.id),
        "task": log.task_full_name,
        "task_id": str(log.task_id),
        "run": log.lease_token,
        "path": log.path,
        "size_bytes": log.size_bytes,
        "missing_bytes": log.missing_bytes,
        "truncated_bytes": log.truncated_bytes,
        "created_at": log.created_at,
        "ended_at": log.ended_at,
        "pruned_at": log.pruned_at,
    }


ResponseDoc = dict[str, str | dict[str, dict[str, Any]]]


def _described(description: str) -> ResponseDoc:
    return {"description": description}


def _text(description: str, media_type: str = "text/plain") -> ResponseDoc:
    """An OpenAPI response whose body is text of ``media_type``, not JSON."""
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


_FILE_RESPONSES: dict[int | str, ResponseDoc] = {
    200: _text(
        "The log's text from `offset`: at most `length` bytes, and at most 16 MiB "
        "(`X-Log-Size` is the log's size); with `download=true`, the whole log"
    ),
    206: _text("The range asked for with `Range: bytes=a-b` (at most 16 MiB)"),
    404: _described("No such attempt or log, or the log retention removed its text"),
    416: _described("The range lies outside the log"),
}


@blueprint.get("/api/logs/<id:attempt_id>/files/<id:file_id>")
@blueprint.input(ContentQuery, location="query", arg_name="query")
@blueprint.doc(responses=_FILE_RESPONSES)
def get_file(attempt_id: int, file_id: int, query: ContentQuery) -> Response:
    """A run's log, or a part of it: `Range: bytes=a-b` or `?offset=&length=`; the whole
    of it to save with `?download=true`."""
    return file_response(attempt_id, file_id, query)


def file_response(attempt_id: int, file_id: int, query: ContentQuery) -> Response:
    """A run's log or the part of it asked for (by ``query`` or the ``Range`` header), as
    /api/logs/{id}/files/{file} and the attempt page's log pane answer it."""
    with read_connection() as conn:
        found = log_store.get_run_log(conn, attempt_id, file_id)
    log_store.check_readable(found)
    size = found.size_bytes
    if query.download:
        status, start, length = 200, 0, size
    else:
        status, start, length = _part(request.headers.get("Range"), query, size)
    stream = log_store.iter_log_bytes(current_engine(), found, start, length)
    response = Response(stream, status, content_type=TEXT_TYPE)
    response.headers["Content-Length"] = str(length)
    if status == 206:
        response.headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
    if query.download:
        name = found.path.rsplit("/", 1)[-1]
        response.headers["Content-Disposition"] = f'attachment; filename="{_safe_name(name)}"'
    response.headers["Accept-Ranges"] = "bytes"
    response.headers["X-Log-Size"] = str(size)
    return response


def _safe_name(name: str) -> str:
    """A file name for a header: letters, digits and ``+-_.`` kept, the rest ``_``."""
    return re.sub(r"[^A-Za-z0-9+._-]", "_", name)[:200] or "task.log"


MAX_READ_BYTES = 16 * 1024 * 1024
"""Most bytes of a log one response holds; X-Log-Size tells how much more there is."""


def _part(header: str | None, query: ContentQuery, size: int) -> tuple[int, int, int]:
    """The status, first byte and length of what to send: the ``Range`` asked for (206),
    else ``offset`` and ``length`` (200); each at most :data:`MAX_READ_BYTES`."""
    if header is not None:
        start, end = _parse_range(header, size)
        end = min(end, start + MAX_READ_BYTES - 1)  # a shorter 206 than asked; RFC 9110 allows
        return 206, start, end - start + 1
    start = query.offset or 0
    if start > size:
        raise _unsatisfiable(f"offset {start} is past the end of the log ({size} bytes)", size)
    length = size - start if query.length is None else min(query.length, size - start)
    return 200, start, min(length, MAX_READ_BYTES)


def _unsatisfiable(detail: str, size: int) -> ApiProblem:
    return ApiProblem(416, detail, headers={"Content-Range": f"bytes */{size}"})


def _parse_range(header: str, size: int) -> tuple[int, int]:
    """The first and last byte of ``Range: bytes=a-b`` (``a-``, ``-n`` too); 416 otherwise."""
    match = _RANGE.fullmatch(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        raise _unsatisfiable(f"Range {header!r}: expected one range, bytes=first-last", size)
    first, last = match.group(1), match.group(2)
    if first == "":  # the last n bytes
        count = int(last)
        if count == 0 or size == 0:
            raise _unsatisfiable(f"Range {header!r} selects nothing", size)
        return max(0, size - count), size - 1
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    if start >= size or (last != "" and int(last) < start):
        raise _unsatisfiable(f"Range {header!r} lies outside the log ({size} bytes)", size)
    return start, end


_FOLLOW_RESPONSES: dict[int | str, ResponseDoc] = {
    200: _text(
        "`log` events ({file, task, offset, text}; the event id is "
        "the stream offset to resume from), then `end` ({state}) when the attempt ends or "
        "`timeout` ({offset}) when `max_seconds` have passed",
        "text/event-stream",
    ),
    404: _described("No such attempt"),
}


@blueprint.get("/api/logs/<id:attempt_id>/follow")
@blueprint.input(FollowQuery, location="query", arg_name="query")
@blueprint.doc(responses=_FOLLOW_RESPONSES)
def follow(attempt_id: int, query: FollowQuery) -> Response:
    """Follow the attempt's logs as they are written, until it ends.

    Each `log` event carries new text of one run's log and names its task; the text of
    runs going at once interleaves, each log's in order. `offset` (or the `Last-Event-ID`
    header) resumes after the bytes already received, counting the logs in the order
    they are listed: exact when the runs wrote one after the other.
    """
    with read_connection() as conn:
        get_attempt_state(conn, attempt_id)
    offset = query.offset
    last_event = request.headers.get("Last-Event-ID")
    if last_event is not None:
        if _EVENT_ID.fullmatch(last_event) is None:
            raise InvalidParameter("Last-Event-ID", "expected a stream offset")
        offset = int(last_event)
    return follow_response(attempt_id, offset, query.max_seconds)


def follow_response(attempt_id: int, offset: int, max_seconds: float) -> Response:
    """The event stream following an attempt's logs from stream ``offset`` for at most
    ``max_seconds``: what /api/logs/{id}/follow and the attempt page send. It takes one
    of this worker's follow slots (503 when none is left) until it ends."""
    release = _take_follow_slot()
    engine = current_engine()
    stream = _follow(engine, _notices(engine), _snapshots(), attempt_id, offset, max_seconds)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    response = Response(stream, 200, mimetype="text/event-stream", headers=headers)
    response.call_on_close(release)  # when the stream ends or its client goes
    return response


def _take_follow_slot() -> Callable[[], None]:
    """Count one more open stream of this worker (503 past the limit); the release."""
    limit = api_config().max_follow_streams
    slots = _per_process(FOLLOW_SLOTS_KEY, lambda: threading.BoundedSemaphore(limit))
    if not slots.acquire(blocking=False):
        raise ApiProblem(
            503,
            f"this server process already streams {limit} logs; retry later",
            headers={"Retry-After": "5"},
        )
    return slots.release


def _per_process(key: str, make: Callable[[], T]) -> T:
    """This server process's one ``make()`` under ``key``, made with the first follower
    that needs it (so after gunicorn forked the process)."""
    found = current_app.extensions.get(key)
    if found is None:
        found = current_app.extensions.setdefault(key, make())
    return cast(T, found)


def _notices(engine: Engine) -> LogNotices:
    """This server process's listener of log notices (none to listen to on SQLite)."""
    url = engine.url.render_as_string(hide_password=False)
    listened = url if dialect_of(engine).serves_many_processes else None
    return _per_process(NOTICES_KEY, lambda: LogNotices(listened))


def _event(name: str, data: dict[str, Any], event_id: int | None = None) -> str:
    lines = [f"event: {name}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


class AttemptSnapshots:
    """The state and log list of attempts as a follower last read them, shared by the
    followers of one server process: followers of one attempt wake on the same notice,
    and one read within :data:`FOLLOW_MIN_READ_SECONDS` serves them all (500 followers
    of a busy attempt cost the store one listing per change, not 500)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: dict[int, tuple[float, int, AttemptState, list[log_store.RunLog]]] = {}

    def read(
        self, engine: Engine, attempt_id: int, seen: int
    ) -> tuple[AttemptState, list[log_store.RunLog]]:
        """The attempt's state and logs: read at notice count ``seen`` or later, and
        within the last :data:`FOLLOW_MIN_READ_SECONDS`."""
        now = time.monotonic()
        with self._lock:
            found = self._taken.get(attempt_id)
        if found is not None and found[1] >= seen and now - found[0] < FOLLOW_MIN_READ_SECONDS:
            return found[2], found[3]
        # The state is read before the logs: once it says done, this read is the last.
        with read_only(engine) as conn:
            state = get_attempt_state(conn, attempt_id)
            logs = log_store.list_run_logs(conn, attempt_id)
        with self._lock:
            if len(self._taken) > SNAPSHOTS_KEPT:
                self._taken = {a: t for a, t in self._taken.items() if now - t[0] < 60.0}
            self._taken[attempt_id] = (now, seen, state, logs)
        return state, logs


def _snapshots() -> AttemptSnapshots:
    """This server process's shared reads of followed attempts."""
    return _per_process(SNAPSHOTS_KEY, AttemptSnapshots)


def _follow(
    engine: Engine,
    notices: LogNotices,
    snapshots: AttemptSnapshots,
    attempt_id: int,
    offset: int,
    max_seconds: float,
) -> Iterator[str]:
    deadline = time.monotonic() + max_seconds
    sent = offset
    placed: dict[int, int] | None = None  # bytes of each run's log sent so far, by log id
    poll_seconds = FOLLOW_POLL_SECONDS
    yield ": following attempt logs\n\n"
    while True:
        sent_before = sent
        seen = notices.count(attempt_id)  # before the read: a notice after it is news
        state, logs = snapshots.read(engine, attempt_id, seen)
        if placed is None:
            placed = _place(logs, offset)
        # Each log is sent on from where it was left: runs going at once write at once.
        for log in logs:
            if log.pruned_at is not None:
                continue
            for text, start, used in _unsent_text(
                engine, log, placed.get(log.id, 0), final=state.is_done
            ):
                placed[log.id] = start + used
                sent += used
                event = {"file": log.path, "task": log.task_full_name, "offset": sent - used}
                yield _event("log", {**event, "text": text}, sent)
        if state.is_done:
            yield _event("end", {"state": state.value, "offset": sent})
            return
        now = time.monotonic()
        if now >= deadline:
            yield _event("timeout", {"offset": sent})
            return
        quiet = sent == sent_before
        if quiet:
            # A comment each quiet pass: writing it is how a stream whose client has gone
            # finds out (and stops reading) instead of waiting on until max_seconds.
            yield ": waiting\n\n"
        poll_seconds = _wait(notices, attempt_id, seen, quiet, poll_seconds, deadline - now)


def _wait(
    notices: LogNotices,
    attempt_id: int,
    seen: int,
    quiet: bool,
    poll_seconds: float,
    left_seconds: float,
) -> float:
    """Wait for the attempt's next notice (at most :data:`FOLLOW_CHECK_SECONDS`, never
    sooner than :data:`FOLLOW_MIN_READ_SECONDS`) or, where nothing notifies, poll: less
    often while the attempt writes nothing. The poll interval to use next."""
    time.sleep(min(FOLLOW_MIN_READ_SECONDS, left_seconds))
    left_seconds -= FOLLOW_MIN_READ_SECONDS
    if left_seconds > 0 and notices.listening:
        notices.wait(attempt_id, seen, min(FOLLOW_CHECK_SECONDS, left_seconds))
        return FOLLOW_POLL_SECONDS
    poll_seconds = (
        min(1.5 * poll_seconds, FOLLOW_IDLE_POLL_SECONDS) if quiet else FOLLOW_POLL_SECONDS
    )
    time.sleep(max(0.0, min(poll_seconds - FOLLOW_MIN_READ_SECONDS, left_seconds)))
    return poll_seconds


def _place(logs: list[log_store.RunLog], offset: int) -> dict[int, int]:
    """Where a stream resumed at ``offset`` stands in each log: the logs in stream order,
    each counted whole until ``offset`` is used up. Exact when the runs wrote one after
    the other; of runs that wrote at once, a resumed stream may repeat or skip a part."""
    placed: dict[int, int] = {}
    left = offset
    for log in logs:
        placed[log.id] = min(log.size_bytes, left)
        left -= placed[log.id]
    return placed


def _unsent_text(
    engine: Engine, log: log_store.RunLog, start: int, *, final: bool
) -> Iterator[tuple[str, int, int]]:
    """The text of ``log`` from byte ``start`` up to its size, at most
    :data:`FOLLOW_EVENT_BYTES` at a time: ``(text, first byte, bytes used)``.

    A UTF-8 character cut by the end of a part starts the next one; one cut by the size
    is left for the next pass (unless ``final``). A follower so holds one part of a log
    in memory, whatever the log's size.
    """
    size = log.size_bytes
    while start < size:
        with read_only(engine) as conn:
            data = log_store.read_log_bytes(conn, log, start, min(FOLLOW_EVENT_BYTES, size - start))
        text, used = _whole_characters(data, final=final and start + len(data) >= size)
        if not used:
            return
        yield text, start, used
        start += used


def _whole_characters(data: bytes, *, final: bool) -> tuple[str, int]:
    """``data`` as text and how many bytes that used: a UTF-8 character cut at the end is
    kept for later (unless ``final``); invalid bytes become U+FFFD."""
    for cut in range(0 if final else 4):
        try:
            end = len(data) - cut
            return data[:end].decode("utf-8"), end
        except UnicodeDecodeError as error:
            if error.reason != "unexpected end of data":
                break
    return data.decode("utf-8", errors="replace"), len(data)
