"""Specification of a run's spool log: in memory until a child process needs a file or it
outgrows memory, read the same either way."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tickwork.services.agent.spool import SpoolLog


def read_all(spool: SpoolLog) -> bytes:
    with spool.open_bytes() as reader:
        return reader.read()


class TestSpoolLog:
    def test_a_log_stays_in_memory_while_only_the_agent_writes_it(self, tmp_path: Path) -> None:
        path = tmp_path / "pid" / "task.7.1.log"
        with SpoolLog(path) as spool:
            spool.write("héllo\n")
            spool.flush()
        assert not spool.on_disk and not path.parent.exists()
        assert (spool.size(), read_all(spool)) == (7, "héllo\n".encode())

    def test_a_child_process_writes_after_what_the_agent_wrote(self, tmp_path: Path) -> None:
        path = tmp_path / "pid" / "task.7.1.log"
        with SpoolLog(path) as spool:
            spool.write("before\n")
            subprocess.run(["echo", "child"], stdout=spool, check=True, timeout=30)
            spool.write("after\n")
            spool.flush()
        assert spool.on_disk
        assert path.read_bytes() == read_all(spool) == b"before\nchild\nafter\n"
        assert spool.size() == len(b"before\nchild\nafter\n")

    def test_a_log_that_outgrows_memory_goes_to_its_file_whole(self, tmp_path: Path) -> None:
        path = tmp_path / "task.7.1.log"
        with SpoolLog(path, memory_bytes=10) as spool:
            spool.write("12345")
            assert not spool.on_disk
            spool.write("678901\n")
            spool.flush()
            assert spool.on_disk
        assert read_all(spool) == path.read_bytes() == b"12345678901\n"
