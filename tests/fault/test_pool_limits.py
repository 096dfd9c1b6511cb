"""Two executors and agents with room for more never run more of a pool's tasks at once
than the pool has slots.

Real processes (tests/fault/_cluster.py): two ``tickwork executor`` processes sharing the
attempts' partitions, and two agents of 8 processes each (16 at once, more than the pool's
10). Ten attempts of twenty parallel tasks (200 tasks, spread over both executors'
partitions) all take a slot of the pool ``db``. Every 50 ms the test counts the pool's
tasks in flight in the store; afterwards it replays the ledger the tasks wrote, in order,
to find how many ran at once. Neither may pass 10, and every task must run once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from tests.fault._cluster import Cluster, workflow_text
from tests.support.waiting import wait_until
from tickwork.shared.clock import utc_now
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store.tables import tasks

pytestmark = [pytest.mark.slow]

ATTEMPTS = 10
TASKS_PER_ATTEMPT = 20
SLOTS = 10
SAMPLE_SECONDS = 0.05
SETTLE_BOUND_SECONDS = 120.0


def in_flight_of_pool(cluster: Cluster, pool: str) -> int:
    query = sa.select(sa.func.count()).where(
        tasks.c.pool == pool, tasks.c.state.in_(["queued", "running"])
    )
    with cluster.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


class Sampler:
    """Samples ``measure()`` every :data:`SAMPLE_SECONDS` in a thread until stopped."""

    def __init__(self, measure: Callable[[], int]) -> None:
        self.measure = measure
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.samples.append(self.measure())


def most_at_once(events: list[str]) -> int:
    """The most tasks running together, from their start and end lines in order."""
    running = peak = 0
    for event in events:
        running += 1 if event == "start" else -1
        peak = max(peak, running)
    return peak


@pytest.mark.timeout(240)
def test_two_executors_never_run_more_of_a_pools_tasks_than_its_slots(cluster: Cluster) -> None:
    # Given a pool of 10 slots, two executors sharing the partitions and 16 agent processes
    with cluster.engine.begin() as conn:
        pool_store.set_pool(conn, "db", SLOTS, "the warehouse", utc_now())
    executors = [cluster.start_executor() for _ in range(2)]
    wait_until(
        "both executors hold their share",
        lambda: sorted(e.metric("tickwork_executor_partitions") for e in executors) == [8, 8],
        10,
    )
    cluster.start_agent("agent-a", concurrency=8)
    cluster.start_agent("agent-b", concurrency=8)

    # When 200 tasks of the pool run in ten attempts
    attempt_ids = []
    with Sampler(lambda: in_flight_of_pool(cluster, "db")) as sampler:
        for a in range(ATTEMPTS):
            names = {
                f"a{a}t{t}": cluster.ledger.task(f"a{a}t{t}", sleep_seconds=0.2)
                for t in range(TASKS_PER_ATTEMPT)
            }
            text = "_pool: db\n" + workflow_text(names, parallel=True)
            attempt_ids.append(cluster.submit(f"pooled_{a}", text))
        wait_until(
            "every attempt ends",
            lambda: all(cluster.attempt_state(i) in ("success", "error") for i in attempt_ids),
            SETTLE_BOUND_SECONDS,
            poll=0.2,
        )

    # Then every task ran once, and never more than 10 were in flight or running at once
    assert [cluster.attempt_state(i) for i in attempt_ids] == ["success"] * ATTEMPTS
    starts = cluster.ledger.starts()
    assert len({entry.task for entry in starts}) == ATTEMPTS * TASKS_PER_ATTEMPT
    assert len(sampler.samples) > 20, "the sampler barely ran"
    assert max(sampler.samples) <= SLOTS, sampler.samples
    assert max(sampler.samples) == SLOTS, "the pool was never full: the test proves nothing"
    assert most_at_once([entry.event for entry in cluster.ledger.entries()]) <= SLOTS
    # And the executors say how full the pool is
    wait_until(
        "an executor reports the pool's slots",
        lambda: any(e.metric("tickwork_pool_slots", pool="db") == SLOTS for e in executors),
        15,
    )
