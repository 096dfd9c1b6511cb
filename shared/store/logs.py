"""Task logs in the store: the chunks agents stream, as the executor writes them, and
every read of a log (an attempt's runs, a run's text or a range of it, its tail).

This is the one module that reads logs: the REST routes, the web pages, the log
followers and ``tickwork run`` all go through it, so a log reads the same everywhere.

A run's log is a sequence of chunks keyed by (task id, lease token, byte offset): writing
a chunk twice changes nothing, a chunk sent again longer (an agent that resent what it
wrote meanwhile) replaces the shorter one, and a chunk that never came is a gap, read as
NUL bytes so that every later offset stays where it is (:attr:`RunLog.missing_bytes`
counts them). Chunks are zlib-compressed (level 1) where that pays: text logs shrink to
a fifth and decompress at hundreds of MB/s.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, exists, func, select
from sqlalchemy.sql import Insert

from tickwork.shared.errors import NotFound
from tickwork.shared.store.dialects import dialect_of, postgres_upsert
from tickwork.shared.store.engine import read_only
from tickwork.shared.store.tables import attempts, task_log_chunks, task_logs, tasks

LOG_CHANNEL = "tickwork_logs"
"""The PostgreSQL NOTIFY channel that tells log followers an attempt's logs grew (or the
attempt ended); the payload is the attempt id."""
MAX_CHUNK_BYTES = 1024 * 1024
"""The longest chunk row; a longer chunk is stored as several. A read looks no further
back than this for the chunk its first byte is in."""
MAX_LOG_BYTES = 16 * 1024**3
"""The furthest a stored log reaches: a chunk past it is refused (an agent's own cap,
``TICKWORK_AGENT_LOG_HEAD_BYTES`` + ``TICKWORK_AGENT_LOG_TAIL_BYTES``, is far below)."""
COMPRESS_MIN_BYTES = 256
"""Shorter chunks (most short tasks' only one) are stored as they are."""
COMPRESS_LEVEL = 1
READ_WINDOW_BYTES = 4 * 1024 * 1024
"""Bytes of a log one query of :func:`iter_log_bytes` reads: what a reader holds at once."""

_CHUNK_KEY = ("task_id", "lease_token", "byte_offset")
_CHUNK_DATA = ("size_bytes", "compressed", "data")
_CHUNK_NAMES = (*_CHUNK_KEY, *_CHUNK_DATA)
"""The columns of a chunk row, in the order :func:`chunk_rows` makes them."""


class LogPruned(NotFound):
    """Raised when a run's log is read after retention removed its text."""


@dataclass(frozen=True)
class LogChunk:
    """``data`` at byte ``byte_offset`` of the log of run ``lease_token`` of a task."""

    task_id: int
    lease_token: int
    byte_offset: int
    data: bytes


def chunk_rows(chunks: Sequence[LogChunk]) -> list[dict[str, Any]]:
    """The rows ``chunks`` are stored as: split at :data:`MAX_CHUNK_BYTES`, compressed
    where that pays, one per key (the longest, should a key come twice); empty chunks,
    chunks at a negative offset or past :data:`MAX_LOG_BYTES`, and chunks of ids no task
    can have, are left out."""
    rows: dict[tuple[int, int, int], dict[str, Any]] = {}
    for chunk in chunks:
        end = chunk.byte_offset + len(chunk.data)
        if chunk.byte_offset < 0 or end > MAX_LOG_BYTES or not _is_key(chunk):
            continue
        for start in range(chunk.byte_offset, end, MAX_CHUNK_BYTES):  # none if it is empty
            within = start - chunk.byte_offset
            piece = chunk.data[within : within + MAX_CHUNK_BYTES]
            key = (chunk.task_id, chunk.lease_token, start)
            known = rows.get(key)
            if known is None or known["size_bytes"] < len(piece):
                rows[key] = _row(key, piece)
    return list(rows.values())


def _is_key(chunk: LogChunk) -> bool:
    """Whether the chunk's task id and token fit the store's keys (a broken agent's that
    do not would fail the whole pass, again and again)."""
    return 0 < chunk.task_id < 2**63 and 0 <= chunk.lease_token < 2**63


def _row(key: tuple[int, int, int], data: bytes) -> dict[str, Any]:
    packed = zlib.compress(data, COMPRESS_LEVEL) if len(data) >= COMPRESS_MIN_BYTES else data
    compressed = len(packed) < len(data)
    values = (*key, len(data), compressed, packed if compressed else data)
    return dict(zip(_CHUNK_NAMES, values, strict=True))


def _task_exists(row: Any) -> Any:
    return exists().where(tasks.c.id == row.task_id)


def write_log_chunks(conn: Connection, chunks: Sequence[LogChunk]) -> int:
    """Store ``chunks`` in one statement (idempotent: see the module); chunks of tasks
    that no longer exist (a retry dropped them) are left out. How many rows were given."""
    rows = chunk_rows(chunks)
    write_chunk_rows(conn, rows)
    return len(rows)


def write_chunk_rows(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Store rows :func:`chunk_rows` made, in one statement (none for no rows)."""
    if rows:
        dialect_of(conn).upsert_rows(
            conn,
            task_log_chunks,
            rows,
            index_elements=_CHUNK_KEY,
            updated=_CHUNK_DATA,
            only_larger="size_bytes",
            only_if=_task_exists,
        )


def chunk_upsert_postgres() -> Insert:
    """On PostgreSQL, what :func:`write_chunk_rows` runs, for a statement that stores
    chunk rows as one of its parts, given :func:`chunk_values`: the executor's pass
    stores the chunks it read with the statement that queues the next runs, not in a
    round trip of their own."""
    return postgres_upsert(
        task_log_chunks,
        _CHUNK_NAMES,
        index_elements=_CHUNK_KEY,
        updated=_CHUNK_DATA,
        only_larger="size_bytes",
        only_if=_task_exists,
    )


def chunk_values(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The parameters of :func:`chunk_upsert_postgres` for ``rows`` (none writes none)."""
    return {f"a_{name}": [row[name] for row in rows] for name in _CHUNK_NAMES}


def notify_log_readers(conn: Connection, attempt_ids: Collection[int]) -> None:
    """Tell log followers, when this transaction commits, that these attempts' logs grew
    or that they ended (PostgreSQL; followers of SQLite poll)."""
    if attempt_ids:
        dialect_of(conn).notify(conn, LOG_CHANNEL, log_notices(attempt_ids))


def log_notices(attempt_ids: Iterable[int]) -> list[str]:
    """The payloads that tell followers of these attempts' logs: each id once, in order."""
    return [str(int(a)) for a in sorted(set(attempt_ids))]


# -- reads ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunLog:
    """The log of one run of a task (one lease token)."""

    id: int
    task_id: int
    task_full_name: str
    lease_token: int
    path: str
    """The run's log name (``<attempt id>/<task>.<task id>.<token>.log``)."""
    size_bytes: int
    """Its length: as the run's result recorded it, else as far as its chunks reach."""
    stored_bytes: int
    """How much of it is in the store; less than ``size_bytes`` where chunks are missing."""
    truncated_bytes: int
    """Cut from its middle by the agent (head and tail kept, the cut marked in the text)."""
    created_at: datetime
    ended_at: datetime | None
    pruned_at: datetime | None
    """When retention removed its text (its row stays)."""

    @property
    def missing_bytes(self) -> int:
        """Bytes that never reached the store (read as NUL bytes); 0 once pruned."""
        return 0 if self.pruned_at is not None else max(0, self.size_bytes - self.stored_bytes)


def _stored_of_attempt() -> Any:
    """Per run of the attempt ``:attempt_id``: bytes stored and how far its chunks reach."""
    chunk = task_log_chunks.c
    return (
        select(
            task_logs.c.id.label("log_id"),
            func.sum(chunk.size_bytes).label("stored"),
            func.max(chunk.byte_offset + chunk.size_bytes).label("reach"),
        )
        .join(
            task_log_chunks,
            and_(
                chunk.task_id == task_logs.c.task_id, chunk.lease_token == task_logs.c.lease_token
            ),
        )
        .group_by(task_logs.c.id)
    )


def _run_logs(conn: Connection, *conditions: Any) -> list[RunLog]:
    stored = _stored_of_attempt().where(*conditions).subquery()
    query = (
        select(
            task_logs,
            tasks.c.full_name,
            func.coalesce(stored.c.stored, 0).label("stored"),
            func.coalesce(stored.c.reach, 0).label("reach"),
        )
        .join(tasks, tasks.c.id == task_logs.c.task_id)
        .outerjoin(stored, stored.c.log_id == task_logs.c.id)
        .where(*conditions)
        .order_by(task_logs.c.id)
    )
    return [_run_log(row) for row in conn.execute(query)]


def _run_log(row: Any) -> RunLog:
    ended = row.ended_at is not None
    return RunLog(
        id=int(row.id),
        task_id=int(row.task_id),
        task_full_name=str(row.full_name),
        lease_token=int(row.lease_token),
        path=str(row.path),
        # A run going on (or one that never reported) is as long as its chunks reach.
        size_bytes=int(row.size_bytes) if ended else max(int(row.reach), int(row.size_bytes)),
        stored_bytes=int(row.stored),
        truncated_bytes=int(row.truncated_bytes),
        created_at=row.created_at,
        ended_at=row.ended_at,
        pruned_at=row.pruned_at,
    )


def list_run_logs(
    conn: Connection,
    attempt_id: int,
    *,
    task_prefix: str | None = None,
    task_id: int | None = None,
) -> list[RunLog]:
    """The logs of an attempt's runs in the order they were dispatched (each run's from
    the moment it was handed to an agent), optionally only those of tasks whose full
    name starts with ``task_prefix``, or of task ``task_id``. The attempt is not checked:
    an unknown one has none."""
    conditions = [task_logs.c.attempt_id == attempt_id]
    if task_id is not None:
        conditions.append(task_logs.c.task_id == task_id)
    logs = _run_logs(conn, *conditions)
    if task_prefix:
        logs = [log for log in logs if log.task_full_name.startswith(task_prefix)]
    return logs


def get_run_log(conn: Connection, attempt_id: int, log_id: int) -> RunLog:
    """One run's log of an attempt; raises NotFound naming the attempt when there is no
    such attempt, else the log when the attempt has no such log."""
    found = _run_logs(conn, task_logs.c.attempt_id == attempt_id, task_logs.c.id == log_id)
    if not found:
        known = conn.execute(select(attempts.c.id).where(attempts.c.id == attempt_id)).first()
        if known is None:
            raise NotFound(f"no attempt {attempt_id}")
        raise NotFound(f"attempt {attempt_id} has no log {log_id}")
    return found[0]


def check_readable(log: RunLog) -> None:
    """Raise LogPruned if retention removed the text of ``log``."""
    if log.pruned_at is not None:
        raise LogPruned(
            f"the log {log.id} of {log.task_full_name} (run {log.lease_token}) was removed "
            f"on {log.pruned_at:%Y-%m-%d} by the log retention (TICKWORK_LOG_RETENTION)"
        )


def read_log_bytes(conn: Connection, log: RunLog, start: int, length: int) -> bytes:
    """Bytes ``start`` to ``start + length`` of ``log`` (fewer past its end); a gap reads
    as NUL bytes. Raises LogPruned if its text was removed."""
    check_readable(log)
    end = min(start + max(length, 0), log.size_bytes)
    if start >= end:
        return b""
    chunk = task_log_chunks.c
    query = (
        select(chunk.byte_offset, chunk.size_bytes, chunk.compressed, chunk.data)
        .where(
            chunk.task_id == log.task_id,
            chunk.lease_token == log.lease_token,
            chunk.byte_offset < end,
            chunk.byte_offset > start - MAX_CHUNK_BYTES,
            chunk.byte_offset + chunk.size_bytes > start,
        )
        .order_by(chunk.byte_offset)
    )
    parts: list[bytes] = []
    position = start
    for row in conn.execute(query):
        offset = int(row.byte_offset)
        if offset + int(row.size_bytes) <= position:
            continue  # covered by a longer chunk before it
        if offset > position:
            parts.append(bytes(offset - position))  # a gap
            position = offset
        data = zlib.decompress(row.data) if row.compressed else bytes(row.data)
        taken = data[position - offset : end - offset]
        parts.append(taken)
        position += len(taken)
    if position < end:
        parts.append(bytes(end - position))
    return b"".join(parts)


def read_log_tail(conn: Connection, log: RunLog, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of ``log`` and where they start (0: the whole log)."""
    start = max(0, log.size_bytes - limit)
    return read_log_bytes(conn, log, start, log.size_bytes - start), start


def iter_log_bytes(engine: Engine, log: RunLog, start: int, length: int) -> Iterator[bytes]:
    """Bytes ``start`` to ``start + length`` of ``log``, :data:`READ_WINDOW_BYTES` at a
    time, each read in a short connection of its own: a response that streams a large
    log holds neither the whole of it nor a connection while its client reads."""
    position, end = start, min(start + length, log.size_bytes)
    while position < end:
        with read_only(engine) as conn:
            data = read_log_bytes(conn, log, position, min(READ_WINDOW_BYTES, end - position))
        if not data:
            return
        yield data
        position += len(data)
