"""Partitions: an executor runs only the attempts of the partitions it holds, and the live
executors share the partitions out fairly under PostgreSQL advisory locks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import Connection, create_engine

from tests.executor.scenario import Scenario
from tickwork.services.executor.partitions import (
    COUNT_KEY,
    MEMBER_KEY,
    REBALANCE_KEY,
    PartitionCountConflict,
    PartitionLeases,
    fair_share,
)
from tickwork.shared.domain.partitions import partition_of
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.partitions import AttemptFilter

PARTITIONS = 4

WORKFLOW = """
    +a:
      echo>: a
    +b:
      echo>: b
"""


class TestFairShare:
    def test_the_shares_add_up_to_every_partition_and_differ_by_one_at_most(self) -> None:
        members = [300, 100, 200]
        shares = [fair_share(members, pid, 16) for pid in members]
        assert sum(shares) == 16
        assert sorted(shares) == [5, 5, 6]

    def test_a_lone_executor_holds_every_partition(self) -> None:
        assert fair_share([42], 42, 16) == 16

    def test_an_executor_not_seen_yet_counts_itself(self) -> None:
        assert fair_share([1], 2, 16) == 8


class TestTheFilter:
    def test_it_keeps_the_attempts_of_its_partitions_and_of_its_ids(self) -> None:
        kept = AttemptFilter(ids=frozenset({5, 6, 9}), partitions=frozenset({1}), partition_count=4)
        numbers = sa.table("numbers", sa.column("n", sa.Integer))
        condition = kept.clause(numbers.c.n)
        assert condition is not None
        engine = sa.create_engine("sqlite://")
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE numbers (n INTEGER)")
            conn.execute(numbers.insert(), [{"n": n} for n in range(12)])
            found = conn.execute(sa.select(numbers.c.n).where(condition).order_by(numbers.c.n))
            assert list(found.scalars()) == [5, 9]
        engine.dispose()

    def test_every_partition_adds_no_condition(self) -> None:
        every = AttemptFilter.of_partitions(range(PARTITIONS), PARTITIONS)
        assert every.every_partition


class TestAnExecutorKeptToPartitions:
    def test_it_leaves_the_attempts_of_other_partitions_alone(self, run: Scenario) -> None:
        attempt = run.start(WORKFLOW)
        others = set(range(PARTITIONS)) - {partition_of(attempt, PARTITIONS)}
        run.executor.keep_to(AttemptFilter.of_partitions(others, PARTITIONS))

        assert run.step() == []
        assert run.attempt_state() is AttemptState.CREATED

    def test_it_runs_the_attempts_of_its_own_to_the_end(self, run: Scenario) -> None:
        attempt = run.start(WORKFLOW)
        run.executor.keep_to(AttemptFilter.of_partitions([partition_of(attempt, 4)], 4))

        assert run.step() == ["+wf+a"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_partition_taken_over_is_picked_up_where_it_was_left(self, run: Scenario) -> None:
        # Given an executor that dispatched the first task, then gave the partition up
        attempt = run.start(WORKFLOW)
        own = partition_of(attempt, PARTITIONS)
        run.executor.keep_to(AttemptFilter.of_partitions([own], PARTITIONS))
        assert run.step() == ["+wf+a"]
        run.executor.keep_to(AttemptFilter.of_partitions([], PARTITIONS))
        # When its result comes and the partition is held again
        run.succeed("+wf+a")
        run.executor.keep_to(AttemptFilter.of_partitions([own], PARTITIONS))
        # Then the next task goes out
        assert run.step() == ["+wf+b"]


@pytest.fixture
def lock_connections(migrated_postgres_url: str) -> Iterator[list[Connection]]:
    engine = create_engine(migrated_postgres_url, poolclass=None)
    opened = [engine.connect().execution_options(isolation_level="AUTOCOMMIT") for _ in range(3)]
    try:
        yield opened
    finally:
        for conn in opened:
            conn.close()
        engine.dispose()


def running(conn: Connection, partition_count: int) -> PartitionLeases:
    """An executor that joined alone and holds every partition."""
    lease = PartitionLeases(conn, partition_count)
    assert lease.join()
    settle([lease])
    assert lease.held == frozenset(range(partition_count))
    return lease


def settle(leases: list[PartitionLeases]) -> None:
    """Rebalance every executor until none changes (a few rounds at most)."""
    for _ in range(10):
        if not any([lease.rebalance() for lease in leases]):
            return
    raise AssertionError("the partitions never settled")


class TestSharingThePartitions:
    def test_two_executors_hold_half_each_and_together_all(
        self, lock_connections: list[Connection]
    ) -> None:
        first, second = (PartitionLeases(c, 16) for c in lock_connections[:2])
        assert first.join()
        settle([first])
        assert first.held == frozenset(range(16))

        assert second.join()
        settle([first, second])

        assert len(first.held) == len(second.held) == 8
        assert first.held | second.held == frozenset(range(16))

    def test_the_partitions_of_one_that_leaves_go_to_the_others(
        self, lock_connections: list[Connection]
    ) -> None:
        leases = [PartitionLeases(c, 16) for c in lock_connections]
        for lease in leases:
            assert lease.join()
        settle(leases)
        assert sorted(len(lease.held) for lease in leases) == [5, 5, 6]

        leases[0].leave()
        settle(leases[1:])

        assert len(leases[1].held) == len(leases[2].held) == 8
        assert leases[1].held | leases[2].held == frozenset(range(16))

    def test_an_executor_of_an_older_release_keeps_the_others_out(
        self, lock_connections: list[Connection]
    ) -> None:
        old, new = lock_connections[:2]
        old.exec_driver_sql(f"SELECT pg_advisory_lock({MEMBER_KEY})")  # as the old active one
        assert not PartitionLeases(new, 16).join()


class TestAgreeingOnTheCount:
    def test_an_executor_set_to_another_count_stands_by_while_the_first_runs(
        self, lock_connections: list[Connection]
    ) -> None:
        # Given an executor running 16 partitions
        first = running(lock_connections[0], 16)

        # When one set to 32 tries to join
        second = PartitionLeases(lock_connections[1], 32)
        joined = second.join()

        # Then it stands by, saying why, and is not counted as a member
        assert not joined
        assert "runs 16 partitions" in second.refusal
        assert "set to 32" in second.refusal
        assert second.held == frozenset()
        assert not first.rebalance()
        assert first.held == frozenset(range(16))

    def test_the_count_of_the_executors_holding_partitions_rules_whatever_the_order(
        self, lock_connections: list[Connection]
    ) -> None:
        # Given two executors set alike running, and a third set otherwise that joined
        # before they took any partition (both counts present, none yet holding)
        alike = [PartitionLeases(c, 16) for c in lock_connections[:2]]
        other = PartitionLeases(lock_connections[2], 8)
        for lease in [*alike, other]:
            lease.join()
        joined = [lease for lease in [*alike, other] if lease.pid and lease.refusal == ""]

        # When they look at the partitions, the ones that meet a ruling count not their
        # own give every partition up
        survivors = []
        for lease in joined:
            try:
                lease.rebalance()
            except PartitionCountConflict:
                lease.leave()
            else:
                survivors.append(lease)
        settle(survivors)

        # Then only executors of one count hold partitions, and they hold them all
        counts = {lease.partition_count for lease in survivors if lease.held}
        assert len(counts) == 1
        (count,) = counts
        assert frozenset().union(*(lease.held for lease in survivors)) == frozenset(range(count))

    def test_executors_rebalance_one_at_a_time_and_a_busy_turn_is_skipped(
        self, lock_connections: list[Connection]
    ) -> None:
        # Given an executor that joined while another one is rebalancing
        lease = PartitionLeases(lock_connections[0], 16)
        assert lease.join()
        other = lock_connections[1]
        other.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": REBALANCE_KEY})

        # Then it takes nothing on this turn, without waiting
        assert not lease.rebalance()
        assert lease.held == frozenset()

        # And takes its share on the next turn once the other is done
        other.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": REBALANCE_KEY})
        assert lease.rebalance()
        assert lease.held == frozenset(range(16))

    def test_of_two_counts_only_the_first_to_take_partitions_keeps_them(
        self, lock_connections: list[Connection]
    ) -> None:
        # Given two members set to different counts, neither holding any partition yet
        # (both got past their join's check before the other's count showed)
        first = PartitionLeases(lock_connections[0], 16)
        second = PartitionLeases(lock_connections[1], 8)
        assert first.join()
        second.pid = int(
            lock_connections[1].execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        )
        lock_connections[1].execute(
            sa.text("SELECT pg_advisory_lock_shared(:k, 8)"), {"k": COUNT_KEY}
        )
        lock_connections[1].execute(
            sa.text("SELECT pg_advisory_lock_shared(:k)"), {"k": MEMBER_KEY}
        )

        # When they rebalance in turn, whichever count rules takes partitions first
        for lease in (first, second):
            with contextlib.suppress(PartitionCountConflict):
                lease.rebalance()

        # Then the one after it meets those holdings, and stands by
        taken = [lease for lease in (first, second) if lease.held]
        assert len(taken) == 1
        other = second if taken[0] is first else first
        with pytest.raises(PartitionCountConflict):
            other.rebalance()

    def test_one_that_stood_by_joins_once_the_other_count_is_gone(
        self, lock_connections: list[Connection]
    ) -> None:
        first = running(lock_connections[0], 16)
        second = PartitionLeases(lock_connections[1], 32)
        assert not second.join()

        first.leave()

        assert second.join()
        settle([second])
        assert second.held == frozenset(range(32))
