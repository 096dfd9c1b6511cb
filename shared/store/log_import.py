"""Moving the task logs of a release that kept them as files (under ``TICKWORK_LOG_DIR``)
into the store, once: ``tickwork db import-logs DIR``.

A file's place names its run: ``<attempt id>/<task>.<task id>.<lease token>.log``. Only
the parts of a file the store does not hold are stored, as chunks at their offsets, so
importing twice, or again after a crash, changes nothing (a run already whole in the store
is skipped without reading its file), and the bytes an executor stored are never written
over by the file's (a hole in it, where another executor stored the text instead).
A path that leaves ``DIR`` (a symbolic link, a name that is not a plain file name) is
refused, never read; a file of a task the store does not have is skipped.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from sqlalchemy import Connection, Engine, and_, select

from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.tables import task_log_chunks, task_logs, tasks

IMPORT_CHUNK_BYTES = 256 * 1024
"""Bytes of a file in one chunk row (what agents stream)."""
CHUNKS_PER_TRANSACTION = 16
"""Chunks one transaction writes: an import holds at most this much of a file at once."""
_RUN_FILE = re.compile(r"(?P<name>.*)\.(?P<task>[0-9]{1,18})\.(?P<token>[0-9]{1,18})\.log")


@dataclass(frozen=True)
class LogFileFound:
    """A run's log file under the imported directory."""

    path: Path
    relative: str
    attempt_id: int
    task_id: int
    lease_token: int
    size_bytes: int


@dataclass
class ImportReport:
    """What an import did, file by file."""

    imported: int = 0
    already: int = 0  # whole in the store before
    bytes_imported: int = 0
    unknown: list[str] = field(default_factory=list)  # no such task in the store
    refused: list[str] = field(default_factory=list)  # outside the directory, or unreadable

    def as_json(self) -> dict[str, object]:
        """The report as a JSON object."""
        return {
            "imported": self.imported,
            "already_in_store": self.already,
            "bytes_imported": self.bytes_imported,
            "unknown_tasks": len(self.unknown),
            "refused": len(self.refused),
        }


def find_log_files(root: Path, refused: list[str]) -> Iterator[LogFileFound]:
    """The run log files directly in ``root``'s attempt folders, in attempt order; what
    is not such a file is passed over, and a symbolic link (to a folder or a file) is
    added to ``refused``, never followed."""
    root = root.resolve()
    attempts = sorted(
        (e for e in os.scandir(root) if e.name.isascii() and e.name.isdigit()),
        key=lambda e: int(e.name),
    )
    for attempt in attempts:
        if attempt.is_symlink() or not attempt.is_dir(follow_symlinks=False):
            refused.append(f"{attempt.name}: not a folder inside {root}")
            continue
        for entry in sorted(os.scandir(attempt.path), key=lambda e: e.name):
            match = _RUN_FILE.fullmatch(entry.name)
            if match is None:
                continue
            relative = f"{attempt.name}/{entry.name}"
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                refused.append(f"{relative}: not a plain file inside {root}")
                continue
            yield LogFileFound(
                Path(entry.path),
                relative,
                int(attempt.name),
                int(match["task"]),
                int(match["token"]),
                info.st_size,
            )


def stored_ranges(conn: Connection, found: LogFileFound) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of the run of ``found`` the store holds, merged,
    in order: its chunks may come from agents (a new executor stored them) as well as
    from an earlier import."""
    chunk = task_log_chunks.c
    rows = conn.execute(
        select(chunk.byte_offset, chunk.size_bytes)
        .where(chunk.task_id == found.task_id, chunk.lease_token == found.lease_token)
        .order_by(chunk.byte_offset)
    )
    merged: list[tuple[int, int]] = []
    for offset, size in rows:
        start, end = int(offset), int(offset) + int(size)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def uncovered(ranges: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The parts of ``[0, size)`` that none of the merged, ordered ``ranges`` covers."""
    missing: list[tuple[int, int]] = []
    position = 0
    for start, end in ranges:
        if start > position:
            missing.append((position, min(start, size)))
        position = max(position, end)
        if position >= size:
            break
    if position < size:
        missing.append((position, size))
    return [(start, end) for start, end in missing if start < end]


def task_of(conn: Connection, found: LogFileFound) -> bool:
    """Whether the store has the task of ``found``, in its attempt."""
    row = conn.execute(
        select(tasks.c.id).where(
            and_(tasks.c.id == found.task_id, tasks.c.attempt_id == found.attempt_id)
        )
    ).first()
    return row is not None


def index_run(conn: Connection, found: LogFileFound, now: datetime) -> None:
    """Give the run of ``found`` its log row if it has none (a row its result wrote is
    kept as it is: its size and cut are the run's own)."""
    statement = dialect_of(conn).insert_ignoring_conflicts(
        task_logs, index_elements=["task_id", "lease_token"]
    )
    conn.execute(
        statement,
        {
            "task_id": found.task_id,
            "attempt_id": found.attempt_id,
            "lease_token": found.lease_token,
            "path": found.relative,
            "size_bytes": found.size_bytes,
            "truncated_bytes": 0,
            "created_at": now,
            "ended_at": now,
        },
    )


def import_log_file(engine: Engine, found: LogFileFound, now: datetime) -> int | None:
    """Store the parts of the file of ``found`` that the store does not hold yet, as
    chunks, a few per transaction; the bytes stored (0: the store had them all), None if
    the store has no such task. A part the store holds is never written over: during a
    rollout one run's log may lie partly in an old executor's file (with a hole where
    the new one stored the rest) and partly in the store. Opening the file refuses a
    symbolic link put in its place meanwhile (OSError)."""
    with engine.begin() as conn:
        if not task_of(conn, found):
            return None
        index_run(conn, found, now)
        missing = uncovered(stored_ranges(conn, found), found.size_bytes)
    if not missing:
        return 0
    fd = os.open(found.path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        return sum(_import_range(engine, found, file, start, end) for start, end in missing)


def _import_range(engine: Engine, found: LogFileFound, file: BinaryIO, start: int, end: int) -> int:
    """Store bytes ``start`` to ``end`` of ``file``, :data:`CHUNKS_PER_TRANSACTION`
    chunks per transaction; the bytes stored."""
    file.seek(start)
    position = start
    while position < end:
        chunks = []
        for _ in range(CHUNKS_PER_TRANSACTION):
            data = file.read(min(IMPORT_CHUNK_BYTES, end - position))
            if not data:
                break
            chunks.append(LogChunk(found.task_id, found.lease_token, position, data))
            position += len(data)
        if not chunks:
            break
        with engine.begin() as conn:
            write_log_chunks(conn, chunks)
    return position - start
