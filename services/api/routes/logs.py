"""Task logs of an attempt: the list of files, a file's content (or a byte range of it),
and a server-sent event stream that follows the attempt's logs as they are written.

Files live under the log directory (``TICKWORK_LOG_DIR``); the store keeps their paths
relative to it, and no path that resolves outside it is ever read.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from apiflask import APIBlueprint
from flask import Response, current_app, request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine, select

from services.api.database import current_engine, read_connection
from services.api.errors import ApiProblem, InvalidParameter
from shared.store import history
from shared.store.engine import read_only
from shared.store.sessions import get_attempt_state
from shared.store.tables import tasks

blueprint = APIBlueprint("logs", __name__, tag="Logs")

CONFIG_KEY = "tickwork.config"
FOLLOW_SLOTS_KEY = "tickwork.follow_slots"
FOLLOW_MAX_SECONDS = 600.0
FOLLOW_POLL_SECONDS = 0.5
# A stream whose attempt wrote nothing polls less often, up to this; new text resets it.
# Each pass reads the store and the log directory: hundreds of quiet streams at 0.5 s
# would take a server's CPU from every other request.
FOLLOW_IDLE_POLL_SECONDS = 2.0
TEXT_TYPE = "text/plain; charset=utf-8"
# Most bytes of a log one follow event carries: a follower holds no more of it in memory.
FOLLOW_EVENT_BYTES = 256 * 1024
# What the agent names a run's log file: <task name>.<task id>.<lease token>.log
_RUN_FILE = re.compile(r"\.(\d+)\.(\d+)\.log$")
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
# A stream offset as ``Last-Event-ID`` carries it: ASCII digits a 64-bit integer holds.
_EVENT_ID = re.compile(r"[0-9]{1,18}")


class LogFileOut(BaseModel):
    """One log file: the log of one run of a task."""

    id: str
    task: str = Field(description="The task's full name.")
    task_id: str
    run: int = Field(description="The lease token of the run that wrote it.")
    path: str = Field(description="Relative to the server's log directory.")
    size_bytes: int = Field(
        description="Of the file now: a run still going may write more (a file not "
        "written yet reads as empty)."
    )
    truncated_bytes: int = Field(
        description="Bytes cut from the middle of a large log: the file holds the log's "
        "head, a line `[tickwork: N bytes cut here]`, then its tail. 0: nothing was cut."
    )
    created_at: datetime = Field(description="When the run was handed to an agent.")
    ended_at: datetime | None = Field(
        description="When the run's result recorded the file; null while the run goes on, "
        "and for a run that ended without a result (killed, its agent lost)."
    )


class LogFileList(BaseModel):
    """The log files of an attempt, one per run of a task, in the order the runs were
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


class FollowQuery(BaseModel):
    """Where to resume and how long to follow."""

    model_config = ConfigDict(extra="forbid")

    offset: int = Field(0, ge=0, description="Bytes of the stream already received.")
    max_seconds: float = Field(
        FOLLOW_MAX_SECONDS, gt=0, le=FOLLOW_MAX_SECONDS, description="Stop after this long."
    )


def _log_root() -> Path:
    config = current_app.extensions[CONFIG_KEY]
    if config.log_dir is None:
        raise ApiProblem(503, "this server has no log directory (set TICKWORK_LOG_DIR)")
    return Path(config.log_dir).resolve()


def resolve_log_path(root: Path, relative: str) -> Path | None:
    """``root / relative`` if it stays inside ``root``; None for a path that escapes it."""
    if not relative or "\x00" in relative:
        return None
    path = (root / relative).resolve()
    return path if path.is_relative_to(root) and path != root else None


@blueprint.get("/api/logs/<id:attempt_id>/files")
@blueprint.input(FilesQuery, location="query", arg_name="query")
@blueprint.output(LogFileList)
@blueprint.doc(responses={404: "No such attempt"})
def list_files(attempt_id: int, query: FilesQuery) -> dict[str, Any]:
    """The attempt's log files, optionally of the tasks under a name prefix."""
    with read_connection() as conn:
        files = history.list_log_files(conn, attempt_id, task_prefix=query.task)
    config = current_app.extensions[CONFIG_KEY]
    root = None if config.log_dir is None else Path(config.log_dir).resolve()
    items = [
        {
            "id": str(f.id),
            "task": f.task_full_name,
            "task_id": str(f.task_id),
            "run": f.lease_token,
            "path": f.path,
            "size_bytes": _current_size(root, f),
            "truncated_bytes": f.truncated_bytes,
            "created_at": f.created_at,
            "ended_at": f.ended_at,
        }
        for f in files
    ]
    return {"items": items, "next_cursor": None}


def _current_size(root: Path | None, file: history.LogFile) -> int:
    """The size its result recorded of an ended run's file; else the size of the file
    on disk now (a run still going writes on), 0 if there is none yet."""
    path = None if root is None or file.ended_at else resolve_log_path(root, file.path)
    try:
        return file.size_bytes if path is None else path.stat().st_size
    except OSError:
        return file.size_bytes


ResponseDoc = dict[str, str | dict[str, dict[str, Any]]]


def _described(description: str) -> ResponseDoc:
    return {"description": description}


def _text(description: str, media_type: str = "text/plain") -> ResponseDoc:
    """An OpenAPI response whose body is text of ``media_type``, not JSON."""
    return {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}


_FILE_RESPONSES: dict[int | str, ResponseDoc] = {
    200: _text(
        "The file's text from `offset`: at most `length` bytes, and at most 16 MiB "
        "(`X-Log-Size` is the file's size)"
    ),
    206: _text("The range asked for with `Range: bytes=a-b` (at most 16 MiB)"),
    404: _described("No such attempt or file"),
    416: _described("The range lies outside the file"),
}


@blueprint.get("/api/logs/<id:attempt_id>/files/<id:file_id>")
@blueprint.input(ContentQuery, location="query", arg_name="query")
@blueprint.doc(responses=_FILE_RESPONSES)
def get_file(attempt_id: int, file_id: int, query: ContentQuery) -> Response:
    """A log file's content, or a part of it: `Range: bytes=a-b` or `?offset=&length=`."""
    with read_connection() as conn:
        found = history.get_log_file(conn, attempt_id, file_id)
    file, size = _open_log(found)
    try:
        status, start, length = _part(request.headers.get("Range"), query, size)
    except ApiProblem:
        file.close()
        raise
    response = Response(_stream(file, start, length), status, content_type=TEXT_TYPE)
    response.headers["Content-Length"] = str(length)
    if status == 206:
        response.headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
    response.headers["Accept-Ranges"] = "bytes"
    response.headers["X-Log-Size"] = str(size)
    return response


MAX_READ_BYTES = 16 * 1024 * 1024
"""Most bytes of a log one response holds; X-Log-Size tells how much more there is."""
SEND_CHUNK_BYTES = 64 * 1024
"""Bytes read and sent at a time: a response holds no more of a log in memory."""


def _open_log(found: history.LogFile) -> tuple[BinaryIO, int]:
    """The stored file of ``found``, open, and its size now; 404 if it is not there. A
    listed file of 0 bytes that is not there is a run that has written nothing yet (or
    never did): it reads as empty."""
    path = resolve_log_path(_log_root(), found.path)
    if path is None:
        current_app.logger.warning("log path outside the log directory refused: %r", found.path)
        raise ApiProblem(404, f"log file {found.id} is not in the log directory")
    try:
        file = path.open("rb")
    except OSError:
        if found.size_bytes == 0:
            return io.BytesIO(), 0
        raise ApiProblem(404, f"log file {found.id} is no longer on disk") from None
    return file, os.fstat(file.fileno()).st_size


def _part(header: str | None, query: ContentQuery, size: int) -> tuple[int, int, int]:
    """The status, first byte and length of what to send: the ``Range`` asked for (206),
    else ``offset`` and ``length`` (200); each at most :data:`MAX_READ_BYTES`."""
    if header is not None:
        start, end = _parse_range(header, size)
        end = min(end, start + MAX_READ_BYTES - 1)  # a shorter 206 than asked; RFC 9110 allows
        return 206, start, end - start + 1
    start = query.offset or 0
    if start > size:
        raise _unsatisfiable(f"offset {start} is past the end of the file ({size} bytes)", size)
    length = size - start if query.length is None else min(query.length, size - start)
    return 200, start, min(length, MAX_READ_BYTES)


def _stream(file: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    """``length`` bytes of ``file`` from ``start``, a chunk at a time; closes the file."""
    with file:
        file.seek(start)
        left = length
        while left > 0:
            data = file.read(min(SEND_CHUNK_BYTES, left))
            if not data:
                return
            left -= len(data)
            yield data


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
        raise _unsatisfiable(f"Range {header!r} lies outside the file ({size} bytes)", size)
    return start, end


@dataclass(frozen=True)
class _StreamFile:
    relative: str
    task: str | None
    path: Path


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

    Each `log` event carries new text of one file and names its task; the text of runs
    going at once interleaves, each file's in order. `offset` (or the `Last-Event-ID`
    header) resumes after the bytes already received, counting the files in the order
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
    root = _log_root()
    release = _take_follow_slot()
    stream = _follow(current_engine(), root, attempt_id, offset, max_seconds)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    response = Response(stream, 200, mimetype="text/event-stream", headers=headers)
    response.call_on_close(release)  # when the stream ends or its client goes
    return response


def _take_follow_slot() -> Callable[[], None]:
    """Count one more open stream of this worker (503 past the limit); the release."""
    limit = current_app.extensions[CONFIG_KEY].max_follow_streams
    slots = current_app.extensions.get(FOLLOW_SLOTS_KEY)
    if slots is None:  # the first stream of this worker
        slots = current_app.extensions.setdefault(
            FOLLOW_SLOTS_KEY, threading.BoundedSemaphore(limit)
        )
    if not slots.acquire(blocking=False):
        raise ApiProblem(
            503,
            f"this server process already streams {limit} logs; retry later",
            headers={"Retry-After": "5"},
        )
    return slots.release  # type: ignore[no-any-return]


def _event(name: str, data: dict[str, Any], event_id: int | None = None) -> str:
    lines = [f"event: {name}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


def _follow(
    engine: Engine, root: Path, attempt_id: int, offset: int, max_seconds: float
) -> Iterator[str]:
    deadline = time.monotonic() + max_seconds
    sent = offset
    placed: dict[Path, int] | None = None  # bytes of each file sent so far
    poll_seconds = FOLLOW_POLL_SECONDS
    yield ": following attempt logs\n\n"
    while True:
        sent_before = sent
        # The state is read before the files: once it says done, this read is the last.
        with read_only(engine) as conn:
            state = get_attempt_state(conn, attempt_id)
            files = _stream_files(conn, root, attempt_id)
        sizes = _sizes(files)
        if placed is None:
            placed = _place(files, sizes, offset)
        # Each file is sent on from where it was left: runs going at once write at once.
        for file in files:
            size = sizes.get(file.path, 0)
            for text, start, used in _unsent_text(
                file.path, placed.get(file.path, 0), size, final=state.is_done
            ):
                placed[file.path] = start + used
                sent += used
                event = {"file": file.relative, "task": file.task, "offset": sent - used}
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
            # finds out (and stops polling) instead of polling on until max_seconds.
            yield ": waiting\n\n"
        poll_seconds = (
            min(1.5 * poll_seconds, FOLLOW_IDLE_POLL_SECONDS) if quiet else FOLLOW_POLL_SECONDS
        )
        time.sleep(min(poll_seconds, deadline - now))


def _sizes(files: list[_StreamFile]) -> dict[Path, int]:
    """The size of each file of the stream that is on disk."""
    sizes: dict[Path, int] = {}
    for file in files:
        try:
            sizes[file.path] = file.path.stat().st_size
        except OSError:
            continue
    return sizes


def _place(files: list[_StreamFile], sizes: dict[Path, int], offset: int) -> dict[Path, int]:
    """Where a stream resumed at ``offset`` stands in each file: the files in stream order,
    each counted whole until ``offset`` is used up. Exact when the runs wrote one after
    the other; of runs that wrote at once, a resumed stream may repeat or skip a part."""
    placed: dict[Path, int] = {}
    left = offset
    for file in files:
        placed[file.path] = min(sizes.get(file.path, 0), left)
        left -= placed[file.path]
    return placed


def _unsent_text(
    path: Path, start: int, size: int, *, final: bool
) -> Iterator[tuple[str, int, int]]:
    """The text of ``path`` from byte ``start`` up to ``size``, at most
    :data:`FOLLOW_EVENT_BYTES` at a time: ``(text, first byte, bytes used)``.

    A UTF-8 character cut by the end of a part starts the next one; one cut by ``size``
    is left for the next pass (unless ``final``). A follower so holds one part of a log
    in memory, whatever the log's size.
    """
    try:
        file = path.open("rb")
    except OSError:
        return
    with file:
        while start < size:
            file.seek(start)
            data = file.read(min(FOLLOW_EVENT_BYTES, size - start))
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


def _stream_files(conn: Connection, root: Path, attempt_id: int) -> list[_StreamFile]:
    """The files of the stream, in its order: indexed ones, then any other run's file
    on disk (a run an executor dispatched before runs were indexed when dispatched)."""
    indexed = history.list_log_files(conn, attempt_id)
    found: list[_StreamFile] = []
    seen: set[Path] = set()
    for file in indexed:
        path = resolve_log_path(root, file.path)
        if path is not None and path not in seen:
            seen.add(path)
            found.append(_StreamFile(file.path, file.task_full_name, path))
    live: list[tuple[int, int, Path]] = []
    directory = resolve_log_path(root, str(attempt_id))
    if directory is not None and directory.is_dir():
        for path in directory.glob("*.log"):
            match = _RUN_FILE.search(path.name)
            resolved = path.resolve()
            if match and resolved not in seen and resolved.is_relative_to(root):
                live.append((int(match.group(1)), int(match.group(2)), resolved))
    live.sort()
    names = _task_names(conn, attempt_id, {task_id for task_id, _, _ in live})
    for task_id, _, path in live:
        found.append(_StreamFile(str(path.relative_to(root)), names.get(task_id), path))
    return found


def _task_names(conn: Connection, attempt_id: int, task_ids: set[int]) -> dict[int, str]:
    if not task_ids:
        return {}
    query = select(tasks.c.id, tasks.c.full_name).where(
        tasks.c.attempt_id == attempt_id, tasks.c.id.in_(sorted(task_ids))
    )
    return {int(i): str(name) for i, name in conn.execute(query)}
