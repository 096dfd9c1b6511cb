"""Specifications of an agent's pool process (:class:`AgentRuntime`) against a real Redis.

Each test runs task messages in this process, as a Celery pool process would, and reads
what reached the event stream and the lease keys. The executor's side is the real
:class:`CeleryDispatcher` where a test needs it (kills, publishing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from tests.fault._cluster import is_running
from tests.support.waiting import wait_until
from tickwork.services.agent.config import AgentSettings
from tickwork.services.agent.metrics import AgentMetrics
from tickwork.services.agent.worker import SHUTDOWN, AgentRuntime
from tickwork.shared.dispatch.celery_app import RedisSettings
from tickwork.shared.dispatch.celery_dispatch import CeleryDispatcher
from tickwork.shared.dispatch.events import EventReader, EventStream, decode
from tickwork.shared.dispatch.leases import Lease, LeaseState, LeaseStore
from tickwork.shared.dispatch.messages import (
    AgentEvent,
    Outcome,
    TaskFinished,
    TaskLogChunk,
    TaskMessage,
    TaskReleased,
    TaskStarted,
)

TTL_SECONDS = 3.0
HEARTBEAT_SECONDS = 0.5


@pytest.fixture
def redis_settings(redis_url: str, redis_prefix: str) -> RedisSettings:
    return RedisSettings(redis_url, redis_prefix)


@pytest.fixture
def client(redis_settings: RedisSettings) -> Iterator[Redis]:
    client = redis_settings.client()
    yield client
    client.close()


@pytest.fixture
def runtime(redis_settings: RedisSettings, tmp_path: Path) -> Iterator[AgentRuntime]:
    settings = AgentSettings(
        redis=redis_settings,
        queues=("default",),
        concurrency=1,
        grace_seconds=5,
        lease_ttl_seconds=TTL_SECONDS,
        heartbeat_seconds=HEARTBEAT_SECONDS,
        work_dir=tmp_path / "agent",
    )
    runtime = AgentRuntime(settings, AgentMetrics())
    yield runtime
    runtime.close()


@pytest.fixture
def reader(client: Redis, redis_prefix: str) -> EventReader:
    reader = EventReader(EventStream(client, redis_prefix), "test-executor")
    reader.ensure_group()
    return reader


def message(
    tmp_path: Path, operator: str, command: str, task_id: int = 7, token: int = 1
) -> TaskMessage:
    return TaskMessage(
        task_id=task_id,
        attempt_id=3,
        lease_token=token,
        full_name="+wf+task",
        operator=operator,
        command=command,
        params={"greeting": "hello"},
        project_dir=str(tmp_path),
        timeout_seconds=60,
    )


def events(reader: EventReader) -> list[AgentEvent]:
    found = [decode(body) for _id, body in reader.read(0.01)]
    return [e for e in found if e is not None]


def start_sleeping(
    runtime: AgentRuntime, tmp_path: Path, seconds: int
) -> tuple[threading.Thread, int]:
    """Run task 7 (token 1), a ``sleep`` under a shell, in a thread; the thread and the
    sleep's pid once it runs."""
    body = message(tmp_path, "sh", f"sleep {seconds} & echo $! > pid; wait").to_json()
    thread = threading.Thread(target=runtime.run, args=(body,), daemon=True)
    thread.start()
    pid_file = tmp_path / "pid"
    wait_until("the task started", lambda: pid_file.exists() and pid_file.read_text().strip(), 10)
    return thread, int(pid_file.read_text())


class TestRunningAMessage:
    def test_a_run_reports_started_its_log_and_its_result_and_leaves_the_done_mark(
        self,
        runtime: AgentRuntime,
        reader: EventReader,
        client: Redis,
        redis_prefix: str,
        tmp_path: Path,
    ) -> None:
        body = message(tmp_path, "sh", "echo $greeting token $TICKWORK_LEASE_TOKEN").to_json()
        runtime.run(body)
        found = events(reader)
        assert [type(e) for e in found] == [TaskStarted, TaskLogChunk, TaskFinished]
        chunk, result = found[1], found[2]
        assert isinstance(chunk, TaskLogChunk) and chunk.data == "hello token 1\n"
        assert isinstance(result, TaskFinished) and result.outcome is Outcome.SUCCESS
        lease = LeaseStore(client, redis_prefix).holder(7)
        assert lease is not None and (lease.token, lease.owner) == (1, "done")

    def test_a_duplicate_of_a_finished_message_is_dropped(
        self, runtime: AgentRuntime, reader: EventReader, tmp_path: Path
    ) -> None:
        body = message(tmp_path, "echo", "once").to_json()
        runtime.run(body)
        assert [type(e) for e in events(reader)] == [TaskStarted, TaskLogChunk, TaskFinished]
        runtime.run(body)
        assert events(reader) == []

    def test_a_message_older_than_the_lease_is_dropped(
        self,
        runtime: AgentRuntime,
        reader: EventReader,
        client: Redis,
        redis_prefix: str,
        tmp_path: Path,
    ) -> None:
        LeaseStore(client, redis_prefix).take(Lease(7, 5, "other-agent"), 10_000)
        runtime.run(message(tmp_path, "echo", "late", token=4).to_json())
        assert events(reader) == []

    def test_a_malformed_message_is_dropped_without_running_anything(
        self, runtime: AgentRuntime, reader: EventReader
    ) -> None:
        runtime.run({"task_id": 1, "unexpected": True})
        runtime.run("not even a mapping")
        assert events(reader) == []

    def test_the_task_sees_its_identity_but_not_the_agents_settings(
        self,
        runtime: AgentRuntime,
        reader: EventReader,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setenv("TICKWORK_REDIS_URL", "redis://secret")
        command = "env | grep ^TICKWORK_ | grep -v ^TICKWORK_OUTPUT= | sort"
        runtime.run(message(tmp_path, "sh", command, task_id=9, token=2).to_json())
        (chunk,) = [e for e in events(reader) if isinstance(e, TaskLogChunk)]
        assert chunk.data.splitlines() == [
            "TICKWORK_ATTEMPT_ID=3",
            "TICKWORK_LEASE_TOKEN=2",
            "TICKWORK_TASK_ID=9",
        ]


class TestStopping:
    def test_losing_the_lease_stops_the_process_group_and_reports_nothing(
        self,
        runtime: AgentRuntime,
        reader: EventReader,
        client: Redis,
        redis_prefix: str,
        tmp_path: Path,
    ) -> None:
        thread, pid = start_sleeping(runtime, tmp_path, 60)
        # The executor requeued the task: a newer token takes the lease.
        assert LeaseStore(client, redis_prefix).take(Lease(7, 2, "another-agent"), 10_000)
        wait_until("the run stopped", lambda: not thread.is_alive(), 10)
        assert not is_running(pid)
        assert [type(e) for e in events(reader) if not isinstance(e, TaskLogChunk)] == [TaskStarted]

    def test_a_kill_stops_a_running_command_within_seconds(
        self,
        runtime: AgentRuntime,
        reader: EventReader,
        redis_settings: RedisSettings,
        tmp_path: Path,
    ) -> None:
        thread, pid = start_sleeping(runtime, tmp_path, 300)
        dispatcher = CeleryDispatcher(redis_settings, "test-executor")
        try:
            killed_at = time.monotonic()
            dispatcher.revoke([(7, 1)])
            wait_until("the command was killed", lambda: not is_running(pid), 5)
            assert time.monotonic() - killed_at < 3
        finally:
            dispatcher.close()
        wait_until("the run ended", lambda: not thread.is_alive(), 10)
        assert not any(isinstance(e, TaskFinished) for e in events(reader))

    def test_shutting_down_releases_the_lease_and_reports_the_task_released(
        self,
        runtime: AgentRuntime,
        reader: EventReader,
        client: Redis,
        redis_prefix: str,
        tmp_path: Path,
    ) -> None:
        thread, _pid = start_sleeping(runtime, tmp_path, 60)
        runtime.release_all()
        wait_until("the run ended", lambda: not thread.is_alive(), 10)
        released = [e for e in events(reader) if isinstance(e, TaskReleased)]
        assert [(e.task_id, e.lease_token, e.reason) for e in released] == [(7, 1, SHUTDOWN)]
        assert LeaseStore(client, redis_prefix).holder(7) is None


class TestTheEventStream:
    def test_unacknowledged_events_of_a_dead_executor_are_claimed_by_the_next(
        self, client: Redis, redis_prefix: str
    ) -> None:
        stream = EventStream(client, redis_prefix)
        first = EventReader(stream, "executor-1")
        first.ensure_group()
        stream.emit([TaskStarted(1, 1, 0.0), TaskStarted(2, 1, 0.0)])
        assert len(first.read(0.1)) == 2  # read, then the executor died before committing
        second = EventReader(stream, "executor-2")
        assert second.claim_orphans() == 2
        assert [decode(body) for _id, body in second.read(0.1)] == [
            TaskStarted(1, 1, 0.0),
            TaskStarted(2, 1, 0.0),
        ]

    def test_acknowledged_events_are_gone(
        self, reader: EventReader, client: Redis, redis_prefix: str
    ) -> None:
        EventStream(client, redis_prefix).emit([TaskStarted(1, 1, 0.0)])
        entries = reader.read(0.1)
        reader.acknowledge([entry_id for entry_id, _ in entries])
        assert reader.read(0.01) == []
        assert client.xlen(f"{redis_prefix}events") == 0

    def test_a_lost_stream_is_recreated_and_reading_goes_on(
        self, reader: EventReader, client: Redis, redis_prefix: str
    ) -> None:
        client.delete(f"{redis_prefix}events")  # Redis restarted empty
        assert reader.read(0.01) == []
        EventStream(client, redis_prefix).emit([TaskStarted(1, 1, 0.0)])
        assert [decode(body) for _id, body in reader.read(0.1)] == [TaskStarted(1, 1, 0.0)]


class TestExecutorSide:
    def test_publishing_sends_each_message_to_its_queue_and_marks_it_queued(
        self, redis_settings: RedisSettings, client: Redis, redis_prefix: str, tmp_path: Path
    ) -> None:
        dispatcher = CeleryDispatcher(redis_settings, "test-executor", settle_ms=0)
        try:
            plain = message(tmp_path, "echo", "a", task_id=1)
            routed = TaskMessage(**{**plain.to_json(), "task_id": 2, "queue": "gpu"})
            dispatcher.publish([plain, routed])
            assert dispatcher.queue_depths(["default", "gpu"]) == {"default": 1, "gpu": 1}
            dispatcher.poll_events(0)  # the next round trip, before the next pass's reaper
            states = dispatcher.lease_states([1, 2])
            assert states == {
                1: LeaseState(Lease(1, 1, "queued"), taken=0),
                2: LeaseState(Lease(2, 1, "queued"), taken=0),
            }
            # Kept for long: the message was sent.
            assert client.pttl(f"{redis_prefix}lease:1") > 3600 * 1000
        finally:
            dispatcher.close()

    def test_a_publisher_that_dies_before_sending_leaves_its_mark_unconfirmed(
        self, redis_settings: RedisSettings, tmp_path: Path
    ) -> None:
        dispatcher = CeleryDispatcher(redis_settings, "test-executor", settle_ms=0)
        died = RuntimeError("the executor died here")

        def die(*_args: object, **_kwargs: object) -> object:
            raise died

        try:
            dispatcher.app.amqp.send_task_message = die
            with pytest.raises(RuntimeError):
                dispatcher.publish([message(tmp_path, "echo", "a", task_id=1)])
            assert dispatcher.lease_states([1]) == {
                1: LeaseState(Lease(1, 1, "queued"), taken=0, unconfirmed=True)
            }
        finally:
            dispatcher.close()

    def test_a_mark_lost_while_publishing_stays_lost_so_the_message_is_sent_again(
        self, redis_settings: RedisSettings, client: Redis, redis_prefix: str, tmp_path: Path
    ) -> None:
        dispatcher = CeleryDispatcher(redis_settings, "test-executor", settle_ms=0)
        original_send = dispatcher.app.amqp.send_task_message

        def send_then_lose_redis(*args: object, **kwargs: object) -> object:
            result = original_send(*args, **kwargs)
            for key in client.scan_iter(f"{redis_prefix}*"):
                client.delete(key)  # Redis restarted empty right after this message
            return result

        try:
            dispatcher.app.amqp.send_task_message = send_then_lose_redis
            dispatcher.publish([message(tmp_path, "echo", "a", task_id=1)])
            assert dispatcher.lease_states([1]) == {1: LeaseState(None, taken=0)}
        finally:
            dispatcher.close()

    def test_an_agent_leaves_a_note_of_the_token_it_took_until_it_finishes(
        self, client: Redis, redis_prefix: str
    ) -> None:
        leases = LeaseStore(client, redis_prefix)
        lease = Lease(7, 3, "agent")
        assert leases.take(lease, 10_000)
        assert leases.states([7]) == {7: LeaseState(lease, taken=3)}
        assert leases.finish(lease, 10_000)
        assert leases.states([7]) == {7: LeaseState(Lease(7, 3, "done"), taken=0)}
