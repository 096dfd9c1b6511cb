"""Specification of an agent's result outbox against a real Redis: a finished run's result
is kept until its lease key says it is settled, and sent again when Redis lost it."""

from __future__ import annotations

import hashlib
import threading

import pytest
from redis import Redis
from redis.client import Pipeline

from tests.support.servers import find_free_port
from tests.support.waiting import wait_until
from tickwork.services.agent import outbox as outbox_module
from tickwork.services.agent.outbox import ResultOutbox
from tickwork.shared.dispatch.events import EventReader, EventStream, decode
from tickwork.shared.dispatch.leases import Lease, LeaseStore
from tickwork.shared.dispatch.messages import Outcome, TaskFinished, TaskLogChunk, TaskStarted

TTL_MS = 3000
DONE_MARK_MS = 60_000
FINISHED_AT = 1_700_000_000.0


@pytest.fixture
def stream(redis_client: Redis, redis_prefix: str) -> EventStream:
    return EventStream(redis_client, redis_prefix)


@pytest.fixture
def reader(stream: EventStream) -> EventReader:
    reader = EventReader(stream, "test-executor")
    reader.ensure_group()
    return reader


@pytest.fixture
def outbox(leases: LeaseStore, stream: EventStream) -> ResultOutbox:
    return ResultOutbox(leases, stream, DONE_MARK_MS)


def result(task_id: int = 7, token: int = 1) -> TaskFinished:
    return TaskFinished(task_id, token, Outcome.SUCCESS, FINISHED_AT, store={"n": 1})


def finished_run(leases: LeaseStore, task_id: int = 7, token: int = 1) -> Lease:
    lease = Lease(task_id, token, "agent-a/1")
    assert leases.take(lease, TTL_MS)
    return lease


def results_read(reader: EventReader) -> list[TaskFinished]:
    events = [decode(body) for _, body in reader.read(0)]
    return [e for e in events if isinstance(e, TaskFinished)]


class TestResultOutbox:
    def test_a_delivered_result_is_sent_with_its_done_mark_and_kept(
        self, outbox: ResultOutbox, leases: LeaseStore, reader: EventReader
    ) -> None:
        lease = finished_run(leases)
        assert outbox.deliver(lease, result())
        assert results_read(reader) == [result()]
        assert leases.holder(7) == Lease(7, 1, "done")
        assert outbox.held() == [(7, 1)]

    def test_a_result_goes_out_in_one_round_trip_without_asking_for_the_script(
        self,
        outbox: ResultOutbox,
        leases: LeaseStore,
        reader: EventReader,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        outbox.deliver(finished_run(leases, task_id=1), result(task_id=1))  # Redis has it now
        asked: list[object] = []
        monkeypatch.setattr(Pipeline, "load_scripts", lambda pipe: asked.append(pipe))
        assert outbox.deliver(finished_run(leases), result())
        assert asked == []
        assert results_read(reader)[-1] == result()
        assert leases.holder(7) == Lease(7, 1, "done")

    def test_a_result_is_delivered_with_its_done_mark_after_redis_lost_the_script(
        self, outbox: ResultOutbox, leases: LeaseStore, reader: EventReader
    ) -> None:
        lease = finished_run(leases)
        # As after a Redis restart: the script's digest is one Redis never saw (the
        # server's scripts are not flushed under the tests running beside)
        leases._finish.sha = hashlib.sha1(b"a script Redis lost").hexdigest()
        assert outbox.deliver(lease, result())
        assert results_read(reader) == [result()]
        assert leases.holder(7) == Lease(7, 1, "done")

    def test_an_executor_waiting_on_the_stream_reads_the_start_log_and_result_at_once(
        self, outbox: ResultOutbox, leases: LeaseStore, reader: EventReader, redis_client: Redis
    ) -> None:
        # Given an executor blocked reading the stream
        lease = finished_run(leases)
        read: list[list[object]] = []
        before = blocked_readers(redis_client)
        waiting = threading.Thread(
            target=lambda: read.append([decode(body) for _, body in reader.read(10)])
        )
        waiting.start()
        wait_until("the reader blocks", lambda: blocked_readers(redis_client) - before, 5)
        # When a short run's start, last log chunk and result are delivered
        started = TaskStarted(7, 1, FINISHED_AT - 1)
        chunk = TaskLogChunk(7, 1, "3/+wf+a.7.1.log", 0, "done\n")
        assert outbox.deliver(lease, result(), [started, chunk])
        waiting.join(timeout=10)
        # Then its one read got all three: one pass applies them
        assert read == [[started, chunk, result()]]

    def test_a_result_the_executor_marked_applied_is_forgotten(
        self, outbox: ResultOutbox, leases: LeaseStore
    ) -> None:
        outbox.deliver(finished_run(leases), result())
        leases.mark([(7, 1)], "applied", TTL_MS, replace=True)
        assert outbox.check() == 0
        assert outbox.held() == []

    def test_a_result_whose_task_has_a_newer_token_is_forgotten(
        self, outbox: ResultOutbox, leases: LeaseStore
    ) -> None:
        outbox.deliver(finished_run(leases), result())
        leases.mark([(7, 2)], "queued", TTL_MS)
        assert outbox.check() == 0
        assert outbox.held() == []

    def test_a_result_still_on_its_way_is_kept_and_not_sent_again(
        self, outbox: ResultOutbox, leases: LeaseStore, reader: EventReader
    ) -> None:
        outbox.deliver(finished_run(leases), result())
        results_read(reader)
        assert outbox.check() == 0
        assert outbox.held() == [(7, 1)]
        assert results_read(reader) == []

    def test_a_result_whose_done_mark_redis_lost_is_marked_again_and_sent_again(
        self, outbox: ResultOutbox, leases: LeaseStore, reader: EventReader, redis_client: Redis
    ) -> None:
        # Given a result delivered, and Redis restarted empty before the executor read it
        sent = result()
        outbox.deliver(finished_run(leases), sent)
        redis_client.delete(leases.key(7), reader.stream.key)
        reader.ensure_group()
        # When the outbox looks
        counted: list[int] = []
        outbox.on_resent = counted.append
        assert outbox.check() == 1
        assert counted == [1]
        # Then the done mark is back (the reaper leaves the task alone), and so is the result
        assert leases.holder(7) == Lease(7, 1, "done")
        assert results_read(reader) == [sent]
        assert outbox.held() == [(7, 1)]

    def test_the_outbox_looks_without_asking_for_the_script_and_after_redis_lost_it(
        self,
        outbox: ResultOutbox,
        leases: LeaseStore,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Given a result delivered and marked applied by the executor
        outbox.deliver(finished_run(leases), result())
        leases.mark([(7, 1)], "applied", TTL_MS, replace=True)
        asked: list[object] = []
        monkeypatch.setattr(Pipeline, "load_scripts", lambda pipe: asked.append(pipe))
        # And a digest Redis never saw, as after a restart
        leases._restore.sha = hashlib.sha1(b"a script Redis lost").hexdigest()
        # When the outbox looks, it learns the result was applied, and never asked first
        assert outbox.check() == 0
        assert outbox.held() == []
        assert asked == []

    def test_a_second_run_of_the_same_token_loses_its_lease_to_the_restored_mark(
        self, outbox: ResultOutbox, leases: LeaseStore, redis_client: Redis
    ) -> None:
        # Given Redis lost the first run's done mark, and its message, published again
        # under the same token, was taken by another agent
        outbox.deliver(finished_run(leases), result())
        redis_client.delete(leases.key(7))
        second = Lease(7, 1, "agent-b/2")
        assert leases.take(second, TTL_MS)
        # When the outbox puts the mark back, the second run cannot extend its lease
        assert outbox.check() == 1
        assert not leases.extend(second, TTL_MS)

    def test_a_result_unanswered_for_the_resend_time_is_sent_again(
        self,
        outbox: ResultOutbox,
        leases: LeaseStore,
        reader: EventReader,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        sent = result()
        outbox.deliver(finished_run(leases), sent)
        results_read(reader)
        monkeypatch.setattr(outbox_module, "RESEND_SECONDS", 0.0)
        assert outbox.check() == 1
        assert results_read(reader) == [sent]

    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_a_result_redis_cannot_take_waits_in_the_outbox(
        self, leases: LeaseStore, redis_prefix: str
    ) -> None:
        down = Redis(port=find_free_port(), socket_connect_timeout=1)
        unreachable = ResultOutbox(
            LeaseStore(down, redis_prefix), EventStream(down, redis_prefix), 1
        )
        assert not unreachable.deliver(Lease(7, 1, "agent-a/1"), result(), wait_seconds=0.2)
        assert unreachable.held() == [(7, 1)]
        down.close()

    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_the_last_log_chunks_of_a_result_redis_could_not_take_go_out_with_it_later(
        self,
        leases: LeaseStore,
        stream: EventStream,
        reader: EventReader,
        redis_prefix: str,
    ) -> None:
        # Given a result and its log's last chunk that Redis could not take
        down = Redis(port=find_free_port(), socket_connect_timeout=1)
        outbox = ResultOutbox(
            LeaseStore(down, redis_prefix), EventStream(down, redis_prefix), DONE_MARK_MS
        )
        chunk = TaskLogChunk(7, 1, "3/+wf+a.7.1.log", 0, "last words\n")
        assert not outbox.deliver(Lease(7, 1, "agent-a/1"), result(), [chunk], wait_seconds=0.2)
        down.close()
        # When Redis answers again and the outbox looks
        outbox.leases, outbox.stream = leases, stream
        assert outbox.check() == 1
        # Then the chunk goes out before the result, and only once
        assert [decode(body) for _, body in reader.read(0)] == [chunk, result()]
        assert outbox.check() == 0
        assert reader.read(0) == []


def blocked_readers(client: Redis) -> set[str]:
    """The ids of Redis clients blocked in XREADGROUP now."""
    return {
        str(c["id"]) for c in client.client_list() if c["cmd"] == "xreadgroup" and "b" in c["flags"]
    }
