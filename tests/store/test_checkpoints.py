"""Specifications of the log checkpointer (shared/store/checkpoints.py)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sqlalchemy import Engine

from tickwork.shared.store.checkpoints import LogCheckpointer
from tickwork.shared.store.engine import create_store_engine


def _rows_in_file(path: Path) -> int:
    """Rows of table ``t`` in the database file itself, the write-ahead log ignored."""
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        found = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 't'").fetchone()
        if not found[0]:
            return 0
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


def test_commits_reach_the_sqlite_file_without_a_writer_copying_the_log(
    tmp_path: Path,
) -> None:
    # Given a store whose writer never copies its write-ahead log into the file itself
    path = tmp_path / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute("PRAGMA wal_autocheckpoint=0")
        raw.execute("CREATE TABLE t (n INTEGER)")
        raw.execute("INSERT INTO t VALUES (1), (2), (3)")
        assert _rows_in_file(path) == 0
        # When a checkpointer runs beside it
        with LogCheckpointer(engine, every_seconds=0.01) as checkpointer:
            assert checkpointer.running
            deadline = time.monotonic() + 10
            while _rows_in_file(path) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            # Then what was committed is in the file, and a writer can go on meanwhile
            assert _rows_in_file(path) == 3
            raw.execute("INSERT INTO t VALUES (4)")
        assert not checkpointer.running
    engine.dispose()


def test_no_thread_is_started_where_the_database_checkpoints_itself(engine: Engine) -> None:
    with LogCheckpointer(engine) as checkpointer:
        assert checkpointer.running is (engine.dialect.name == "sqlite")
    assert not checkpointer.running
