"""Specification of task leases in Redis: fencing by token, owners, expiry, heartbeats."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid

import pytest
from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script

from tests.support.waiting import wait_until
from tickwork.shared.dispatch.leases import QUEUED, Heartbeat, Lease, LeaseStore

TTL_MS = 3000


class TestTake:
    def test_a_free_task_is_taken_with_its_token_and_owner(self, leases: LeaseStore) -> None:
        assert leases.take(Lease(7, 1, "agent-a"), TTL_MS)
        assert leases.holder(7) == Lease(7, 1, "agent-a")
        remaining = leases.remaining_ms(7)
        assert remaining is not None and 0 < remaining <= TTL_MS

    def test_a_duplicate_message_for_a_held_lease_is_refused(self, leases: LeaseStore) -> None:
        assert leases.take(Lease(7, 1, "agent-a"), TTL_MS)
        assert not leases.take(Lease(7, 1, "agent-b"), TTL_MS)
        assert leases.holder(7) == Lease(7, 1, "agent-a")

    def test_an_older_token_than_the_lease_is_refused(self, leases: LeaseStore) -> None:
        assert leases.take(Lease(7, 5, "agent-a"), TTL_MS)
        assert not leases.take(Lease(7, 4, "agent-b"), TTL_MS)
        assert not leases.take(Lease(7, 4, "agent-a"), TTL_MS)

    def test_a_newer_token_takes_the_task_over(self, leases: LeaseStore) -> None:
        assert leases.take(Lease(7, 1, "agent-a"), TTL_MS)
        assert leases.take(Lease(7, 2, "agent-b"), TTL_MS)
        assert leases.holder(7) == Lease(7, 2, "agent-b")
        assert not leases.extend(Lease(7, 1, "agent-a"), TTL_MS)

    def test_taking_ones_own_lease_again_renews_it(self, leases: LeaseStore) -> None:
        lease = Lease(7, 1, "agent-a")
        assert leases.take(lease, 200)
        assert leases.take(lease, TTL_MS)
        remaining = leases.remaining_ms(7)
        assert remaining is not None and remaining > 200

    def test_an_expired_lease_can_be_taken_by_another_agent(self, leases: LeaseStore) -> None:
        assert leases.take(Lease(7, 1, "agent-a"), 50)
        wait_until("the lease expired", lambda: leases.holder(7) is None, timeout_seconds=2)
        assert leases.take(Lease(7, 1, "agent-b"), TTL_MS)

    def test_a_lease_needs_a_positive_time_to_live(self, leases: LeaseStore) -> None:
        with pytest.raises(ValueError, match="positive time to live"):
            leases.take(Lease(7, 1, "agent-a"), 0)


class TestExtendAndRelease:
    def test_only_the_owner_extends_or_releases(self, leases: LeaseStore) -> None:
        mine, theirs = Lease(7, 1, "agent-a"), Lease(7, 1, "agent-b")
        assert leases.take(mine, TTL_MS)
        assert not leases.extend(theirs, TTL_MS)
        assert not leases.release(theirs)
        assert leases.extend(mine, TTL_MS)
        assert leases.release(mine)
        assert leases.holder(7) is None

    def test_a_released_task_is_free_at_once(self, leases: LeaseStore) -> None:
        assert leases.take(Lease(7, 1, "agent-a"), TTL_MS)
        assert leases.release(Lease(7, 1, "agent-a"))
        assert leases.take(Lease(7, 1, "agent-b"), TTL_MS)

    def test_keys_live_under_the_prefix(
        self, leases: LeaseStore, redis_client: Redis, redis_prefix: str
    ) -> None:
        assert leases.take(Lease(7, 1, "agent-a"), TTL_MS)
        assert redis_client.exists(f"{redis_prefix}lease:7") == 1


class TestHeartbeat:
    def test_a_held_lease_outlives_its_ttl_while_the_heartbeat_runs(
        self, leases: LeaseStore
    ) -> None:
        # A 1 s lease beaten every 100 ms: a busy machine may stall the beating thread for
        # most of a second without the lease lapsing; 2.5 s is well past its TTL.
        lease = Lease(7, 1, "agent-a")
        assert leases.take(lease, 1000)
        heartbeat = Heartbeat(leases, 1000, interval_ms=100, on_lost=lambda lost: None)
        heartbeat.hold(lease)
        heartbeat.start()
        try:
            time.sleep(2.5)
            assert leases.holder(7) == lease
        finally:
            heartbeat.stop()

    def test_a_lease_taken_over_is_reported_lost_and_no_longer_extended(
        self, leases: LeaseStore
    ) -> None:
        lost: list[Lease] = []
        event = threading.Event()

        def on_lost(lease: Lease) -> None:
            lost.append(lease)
            event.set()

        lease = Lease(7, 1, "agent-a")
        assert leases.take(lease, 300)
        heartbeat = Heartbeat(leases, 300, on_lost=on_lost)
        heartbeat.hold(lease)
        heartbeat.start()
        try:
            assert leases.take(Lease(7, 2, "agent-b"), TTL_MS)
            assert event.wait(timeout=3)
            assert lost == [lease]
            assert heartbeat.held() == []
            assert leases.holder(7) == Lease(7, 2, "agent-b")
        finally:
            heartbeat.stop()

    def test_a_dropped_lease_is_left_to_expire(self, leases: LeaseStore) -> None:
        lease = Lease(7, 1, "agent-a")
        assert leases.take(lease, 200)
        heartbeat = Heartbeat(leases, 200, on_lost=lambda lost: None)
        heartbeat.hold(lease)
        heartbeat.drop(lease)
        heartbeat.beat()
        wait_until("the lease expired", lambda: leases.holder(7) is None, timeout_seconds=2)


class TestScriptedPipelines:
    def test_marks_go_in_one_round_trip_without_asking_for_the_scripts(
        self, leases: LeaseStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        leases.mark([(1, 1)], QUEUED, TTL_MS)  # Redis has the script from now on
        asked: list[object] = []
        monkeypatch.setattr(Pipeline, "load_scripts", lambda pipe: asked.append(pipe))
        leases.mark([(7, 2), (8, 3)], QUEUED, TTL_MS)
        assert asked == []
        assert leases.holder(7) == Lease(7, 2, QUEUED)
        assert leases.holder(8) == Lease(8, 3, QUEUED)

    def test_a_pipeline_is_sent_again_once_redis_lost_its_scripts(self, leases: LeaseStore) -> None:
        leases.mark([(1, 1)], QUEUED, TTL_MS)
        forget_scripts(leases)  # as after a restart: Redis has none of them
        pipe = leases.client.pipeline(transaction=False)
        leases.mark([(7, 2)], QUEUED, TTL_MS, pipe=pipe)
        pipe.set(f"{leases.prefix}other", "1")
        leases.execute(pipe)
        assert leases.holder(7) == Lease(7, 2, QUEUED)
        assert leases.client.get(f"{leases.prefix}other") == b"1"
        leases.mark([(8, 3)], QUEUED, TTL_MS)
        assert leases.holder(8) == Lease(8, 3, QUEUED)


def forget_scripts(leases: LeaseStore) -> None:
    """Make ``leases`` call its scripts by digests Redis has never seen, as if Redis had
    lost them: without flushing the server's scripts under other tests running beside."""
    for script in vars(leases).values():
        if isinstance(script, Script):
            script.sha = hashlib.sha1(f"lost {uuid.uuid4()}".encode()).hexdigest()
