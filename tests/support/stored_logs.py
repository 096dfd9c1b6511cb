"""Reading task logs as a spec checks them: straight from a store the processes under
test wrote (the SQLite file of a state directory, or a cluster's PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select

from tickwork.shared.clock import utc_now
from tickwork.shared.store import logs as log_store
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.tables import task_log_chunks, task_logs


@dataclass(frozen=True)
class StoredRun:
    """One run's log as stored: its task, when it was dispatched, and its text."""

    attempt_id: int
    task: str
    dispatched_at: datetime
    text: str


def sqlite_url(state_dir: Path) -> str:
    """The store of ``tickwork run`` / ``standalone`` in ``state_dir``."""
    return f"sqlite:///{state_dir / 'tickwork.db'}"


def stored_runs(database_url: str, attempt_id: int | None = None) -> list[StoredRun]:
    """Every run's log of ``attempt_id`` (of every attempt if None), in dispatch order."""
    engine = create_store_engine(database_url)
    try:
        with engine.connect() as conn:
            if attempt_id is None:
                query = select(task_logs.c.attempt_id).distinct().order_by(task_logs.c.attempt_id)
                attempts = [int(a) for a in conn.execute(query).scalars()]
            else:
                attempts = [attempt_id]
            runs = []
            for attempt in attempts:
                for log in log_store.list_run_logs(conn, attempt):
                    data = log_store.read_log_bytes(conn, log, 0, log.size_bytes)
                    text = data.decode("utf-8", "replace")
                    runs.append(StoredRun(attempt, log.task_full_name, log.created_at, text))
            return runs
    finally:
        engine.dispose()


def prune_log_text(database_url: str, log_id: int) -> None:
    """Remove a run's log text as the log retention does (its row stays, marked)."""
    engine = create_store_engine(database_url)
    try:
        with engine.begin() as conn:
            row = conn.execute(select(task_logs).where(task_logs.c.id == log_id)).one()
            conn.execute(
                task_log_chunks.delete().where(
                    task_log_chunks.c.task_id == row.task_id,
                    task_log_chunks.c.lease_token == row.lease_token,
                )
            )
            conn.execute(
                task_logs.update().where(task_logs.c.id == log_id).values(pruned_at=utc_now())
            )
    finally:
        engine.dispose()
