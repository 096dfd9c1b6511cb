"""Specifications of how an agent's pool process sends task logs, against a real Redis.

Each test runs a task message in this process (as a Celery pool process would), stores the
log chunks that reached the event stream at their offsets, as the executor stores them,
and reads the stored file, the result's log fields and the agent's spool.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.waiting import wait_until
from tickwork.services.agent import log_stream
from tickwork.services.agent.config import AgentSettings
from tickwork.services.agent.log_limits import LogLimits
from tickwork.services.agent.log_stream import LogPump, LogStreamer, cut_marker
from tickwork.services.agent.metrics import AgentMetrics
from tickwork.services.agent.spool import MEMORY_BYTES
from tickwork.services.agent.worker import AgentRuntime
from tickwork.shared.dispatch.celery_app import RedisSettings
from tickwork.shared.dispatch.events import EventReader, EventStream, decode
from tickwork.shared.dispatch.messages import TaskFinished, TaskLogChunk, TaskMessage, TaskStarted
from tickwork.shared.secrets import SECRET_KEY_VARIABLE, SecretBox

KIB = 1024
MIB = 1024 * KIB
HEAD_BYTES = 64 * KIB
TAIL_BYTES = 32 * KIB
SECRET_KEY = "a passphrase long enough for tests"


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


def run_sh(
    runtime: AgentRuntime, tmp_path: Path, command: str, task_id: int = 7, operator: str = "sh"
) -> None:
    runtime.run(
        TaskMessage(
            task_id=task_id,
            attempt_id=3,
            lease_token=1,
            full_name="+wf+task",
            operator=operator,
            command=command,
            params={},
            project_dir=str(tmp_path),
            timeout_seconds=60,
        ).to_json()
    )


def run_echo(runtime: AgentRuntime, tmp_path: Path, text: str, task_id: int) -> None:
    run_sh(runtime, tmp_path, text, task_id, operator="echo")


class LogDirectory:
    """Chunks written at their offsets into files under ``root``, named by their path:
    the agent's side of what the executor stores (a chunk twice writes the same bytes)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, chunk: TaskLogChunk) -> None:
        path = self.root / chunk.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.exists() else "w+b") as file:
            file.seek(chunk.offset)
            file.write(chunk.data.encode("utf-8", "surrogateescape"))


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


def stored_logs(reader: EventReader, root: Path) -> dict[int, bytes]:
    """Store the log chunks the runs sent, as the executor does; each run's stored log."""
    logs = LogDirectory(root)
    stored: dict[int, bytes] = {}
    while entries := reader.read(0.01):
        reader.acknowledge([entry_id for entry_id, _ in entries])
        for _id, body in entries:
            event = decode(body)
            if isinstance(event, TaskLogChunk):
                logs.write(event)
            elif isinstance(event, TaskFinished):
                assert event.log_path is not None
                stored[event.task_id] = (root / event.log_path).read_bytes()
    return stored


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
    def test_a_log_only_the_agent_writes_never_touches_the_disk(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path, work_dir: Path
    ) -> None:
        # When tasks that the agent itself logs for run
        run_echo(plain_runtime, tmp_path, "first", task_id=1)
        run_echo(plain_runtime, tmp_path, "second", task_id=2)
        # Then not even the spool's folder was made
        assert not (work_dir / "logs" / str(os.getpid())).exists()
        # And each stored log is its own
        assert stored_logs(reader, tmp_path / "logs") == {1: b"first\n", 2: b"second\n"}

    def test_a_log_that_outgrows_memory_is_spooled_to_a_file_and_stored_whole(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path, work_dir: Path
    ) -> None:
        text = "".join(f"{n:07d}\n" for n in range(2 * MEMORY_BYTES // 8))
        run_echo(plain_runtime, tmp_path, text.rstrip("\n"), task_id=1)
        assert stored_logs(reader, tmp_path / "logs") == {1: text.encode()}
        assert spooled_files(work_dir) == []

    def test_a_masked_command_output_is_spooled_in_memory_and_reported_masked(
        self,
        plain_runtime: AgentRuntime,
        reader: EventReader,
        tmp_path: Path,
        work_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Given a shell task with a secret in its env (its output is masked by the agent)
        monkeypatch.setenv(SECRET_KEY_VARIABLE, SECRET_KEY)
        marker = "~secret-test~"
        task = TaskMessage(
            task_id=7,
            attempt_id=3,
            lease_token=1,
            full_name="+wf+task",
            operator="sh",
            command='echo "token is $TOKEN"',
            params={},
            project_dir=str(tmp_path),
            env={"TOKEN": f"{marker}token{marker}"},
            secrets={"token": SecretBox(SECRET_KEY).encrypt("hunter2-clear")},
            secret_marker=marker,
            timeout_seconds=60,
        )
        # When it runs
        plain_runtime.run(task.to_json())
        # Then its log and the result's head of it hold the masked line
        found = [decode(body) for _id, body in reader.read(0.01)]
        (result,) = [e for e in found if isinstance(e, TaskFinished)]
        assert result.output_lines == ["token is ***"]
        chunks = [e.data for e in found if isinstance(e, TaskLogChunk)]
        assert "".join(chunks) == "token is ***\n"
        # And only the agent wrote the spool: it stayed in memory
        assert not (work_dir / "logs" / str(os.getpid())).exists()

    def test_the_spool_file_a_child_process_wrote_is_removed(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path, work_dir: Path
    ) -> None:
        run_sh(plain_runtime, tmp_path, "echo from a child", task_id=1)
        assert (work_dir / "logs" / str(os.getpid())).is_dir()
        assert spooled_files(work_dir) == []
        assert stored_logs(reader, tmp_path / "logs") == {1: b"from a child\n"}

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


class TestStreamingWhileARunGoesOn:
    def test_a_long_run_reports_started_and_its_first_lines_before_it_ends(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path
    ) -> None:
        # Given a task that writes a line, then waits to be let go
        command = "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"
        run = threading.Thread(target=run_sh, args=(plain_runtime, tmp_path, command))
        run.start()
        try:
            # Then its start and its first line reach the stream while it still runs
            seen = read_until_first_chunk(reader, 7)
            assert isinstance(seen[0], TaskStarted)
            chunk = seen[-1]
            assert isinstance(chunk, TaskLogChunk)
            assert (chunk.offset, chunk.data) == (0, "first\n")
            assert run.is_alive()
            LogDirectory(tmp_path / "logs").write(chunk)  # stored, as the executor would
        finally:
            (tmp_path / "go").touch()
            run.join(timeout=30)
        # And the rest follows with the result
        result = store_events(reader, tmp_path / "logs")
        assert result.log_path is not None
        assert (tmp_path / "logs" / result.log_path).read_bytes() == b"first\nsecond\n"

    def test_runs_going_on_at_once_each_stream_while_they_run(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path
    ) -> None:
        # Given two tasks of one pool process running at once, each waiting to be let go
        runs = [
            threading.Thread(
                target=run_sh,
                args=(
                    plain_runtime,
                    tmp_path,
                    f"echo {n}; while [ ! -e go ]; do sleep 0.05; done",
                    n,
                ),
            )
            for n in (7, 8)
        ]
        for run in runs:
            run.start()
        try:
            # Then the first line of each reaches the stream before either ends
            chunks: dict[int, str] = {}
            deadline = time.monotonic() + 10
            while len(chunks) < 2:
                assert time.monotonic() < deadline, f"only {chunks} streamed"
                for _id, body in reader.read(0.1):
                    event = decode(body)
                    if isinstance(event, TaskLogChunk):
                        chunks[event.task_id] = event.data
            assert chunks == {7: "7\n", 8: "8\n"}
            assert all(run.is_alive() for run in runs)
        finally:
            (tmp_path / "go").touch()
            for run in runs:
                run.join(timeout=30)

    def test_runs_share_one_streaming_thread_and_start_none_of_their_own(
        self, plain_runtime: AgentRuntime, reader: EventReader, tmp_path: Path
    ) -> None:
        # Given a pool process that has run a task (its streaming thread is up)
        run_echo(plain_runtime, tmp_path, "warm", task_id=1)
        started: list[threading.Thread] = []
        real_start = threading.Thread.start

        def counting_start(thread: threading.Thread) -> None:
            started.append(thread)
            real_start(thread)

        # When more tasks run, short ones and one that lasts past the started hold
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(threading.Thread, "start", counting_start)
            for task_id in range(2, 12):
                run_echo(plain_runtime, tmp_path, f"task {task_id}", task_id)
            run_sh(plain_runtime, tmp_path, "sleep 0.3; echo done", task_id=12)
        # Then no thread was started for them (a stop or a masked output would show here)
        assert [t.name for t in started] == []

    def test_a_run_that_ends_before_its_turn_costs_the_streaming_thread_no_turn(
        self, plain_runtime: AgentRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given the streamers' turns are counted
        turns: list[int] = []
        real_beat = LogStreamer.beat

        def counted(streamer: LogStreamer) -> float | None:
            turns.append(streamer.message.task_id)
            return real_beat(streamer)

        monkeypatch.setattr(LogStreamer, "beat", counted)
        # When short tasks run one after another
        for task_id in range(1, 6):
            run_echo(plain_runtime, tmp_path, "x", task_id)
        time.sleep(2 * log_stream.STARTED_HOLD_SECONDS)
        # Then none of them got a turn: their start went out with their result
        assert turns == []


class TestThePump:
    def test_a_turn_due_before_the_one_the_pump_waits_for_is_taken_on_time(self) -> None:
        # Given a pump waiting for a turn a minute away
        pump = LogPump()
        called: list[str] = []
        late, soon = TurnCounter("late", called), TurnCounter("soon", called)
        try:
            pump.add(late, 60)  # type: ignore[arg-type]
            time.sleep(0.05)
            # When a streamer due at once is added
            pump.add(soon, 0)  # type: ignore[arg-type]
            # Then its turn comes without waiting for the later one
            wait_until("the sooner turn was taken", lambda: called == ["soon"], 2)
        finally:
            pump.close()

    def test_a_streamer_removed_before_its_turn_gets_none(self) -> None:
        pump = LogPump()
        called: list[str] = []
        gone = TurnCounter("gone", called)
        try:
            pump.add(gone, 0.05)  # type: ignore[arg-type]
            pump.remove(gone)  # type: ignore[arg-type]
            time.sleep(0.2)
            assert called == []
        finally:
            pump.close()


class TurnCounter:
    """Stands for a streamer: notes each turn it gets, wants no other."""

    def __init__(self, name: str, called: list[str]) -> None:
        self.name, self.called, self.ended = name, called, False

    def beat(self) -> float | None:
        self.called.append(self.name)
        return None


def read_until_first_chunk(reader: EventReader, task_id: int) -> list[object]:
    """The events read until the first log chunk of ``task_id`` (within 10 s)."""
    seen: list[object] = []
    deadline = time.monotonic() + 10
    while True:
        assert time.monotonic() < deadline, f"no log chunk streamed; saw {seen}"
        for _id, body in reader.read(0.1):
            event = decode(body)
            seen.append(event)
            if isinstance(event, TaskLogChunk) and event.task_id == task_id:
                return seen


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
