"""Specification of the executor's side of result delivery against a real Redis: every
result of a committed pass is marked ``applied`` for the agent holding it, and right after
Redis lost its keys the reaper is told nothing about leases for a while."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.waiting import wait_until
from tickwork.shared.dispatch.archives import ARCHIVE_TTL_SECONDS, archive_key
from tickwork.shared.dispatch.celery_app import RedisSettings
from tickwork.shared.dispatch.celery_dispatch import (
    PENDING_MARK_TTL_MS,
    QUEUED_MARK_TTL_MS,
    CeleryDispatcher,
)
from tickwork.shared.dispatch.events import GROUP, EventStream, stream_key
from tickwork.shared.dispatch.keyspace import KeyspaceWatch
from tickwork.shared.dispatch.leases import QUEUED, Lease, LeaseStore
from tickwork.shared.dispatch.messages import (
    Outcome,
    TaskFinished,
    TaskLogChunk,
    TaskMessage,
    TaskStarted,
    run_log_path,
)

TTL_MS = 3000
SETTLE_MS = 300


@pytest.fixture
def dispatcher(redis_url: str, redis_prefix: str) -> Iterator[CeleryDispatcher]:
    dispatcher = CeleryDispatcher(RedisSettings(redis_url, redis_prefix), "executor")
    yield dispatcher
    dispatcher.close()


def finished(task_id: int, token: int) -> TaskFinished:
    return TaskFinished(task_id, token, Outcome.SUCCESS, 1_700_000_000.0)


def report_done(redis_client: Redis, prefix: str, task_id: int, token: int) -> LeaseStore:
    """An agent finished ``token`` of ``task_id``: its done mark and its result in Redis."""
    leases = LeaseStore(redis_client, prefix)
    lease = Lease(task_id, token, "agent-a/1")
    assert leases.take(lease, TTL_MS)
    assert leases.finish(lease, 60_000)
    EventStream(redis_client, prefix).emit(
        [TaskStarted(task_id, token, 0.0), finished(task_id, token)]
    )
    return leases


class TestAppliedMarks:
    def test_results_of_a_committed_pass_are_marked_applied_on_the_next_round_trip(
        self, dispatcher: CeleryDispatcher, redis_client: Redis, redis_prefix: str
    ) -> None:
        leases = report_done(redis_client, redis_prefix, 7, 1)
        assert len(dispatcher.poll_events(0)) == 2
        dispatcher.acknowledge()
        assert leases.holder(7) == Lease(7, 1, "done")  # no round trip of its own
        dispatcher.poll_events(0)
        assert leases.holder(7) == Lease(7, 1, "applied")

    def test_results_of_a_failed_pass_are_not_marked(
        self, dispatcher: CeleryDispatcher, redis_client: Redis, redis_prefix: str
    ) -> None:
        leases = report_done(redis_client, redis_prefix, 7, 1)
        dispatcher.poll_events(0)
        dispatcher.redeliver()
        dispatcher.poll_events(0)
        assert leases.holder(7) == Lease(7, 1, "done")

    def test_an_applied_mark_never_replaces_a_newer_token(
        self, dispatcher: CeleryDispatcher, redis_client: Redis, redis_prefix: str
    ) -> None:
        # Given the pass that applied token 1 also queued the task again under token 2
        leases = report_done(redis_client, redis_prefix, 7, 1)
        dispatcher.poll_events(0)
        dispatcher.acknowledge()
        leases.mark([(7, 2)], "queued", TTL_MS)
        dispatcher.poll_events(0)
        assert leases.holder(7) == Lease(7, 2, "queued")

    def test_a_message_of_an_applied_token_is_refused(
        self, dispatcher: CeleryDispatcher, redis_client: Redis, redis_prefix: str
    ) -> None:
        leases = report_done(redis_client, redis_prefix, 7, 1)
        dispatcher.poll_events(0)
        dispatcher.acknowledge()
        dispatcher.poll_events(0)
        assert not leases.take(Lease(7, 1, "agent-b/2"), TTL_MS)


def message(task_id: int, token: int, queue: str) -> TaskMessage:
    return TaskMessage(task_id, 1, token, f"+wf+t{task_id}", "echo", "x", {}, ".", queue=queue)


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the pipelines sent to Redis (each one round trip) from now on."""
    sent: list[int] = []
    execute = Pipeline.execute

    def counted(pipe: Pipeline, raise_on_error: bool = True) -> list[Any]:
        sent.append(len(pipe.command_stack))
        return execute(pipe, raise_on_error)

    monkeypatch.setattr(Pipeline, "execute", counted)
    return sent


class TestRoundTrips:
    def test_a_poll_sends_the_due_marks_with_its_read(
        self,
        dispatcher: CeleryDispatcher,
        redis_client: Redis,
        redis_prefix: str,
        round_trips: list[int],
    ) -> None:
        leases = report_done(redis_client, redis_prefix, 7, 1)
        dispatcher.poll_events(0)
        dispatcher.acknowledge()
        round_trips.clear()
        dispatcher.poll_events(0)
        assert len(round_trips) == 1
        assert leases.holder(7) == Lease(7, 1, "applied")

    def test_a_read_that_fails_keeps_the_acknowledgements_and_marks_due_for_the_next(
        self,
        dispatcher: CeleryDispatcher,
        redis_client: Redis,
        redis_prefix: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        leases = report_done(redis_client, redis_prefix, 7, 1)
        dispatcher.poll_events(0)
        dispatcher.acknowledge()
        with monkeypatch.context() as failing:

            def lost(_pipe: Pipeline, raise_on_error: bool = True) -> list[Any]:
                raise RedisConnectionError("Redis went away")

            failing.setattr(Pipeline, "execute", lost)
            with pytest.raises(RedisConnectionError):
                dispatcher.poll_events(0)
        dispatcher.poll_events(0)
        assert leases.holder(7) == Lease(7, 1, "applied")
        pending = redis_client.xpending(stream_key(redis_prefix, None), GROUP)
        assert pending["pending"] == 0  # both events acknowledged

    def test_queued_marks_are_kept_long_with_the_next_poll_not_before_a_publish(
        self,
        dispatcher: CeleryDispatcher,
        redis_client: Redis,
        redis_prefix: str,
        round_trips: list[int],
    ) -> None:
        queue = f"{redis_prefix}q"
        dispatcher.publish([message(7, 1, queue), message(8, 1, queue)])
        round_trips.clear()
        dispatcher.publish([message(9, 1, queue)])
        # 9's mark alone, then 9's message: 7's and 8's confirmations would delay it
        assert round_trips == [1, 1]
        leases = LeaseStore(redis_client, redis_prefix)
        for task_id in (7, 9):
            assert 0 < (leases.remaining_ms(task_id) or 0) <= PENDING_MARK_TTL_MS
        dispatcher.poll_events(0)
        for task_id in (7, 8, 9):
            assert (leases.remaining_ms(task_id) or 0) > PENDING_MARK_TTL_MS
        redis_client.delete(f"{redis_prefix}q")

    def test_a_publish_refreshes_its_archives_with_its_marks_and_puts_a_lost_one_back_first(
        self,
        redis_url: str,
        redis_client: Redis,
        redis_prefix: str,
        tmp_path: Path,
        round_trips: list[int],
    ) -> None:
        reads: list[str] = []

        def source(digest: str) -> bytes:
            reads.append(digest)
            return b"archive bytes"

        settings = RedisSettings(redis_url, redis_prefix)
        dispatcher = CeleryDispatcher(settings, "executor", archive_source=source)
        try:
            queue = f"{redis_prefix}q"
            shipped = dataclasses.replace(message(9, 1, queue), archive_digest="d1")
            dispatcher.publish([shipped])  # Redis has no such archive yet
            assert reads == ["d1"]
            assert redis_client.get(archive_key(redis_prefix, "d1")) == b"archive bytes"
            redis_client.expire(archive_key(redis_prefix, "d1"), 10)
            round_trips.clear()
            dispatcher.publish([dataclasses.replace(shipped, task_id=10)])
            # the archive's refresh and 10's mark in one round trip; 10's message
            assert round_trips == [2, 1]
            assert reads == ["d1"]
            assert redis_client.ttl(archive_key(redis_prefix, "d1")) > ARCHIVE_TTL_SECONDS - 60
            redis_client.delete(queue)
        finally:
            dispatcher.close()


class TestLogChunks:
    def test_log_chunks_go_to_the_loop_with_the_result_they_came_with(
        self, dispatcher: CeleryDispatcher, redis_client: Redis, redis_prefix: str
    ) -> None:
        # Given a short task's only chunk sent with its result, as an agent sends them
        path = run_log_path(message(9, 3, "any"))
        chunk = TaskLogChunk(9, 3, path, 0, "hello\n")
        EventStream(redis_client, redis_prefix).emit([chunk, finished(9, 3)])
        # When the executor polls
        events = dispatcher.poll_events(1.0)
        # Then both reach the loop, in order, for one pass to store and apply
        assert events == [chunk, finished(9, 3)]


class TestKeyspaceSettling:
    def test_a_new_or_emptied_keyspace_settles_before_a_missing_lease_counts(
        self, redis_client: Redis, redis_prefix: str
    ) -> None:
        watch = KeyspaceWatch(redis_client, redis_prefix, SETTLE_MS)
        assert 0 < watch.settling_ms() <= SETTLE_MS
        wait_until("the keyspace settles", lambda: watch.settling_ms() == 0, 5)
        # When Redis loses every key, the wait starts again
        redis_client.delete(watch.marker_key)
        assert 0 < watch.settling_ms() <= SETTLE_MS

    def test_executors_that_overlap_share_one_settling_time(
        self, redis_client: Redis, redis_prefix: str
    ) -> None:
        first = KeyspaceWatch(redis_client, redis_prefix, SETTLE_MS)
        first.settling_ms()
        time.sleep(SETTLE_MS / 2000)
        assert KeyspaceWatch(redis_client, redis_prefix, SETTLE_MS).settling_ms() < SETTLE_MS * 0.75

    def test_the_reaper_learns_nothing_of_leases_while_the_keyspace_settles(
        self, dispatcher: CeleryDispatcher
    ) -> None:
        assert dispatcher.lease_states([7]) is None
        dispatcher.keyspace.settle_ms = SETTLE_MS
        dispatcher.client.delete(dispatcher.keyspace.settling_key)
        states = dispatcher.lease_states([7])
        assert states is not None and states[7].current is None


class TestAfterARedisFailure:
    def test_a_queued_mark_confirmed_before_a_redis_failure_no_longer_vouches_for_its_message(
        self, dispatcher: CeleryDispatcher, redis_client: Redis, redis_prefix: str
    ) -> None:
        # A failover may lose a message whose queued mark the replica has: after a Redis
        # failure, marks from before it read as unconfirmed, and the reaper sends again.
        leases = LeaseStore(redis_client, redis_prefix)
        assert dispatcher.lease_states([7]) is None  # a new keyspace settles first
        dispatcher.keyspace.settle_ms = SETTLE_MS
        dispatcher.client.delete(dispatcher.keyspace.settling_key)
        leases.mark([(7, 1)], QUEUED, QUEUED_MARK_TTL_MS)
        states = dispatcher.lease_states([7])
        assert states is not None and not states[7].unconfirmed
        time.sleep(0.05)
        dispatcher.note_interruption()
        time.sleep(0.05)
        leases.mark([(8, 1)], QUEUED, QUEUED_MARK_TTL_MS)  # sent after the failure
        states = dispatcher.lease_states([7, 8])
        assert states is not None
        assert (states[7].unconfirmed, states[8].unconfirmed) == (True, False)
