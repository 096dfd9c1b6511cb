"""Specifications of how an agent's pool process sends task logs, against a real Redis.

Each test runs a task message in this process (as a Celery pool process would), stores the
log chunks that reached the event stream the way the executor does (:class:`LogDirectory`),
and reads the stored file, the result's log fields and the agent's spool.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.agent.config import AgentSettings
from services.agent.log_limits import LogLimits
from services.agent.log_stream import cut_marker
from services.agent.metrics import AgentMetrics
from services.agent.worker import AgentRuntime
from shared.dispatch.celery_app import RedisSettings
from shared.dispatch.celery_dispatch import LogDirectory
from shared.dispatch.events import EventReader, EventStream, decode
from shared.dispatch.messages import TaskFinished, TaskLogChunk, TaskMessage

KIB = 1024
MIB = 1024 * KIB
HEAD_BYTES = 64 * KIB
TAIL_BYTES = 32 * KIB


def settings_of(
    redis_url: str, redis_prefix: str, work_dir: Path, **values: object
) -> AgentSettings:
    return AgentSettings(
        redis=RedisSettings(redis_url, redis_prefix),
        queues=("default",),
        concurrency=1,
        grace_seconds=5,
        lease_ttl_seconds=5,
        heartbeat_seconds=1,
        work_dir=work_dir,
        **values,  # type: ignore[arg-type]
    )


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    return tmp_path / "agent"


@pytest.fixture
def plain_runtime(redis_url: str, redis_prefix: str, work_dir: Path) -> Iterator[AgentRuntime]:
    """A runtime with the default head and tail (32 MiB each)."""
    runtime = AgentRuntime(settings_of(redis_url, redis_prefix, work_dir), AgentMetrics())
    yield runtime
    runtime.close()


@pytest.fixture
def runtime(redis_url: str, redis_prefix: str, work_dir: Path) -> Iterator[AgentRuntime]:
    """A runtime keeping 64 KiB of head and 32 KiB of tail."""
    limits = LogLimits(head_bytes=HEAD_BYTES, tail_bytes=TAIL_BYTES)
    runtime = AgentRuntime(
        settings_of(redis_url, redis_prefix, work_dir, log_limits=limits), AgentMetrics()
    )
    yield runtime
    runtime.close()


@pytest.fixture
def reader(redis_url: str, redis_prefix: str) -> Iterator[EventReader]:
    client = RedisSettings(redis_url, redis_prefix).client()
    reader = EventReader(EventStream(client, redis_prefix), "test-executor")
    reader.ensure_group()
    yield reader
    client.close()


def run_sh(runtime: AgentRuntime, tmp_path: Path, command: str, task_id: int = 7) -> None:
    runtime.run(
        TaskMessage(
            task_id=task_id,
            attempt_id=3,
            lease_token=1,
            full_name="+wf+task",
            operator="sh",
            command=command,
            params={},
            project_dir=str(tmp_path),
            timeout_seconds=60,
        ).to_json()
    )


def store_events(reader: EventReader, root: Path) -> TaskFinished:
    """Store the log chunks the run sent, as the executor does; the run's result."""
    logs = LogDirectory(root)
    finished: list[TaskFinished] = []
    while entries := reader.read(0.01):
        reader.acknowledge([entry_id for entry_id, _ in entries])
        for _id, body in entries:
            event = decode(body)
            if isinstance(event, TaskLogChunk):
                logs.write(event)
            elif isinstance(event, TaskFinished):
                finished.append(event)
    (result,) = finished
    return result


def spooled_files(work_dir: Path) -> list[Path]:
    return [p for p in (work_dir / "logs").rglob("*") if p.is_file()]


def numbered_lines(count: int) -> bytes:
    """What ``seq -f %06g 1 COUNT`` writes: 7 bytes a line."""
    return b"".join(f"{n:06d}\n".encode() for n in range(1, count + 1))


class TestARunThatWritesNothing:
    def test_its_log_is_stored_as_an_empty_file(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path
    ) -> None:
        # When a task that writes nothing runs
        run_sh(plain_runtime, tmp_path, "true")
        # Then its log is stored, empty, where the result says
        result = store_events(reader, tmp_path / "logs")
        assert result.log_path is not None and result.log_size_bytes == 0
        assert (tmp_path / "logs" / result.log_path).read_bytes() == b""


class TestHeadAndTail:
    def test_a_log_longer_than_head_and_tail_keeps_both_with_a_line_for_the_cut(
        self, runtime: AgentRuntime, reader: EventReader, tmp_path: Path, work_dir: Path
    ) -> None:
        # Given a task writing 1 MiB and more of numbered lines (head 64 KiB, tail 32 KiB)
        written = numbered_lines(160_000)
        # When it runs
        run_sh(runtime, tmp_path, "seq -f %06g 1 160000")
        result = store_events(reader, tmp_path / "logs")
        # Then the stored log is its head, a line saying how much was cut, and its tail
        cut = len(written) - HEAD_BYTES - TAIL_BYTES
        head, tail = written[:HEAD_BYTES], written[-TAIL_BYTES:]
        marker = f"[tickwork: {cut:,} bytes cut here]\n".encode()
        assert result.log_path is not None
        stored = (tmp_path / "logs" / result.log_path).read_bytes()
        assert stored.startswith(head)
        assert stored.endswith(tail)
        assert marker in stored
        assert stored == head + cut_marker(cut, at_line_start=head.endswith(b"\n")) + tail
        # And the result says what the stored log holds and how much was cut
        assert (result.log_size_bytes, result.log_truncated_bytes) == (len(stored), cut)
        # And the agent kept nothing of it
        assert spooled_files(work_dir) == []

    def test_a_log_within_head_and_tail_is_stored_whole(
        self, runtime: AgentRuntime, reader: EventReader, tmp_path: Path, work_dir: Path
    ) -> None:
        written = numbered_lines(12_000)  # 84,000 bytes: more than the head, less than both
        run_sh(runtime, tmp_path, "seq -f %06g 1 12000")
        result = store_events(reader, tmp_path / "logs")
        assert result.log_path is not None
        assert (tmp_path / "logs" / result.log_path).read_bytes() == written
        assert (result.log_size_bytes, result.log_truncated_bytes) == (len(written), 0)
        assert spooled_files(work_dir) == []


class TestTheSpool:
    def test_spools_of_ended_pool_processes_are_removed_when_a_runtime_starts(
        self, redis_url: str, redis_prefix: str, work_dir: Path
    ) -> None:
        # Given the spool of a pool process that died mid-run, and one of a live process
        ended = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        dead = work_dir / "logs" / ended.stdout.strip() / "3" / "+wf+big.7.1.log"
        live = work_dir / "logs" / "1" / "3" / "+wf+other.8.1.log"
        for path in (dead, live):
            path.parent.mkdir(parents=True)
            path.write_bytes(b"x" * KIB)
        # When a pool process starts its runtime
        runtime = AgentRuntime(settings_of(redis_url, redis_prefix, work_dir), AgentMetrics())
        runtime.close()
        # Then the dead process's spool is gone, the live one's kept
        assert spooled_files(work_dir) == [live]


class TestMemory:
    def test_streaming_a_large_log_holds_a_bounded_part_of_it_in_memory(
        self, plain_runtime: AgentRuntime, tmp_path: Path
    ) -> None:
        # Given a runtime keeping whole logs of up to 64 MiB (the default head and tail)
        # When a task writes 16 MiB at once, faster than it is streamed
        tracemalloc.start()
        try:
            run_sh(plain_runtime, tmp_path, f"head -c {16 * MIB} /dev/zero | tr '\\0' x")
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # Then the process held a few chunks of it at a time, not copies of the whole log
        assert peak < 6 * MIB, f"peak of {peak / MIB:.1f} MiB while streaming 16 MiB"
