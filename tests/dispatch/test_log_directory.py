"""Specifications of the executor's log directory: chunks appended through files kept
open, closed when their run ends or when too many are open, never outside the root."""

from __future__ import annotations

import os
from pathlib import Path

from shared.dispatch.celery_dispatch import LogDirectory
from shared.dispatch.messages import TaskLogChunk


def chunk(path: str, offset: int, data: str) -> TaskLogChunk:
    return TaskLogChunk(task_id=1, lease_token=1, path=path, offset=offset, data=data)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class TestLogDirectory:
    def test_chunks_of_one_run_land_at_their_offsets_through_one_open_file(
        self, tmp_path: Path
    ) -> None:
        logs = LogDirectory(tmp_path)
        before = open_fds()
        logs.write(chunk("a/1.log", 0, "hello "))
        logs.write(chunk("a/1.log", 6, "world\n"))
        logs.write(chunk("a/1.log", 0, "hello "))  # sent again: changes nothing
        assert open_fds() == before + 1
        assert (tmp_path / "a/1.log").read_text() == "hello world\n"
        logs.close("a/1.log")
        assert open_fds() == before

    def test_the_least_recently_written_file_is_closed_past_the_limit(self, tmp_path: Path) -> None:
        logs = LogDirectory(tmp_path, open_files=2)
        before = open_fds()
        for name in ("1.log", "2.log", "3.log"):
            logs.write(chunk(name, 0, name))
        assert open_fds() == before + 2
        logs.write(chunk("1.log", 5, "+"))  # opened again where it was left
        assert (tmp_path / "1.log").read_text() == "1.log+"
        logs.close_all()
        assert open_fds() == before

    def test_a_chunk_outside_the_root_is_refused(self, tmp_path: Path) -> None:
        root = tmp_path / "logs"
        logs = LogDirectory(root)
        logs.write(chunk("../escaped.log", 0, "x"))
        logs.write(chunk("a.log", -1, "x"))
        assert not (tmp_path / "escaped.log").exists()
        assert not (root / "a.log").exists()
        logs.close_all()

    def test_a_symbolic_link_in_place_of_a_log_file_is_not_written_through(
        self, tmp_path: Path
    ) -> None:
        root, outside = tmp_path / "logs", tmp_path / "outside.log"
        (root / "a").mkdir(parents=True)
        (root / "a" / "1.log").symlink_to(outside)
        logs = LogDirectory(root)
        logs.write(chunk("a/1.log", 0, "x"))
        assert not outside.exists()
        logs.close_all()

    def test_a_directory_linked_outside_the_root_is_refused(self, tmp_path: Path) -> None:
        root, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
        root.mkdir()
        elsewhere.mkdir()
        (root / "a").symlink_to(elsewhere)
        logs = LogDirectory(root)
        logs.write(chunk("a/1.log", 0, "x"))
        assert list(elsewhere.iterdir()) == []
        logs.close_all()

    def test_the_runs_of_one_attempt_share_one_checked_directory(self, tmp_path: Path) -> None:
        logs = LogDirectory(tmp_path)
        for task_id in range(3):
            logs.write(chunk(f"7/t.{task_id}.1.log", 0, "x"))
        assert logs.known_directories() == 1
        assert sorted(p.name for p in (tmp_path / "7").iterdir()) == [
            "t.0.1.log",
            "t.1.1.log",
            "t.2.1.log",
        ]
        logs.close_all()


class TestPreparedLogFiles:
    def test_a_prepared_file_exists_empty_and_its_first_chunk_uses_the_open_file(
        self, tmp_path: Path
    ) -> None:
        logs = LogDirectory(tmp_path)
        before = open_fds()
        logs.prepare(["7/a.1.1.log", "7/b.2.1.log"])
        assert (tmp_path / "7/a.1.1.log").read_bytes() == b""
        assert open_fds() == before + 2
        logs.write(chunk("7/a.1.1.log", 0, "out\n"))
        assert open_fds() == before + 2
        assert (tmp_path / "7/a.1.1.log").read_text() == "out\n"
        logs.close_all()

    def test_preparing_keeps_no_more_files_open_than_the_limit(self, tmp_path: Path) -> None:
        logs = LogDirectory(tmp_path, open_files=2)
        before = open_fds()
        logs.prepare([f"{n}.log" for n in range(5)])
        assert open_fds() == before + 2
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"{n}.log" for n in range(5)]
        logs.close_all()

    def test_a_file_that_cannot_be_made_yet_is_left_for_its_first_chunk(
        self, tmp_path: Path
    ) -> None:
        (tmp_path / "blocked").write_text("a file where a directory should be")
        logs = LogDirectory(tmp_path)
        logs.prepare(["blocked/1.log", "../outside.log", "fine/2.log"])  # none raises
        assert not (tmp_path.parent / "outside.log").exists()
        assert (tmp_path / "fine/2.log").exists()
        logs.close_all()
