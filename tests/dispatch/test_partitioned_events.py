"""Agents' events by partition: each executor reads the streams of the partitions it holds,
claims what a previous holder left, and moves old-format events to their partitions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from redis import Redis

from tickwork.shared.dispatch.celery_app import RedisSettings
from tickwork.shared.dispatch.celery_dispatch import CeleryDispatcher
from tickwork.shared.dispatch.events import EventStream, stream_key
from tickwork.shared.dispatch.messages import Outcome, TaskFinished, TaskStarted

ATTEMPT_OF_TASK = {7: 21, 8: 22}  # attempts 21 and 22: partitions 5 and 6 of 16


def attempts_of_tasks(task_ids: Sequence[int]) -> dict[int, int]:
    return {t: ATTEMPT_OF_TASK[t] for t in task_ids if t in ATTEMPT_OF_TASK}


@pytest.fixture
def dispatchers(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> Iterator[list[CeleryDispatcher]]:
    made = [
        CeleryDispatcher(
            RedisSettings(redis_url, redis_prefix),
            f"executor-{i}",
            attempts_of_tasks=attempts_of_tasks,
        )
        for i in range(2)
    ]
    yield made
    for dispatcher in made:
        dispatcher.close()


def finished(task_id: int) -> TaskFinished:
    return TaskFinished(task_id, 1, Outcome.SUCCESS, 1_700_000_000.0)


class TestStreamsByPartition:
    def test_an_executor_reads_only_the_partitions_it_holds(
        self, dispatchers: list[CeleryDispatcher], redis_client: Redis, redis_prefix: str
    ) -> None:
        first, second = dispatchers
        first.follow_partitions([5])
        second.follow_partitions([6])
        stream = EventStream(redis_client, redis_prefix)
        stream.of_partition(5).emit([finished(7)])
        stream.of_partition(6).emit([finished(8)])

        assert first.poll_events(0) == [finished(7)]
        assert second.poll_events(0) == [finished(8)]

    def test_a_partition_taken_over_brings_what_its_last_holder_left_unacknowledged(
        self, dispatchers: list[CeleryDispatcher], redis_client: Redis, redis_prefix: str
    ) -> None:
        # Given an executor that read an event of partition 5 and never committed it
        first, second = dispatchers
        first.follow_partitions([5])
        second.follow_partitions([6])
        EventStream(redis_client, redis_prefix, 5).emit([finished(7)])
        assert first.poll_events(0) == [finished(7)]
        # When another executor takes partition 5
        claimed = second.follow_partitions([5, 6])
        # Then it reads the event again
        assert claimed == 1
        assert second.poll_events(0) == [finished(7)]

    def test_the_holder_of_partition_0_moves_old_format_events_to_their_partitions(
        self, dispatchers: list[CeleryDispatcher], redis_client: Redis, redis_prefix: str
    ) -> None:
        # Given events an agent of an older release sent to the single stream
        first, second = dispatchers
        first.follow_partitions([0, 1, 2, 3, 4, 5])
        second.follow_partitions([6, 7])
        EventStream(redis_client, redis_prefix).emit([TaskStarted(8, 1, 0.0), finished(8)])
        # When the holder of partition 0 reads them, it applies none itself
        assert first.poll_events(0) == []
        # Then the holder of their partition reads them in order, and the old stream is empty
        assert second.poll_events(0) == [TaskStarted(8, 1, 0.0), finished(8)]
        assert redis_client.xlen(stream_key(redis_prefix, None)) == 0
