"""Specifications of task logs in the store: chunks written idempotently by run and
offset, compressed where that pays, read whole, by range or by tail; and the one-time
import of an earlier release's log files (``tickwork db import-logs``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, func, select

from tests.api._seed import NOW, THREE_STEPS, add_project, add_sessions
from tickwork.services.compose.db import db_group
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store import logs as log_store
from tickwork.shared.store.log_import import find_log_files
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.tables import task_log_chunks, task_logs, tasks


@pytest.fixture
def task_ids(engine: Engine) -> list[int]:
    """Two tasks of attempt 1 (running)."""
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    add_sessions(engine, project_id, "steps", 1, state=AttemptState.RUNNING)
    ids = []
    with engine.begin() as conn:
        for name in ("+steps+first", "+steps+second"):
            row = {
                "attempt_id": 1,
                "parent_id": None,
                "full_name": name,
                "position": 0,
                "is_group": False,
                "is_generated": False,
                "state": "running",
                "config": {},
                "created_at": NOW,
                "updated_at": NOW,
            }
            ids.append(int(conn.execute(tasks.insert().returning(tasks.c.id), row).scalar_one()))
    return ids


def index(engine: Engine, task_id: int, token: int = 1, **values: object) -> None:
    """Index a run's log as the executor does when it dispatches the run."""
    row = {
        "task_id": task_id,
        "attempt_id": 1,
        "lease_token": token,
        "path": f"1/t.{task_id}.{token}.log",
        "size_bytes": 0,
        "created_at": NOW,
        **values,
    }
    with engine.begin() as conn:
        conn.execute(task_logs.insert(), row)


def write(engine: Engine, *chunks: LogChunk) -> None:
    with engine.begin() as conn:
        write_log_chunks(conn, list(chunks))


def read_all(engine: Engine, task_id: int) -> bytes:
    with engine.connect() as conn:
        (log,) = log_store.list_run_logs(conn, 1, task_id=task_id)
        return log_store.read_log_bytes(conn, log, 0, log.size_bytes)


class TestChunks:
    def test_a_large_text_chunk_is_stored_compressed_and_reads_back_whole(
        self, engine: Engine, task_ids: list[int]
    ) -> None:
        text = b"".join(b"row %d of the load went fine\n" % i for i in range(20_000))
        index(engine, task_ids[0])
        write(engine, LogChunk(task_ids[0], 1, 0, text))
        assert read_all(engine, task_ids[0]) == text
        with engine.connect() as conn:
            stored = conn.execute(select(func.sum(func.length(task_log_chunks.c.data)))).scalar()
        assert stored < len(text) / 3

    def test_a_chunk_longer_than_a_row_is_split_and_reads_back_whole(
        self, engine: Engine, task_ids: list[int], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(log_store, "MAX_CHUNK_BYTES", 7)
        index(engine, task_ids[0])
        write(engine, LogChunk(task_ids[0], 1, 0, b"0123456789abcdefghij"))
        with engine.connect() as conn:
            rows = conn.execute(select(func.count()).select_from(task_log_chunks)).scalar()
            (log,) = log_store.list_run_logs(conn, 1)
            assert log_store.read_log_bytes(conn, log, 5, 10) == b"56789abcde"
        assert rows == 3

    def test_chunks_of_a_task_that_is_gone_are_left_out_without_an_error(
        self, engine: Engine, task_ids: list[int]
    ) -> None:
        write(engine, LogChunk(999_999, 1, 0, b"late"), LogChunk(task_ids[0], 1, 0, b"kept"))
        with engine.connect() as conn:
            ids = conn.execute(select(task_log_chunks.c.task_id)).scalars().all()
        assert ids == [task_ids[0]]

    @pytest.mark.parametrize(
        ("task", "token", "offset"),
        [(0, 1, -1), (0, 1, log_store.MAX_LOG_BYTES), (2**70, 1, 0), (0, 2**64, 0), (0, -1, 0)],
        ids=["negative-offset", "past-the-cap", "huge-task-id", "huge-token", "negative-token"],
    )
    def test_a_chunk_before_the_start_past_the_cap_or_of_impossible_ids_is_refused(
        self, engine: Engine, task_ids: list[int], task: int, token: int, offset: int
    ) -> None:
        write(engine, LogChunk(task or task_ids[0], token, offset, b"x"))
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(task_log_chunks)).scalar() == 0

    def test_ranges_across_chunks_and_the_tail_read_only_what_they_need(
        self, engine: Engine, task_ids: list[int]
    ) -> None:
        index(engine, task_ids[0])
        write(
            engine,
            LogChunk(task_ids[0], 1, 0, b"aaaa"),
            LogChunk(task_ids[0], 1, 4, b"bbbb"),
            LogChunk(task_ids[0], 1, 8, b"cc\n"),
        )
        with engine.connect() as conn:
            (log,) = log_store.list_run_logs(conn, 1)
            assert log.size_bytes == 11
            assert log_store.read_log_bytes(conn, log, 2, 8) == b"aabbbbcc"
            assert log_store.read_log_bytes(conn, log, 11, 5) == b""
            assert log_store.read_log_tail(conn, log, 5) == (b"bbcc\n", 6)

    def test_an_ended_run_is_as_long_as_its_result_said_and_a_running_one_as_its_chunks(
        self, engine: Engine, task_ids: list[int]
    ) -> None:
        index(engine, task_ids[0], size_bytes=6, ended_at=NOW)
        index(engine, task_ids[1])
        write(engine, LogChunk(task_ids[0], 1, 0, b"abc"), LogChunk(task_ids[1], 1, 0, b"xy"))
        with engine.connect() as conn:
            ended, running = log_store.list_run_logs(conn, 1)
        assert (ended.size_bytes, ended.missing_bytes) == (6, 3)
        assert (running.size_bytes, running.missing_bytes, running.ended_at) == (2, 0, None)

    def test_deleting_a_task_removes_its_chunks(self, engine: Engine, task_ids: list[int]) -> None:
        write(engine, LogChunk(task_ids[1], 1, 0, b"gone"))
        with engine.begin() as conn:
            conn.execute(tasks.delete().where(tasks.c.id == task_ids[1]))
            assert conn.execute(select(func.count()).select_from(task_log_chunks)).scalar() == 0


def make_log_dir(root: Path, files: dict[str, bytes]) -> Path:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def import_logs(url: str, directory: Path) -> tuple[int, dict[str, int], str]:
    result = CliRunner().invoke(
        db_group, ["import-logs", "--database-url", url, str(directory)], catch_exceptions=False
    )
    report = json.loads(result.stdout.strip().splitlines()[-1]) if result.exit_code == 0 else {}
    return result.exit_code, report, result.stderr


class TestImportLogs:
    def test_old_log_files_move_into_the_store_once_and_read_the_same(
        self,
        engine: Engine,
        migrated_database_url: str,
        task_ids: list[int],
        tmp_path: Path,
    ) -> None:
        # Given the log directory of a release that kept files: one run already indexed
        # by its result, one never indexed, one of a task the store does not have
        big = os.urandom(600_000)
        index(engine, task_ids[0], size_bytes=len(big), truncated_bytes=7, ended_at=NOW)
        directory = make_log_dir(
            tmp_path / "logs",
            {
                f"1/first.{task_ids[0]}.1.log": big,
                f"1/second.{task_ids[1]}.2.log": b"hello\n",
                "1/ghost.424242.1.log": b"x",
                "1/notes.txt": b"not a log",
            },
        )
        # When they are imported
        code, report, _ = import_logs(migrated_database_url, directory)
        # Then each known run's log reads as its file did, its result's row unchanged
        assert code == 0
        assert report["imported"] == 2 and report["unknown_tasks"] == 1
        assert read_all(engine, task_ids[0]) == big
        with engine.connect() as conn:
            first, second = log_store.list_run_logs(conn, 1)
            assert log_store.read_log_bytes(conn, second, 0, 100) == b"hello\n"
        assert (first.truncated_bytes, second.path) == (7, f"1/second.{task_ids[1]}.2.log")
        # And a second import changes nothing
        code, again, _ = import_logs(migrated_database_url, directory)
        assert (code, again["imported"], again["already_in_store"]) == (0, 0, 2)

    def test_an_import_cut_short_goes_on_where_it_was(
        self,
        engine: Engine,
        migrated_database_url: str,
        task_ids: list[int],
        tmp_path: Path,
    ) -> None:
        # Given an import that stored the first chunk of a file, then died
        content = os.urandom(700_000)
        directory = make_log_dir(tmp_path / "logs", {f"1/a.{task_ids[0]}.1.log": content})
        index(engine, task_ids[0], size_bytes=len(content), ended_at=NOW)
        write(engine, LogChunk(task_ids[0], 1, 0, content[: 256 * 1024]))
        # When it runs again
        code, report, _ = import_logs(migrated_database_url, directory)
        # Then the log is whole, every byte once
        assert (code, report["imported"]) == (0, 1)
        assert read_all(engine, task_ids[0]) == content

    def test_a_link_out_of_the_directory_is_refused_and_never_read(
        self,
        engine: Engine,
        migrated_database_url: str,
        task_ids: list[int],
        tmp_path: Path,
    ) -> None:
        secret = tmp_path / "secret.txt"
        secret.write_bytes(b"root:x:0:0")
        directory = tmp_path / "logs"
        (directory / "1").mkdir(parents=True)
        (directory / "1" / f"a.{task_ids[0]}.1.log").symlink_to(secret)
        (directory / "2").symlink_to(tmp_path)
        code, report, stderr = import_logs(migrated_database_url, directory)
        assert (code, report["imported"], report["refused"]) == (0, 0, 2)
        assert "refused" in stderr
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(task_log_chunks)).scalar() == 0

    def test_files_are_found_in_attempt_order(self, tmp_path: Path) -> None:
        directory = make_log_dir(
            tmp_path, {"10/b.5.1.log": b"", "9/a.4.1.log": b"", "x/c.6.1.log": b""}
        )
        found = list(find_log_files(directory, []))
        assert [(f.attempt_id, f.task_id) for f in found] == [(9, 4), (10, 5)]

    def test_a_directory_that_does_not_exist_is_a_usage_error(
        self, migrated_database_url: str, tmp_path: Path
    ) -> None:
        code, _, stderr = import_logs(migrated_database_url, tmp_path / "nowhere")
        assert code == 2
        assert "DIR" in stderr


class TestImportBesideStoredChunks:
    def test_a_file_holding_the_start_of_a_run_the_store_holds_the_rest_of_fills_the_start(
        self,
        engine: Engine,
        migrated_database_url: str,
        task_ids: list[int],
        tmp_path: Path,
    ) -> None:
        # Given a run whose first 20 lines an old executor filed and whose next 60 a new
        # executor stored (more bytes in the store than in the file)
        lines = b"".join(b"line %03d\n" % n for n in range(80))
        head = len(b"".join(b"line %03d\n" % n for n in range(20)))
        index(engine, task_ids[0], size_bytes=len(lines), ended_at=NOW)
        write(engine, LogChunk(task_ids[0], 1, head, lines[head:]))
        directory = make_log_dir(tmp_path / "logs", {f"1/a.{task_ids[0]}.1.log": lines[:head]})
        # When the old files are imported
        code, report, _ = import_logs(migrated_database_url, directory)
        # Then the run reads whole
        assert (code, report["imported"]) == (0, 1)
        assert read_all(engine, task_ids[0]) == lines

    def test_a_hole_in_a_file_never_overwrites_what_the_store_holds(
        self,
        engine: Engine,
        migrated_database_url: str,
        task_ids: list[int],
        tmp_path: Path,
    ) -> None:
        # Given a run a new executor stored the start of, then an old one filed the rest
        # of at its offset (its file begins with a hole of NUL bytes)
        first, rest = b"first part\n", b"the rest of it\n"
        index(engine, task_ids[0], size_bytes=len(first + rest), ended_at=NOW)
        write(engine, LogChunk(task_ids[0], 1, 0, first))
        holed = bytes(len(first)) + rest
        directory = make_log_dir(tmp_path / "logs", {f"1/a.{task_ids[0]}.1.log": holed})
        # When the old files are imported
        code, _, _ = import_logs(migrated_database_url, directory)
        # Then the stored start stays, and the rest is filled in
        assert code == 0
        assert read_all(engine, task_ids[0]) == first + rest
