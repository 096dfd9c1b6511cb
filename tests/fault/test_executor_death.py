"""One of three active executors killed (SIGKILL) in the middle of a fan-out: nothing is lost.

The test runs a real cluster (tests/fault/_cluster.py): three ``tickwork executor``
processes sharing the attempts' partitions, and two agents. Fifteen attempts of twenty
parallel tasks each (300 tasks, spread over fifteen of the sixteen partitions, so that
every executor has work) run; when about a third of the tasks ended, one executor is
killed with SIGKILL. The other two take its partitions, claim the events it had read
but not committed, and finish its attempts. Every wait is bounded; on the way out every
process the test started is killed.
"""

from __future__ import annotations

import signal

import pytest
import sqlalchemy as sa

from tests.fault._cluster import Cluster, workflow_text
from tests.support.waiting import wait_until
from tickwork.shared.store.tables import task_logs, tasks

pytestmark = [pytest.mark.slow]

ATTEMPTS = 15
TASKS_PER_ATTEMPT = 20
PARTITIONS = 16
SETTLE_BOUND_SECONDS = 150.0


def applied_per_task(cluster: Cluster, attempt_ids: list[int]) -> dict[str, int]:
    """How many results the store applied to each operator task (one ended log row each)."""
    ended = sa.func.count(task_logs.c.id).filter(task_logs.c.ended_at.is_not(None))
    query = (
        sa.select(tasks.c.full_name, tasks.c.attempt_id, ended)
        .select_from(tasks.outerjoin(task_logs, task_logs.c.task_id == tasks.c.id))
        .where(tasks.c.attempt_id.in_(attempt_ids), tasks.c.is_group.is_(False))
        .group_by(tasks.c.id, tasks.c.full_name, tasks.c.attempt_id)
    )
    with cluster.engine.connect() as conn:
        return {f"{row[1]}{row[0]}": int(row[2]) for row in conn.execute(query)}


@pytest.mark.timeout(240)
def test_killing_one_of_three_executors_mid_fan_out_loses_no_task(cluster: Cluster) -> None:
    # Given three executors sharing the partitions, and two agents
    executors = [cluster.start_executor() for _ in range(3)]
    wait_until(
        "every executor holds its share",
        lambda: sorted(e.metric("tickwork_executor_partitions") for e in executors) == [5, 5, 6],
        10,
    )
    cluster.start_agent("agent-a", concurrency=2)
    cluster.start_agent("agent-b", concurrency=2)

    # When a fan-out of 300 tasks runs and one executor is killed a third of the way
    attempt_ids = []
    for a in range(ATTEMPTS):
        names = {f"a{a}t{t}": cluster.ledger.task(f"a{a}t{t}") for t in range(TASKS_PER_ATTEMPT)}
        attempt_ids.append(cluster.submit(f"fan_{a}", workflow_text(names, parallel=True)))
    total = ATTEMPTS * TASKS_PER_ATTEMPT
    wait_until("a third of the tasks ended", lambda: len(cluster.ledger.ends()) >= total // 3, 90)
    victim = executors[1]
    held = victim.metric("tickwork_executor_partitions")
    victim.signal_group(signal.SIGKILL)
    victim.wait_exit(10)
    survivors = [executors[0], executors[2]]

    # Then the others take its partitions and every attempt succeeds
    assert held > 0
    wait_until(
        "the two others hold every partition",
        lambda: sum(e.metric("tickwork_executor_partitions") for e in survivors) == PARTITIONS,
        10,
    )
    for attempt in attempt_ids:
        state = cluster.wait_for_attempt_end(attempt, SETTLE_BOUND_SECONDS)
        assert state == "success", cluster.explain(attempt)
    # Each task ran at least once and the store applied exactly one result to each
    ended = {entry.task for entry in cluster.ledger.ends()}
    assert len(ended) == total, cluster.explain()
    applied = applied_per_task(cluster, attempt_ids)
    assert len(applied) == total
    assert {name: n for name, n in applied.items() if n != 1} == {}, cluster.explain()
    assert all(e.is_alive() for e in survivors)


@pytest.mark.timeout(60)
def test_an_executor_set_to_another_partition_count_stands_by_until_the_other_stops(
    cluster: Cluster,
) -> None:
    # Given an executor running the default 16 partitions
    first = cluster.start_executor()
    wait_until("it holds them all", lambda: first.metric("tickwork_executor_partitions") == 16, 10)

    # When one set to 8 starts beside it
    second = cluster.start_executor({"TICKWORK_EXECUTOR_PARTITIONS": "8"}, wait=False)

    # Then it says why it stands by, holds nothing, and the first keeps every partition
    wait_until("it says why it stands by", lambda: "runs 16 partitions" in second.log(), 15)
    assert "set to 8" in second.log()
    assert second.metric("tickwork_executor_partitions") == 0
    assert first.metric("tickwork_executor_partitions") == 16

    # And once the first stops, it runs its 8
    first.signal_group(signal.SIGTERM)
    first.wait_exit(15)
    wait_until("it holds its 8", lambda: second.metric("tickwork_executor_partitions") == 8, 10)
