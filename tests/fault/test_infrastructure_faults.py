"""Redis losing every key, and the executor crashing between its commit and its publish,
or between leaving its queued marks in Redis and sending the messages.

Each test runs a real cluster (tests/fault/_cluster.py): ``tickwork executor`` on the test's
PostgreSQL database and ``tickwork agent`` processes on the test's Redis keyspace (keys
under the ``redis_prefix`` fixture's prefix), with 3 s leases. Redis is shared with other
tests, so "Redis restarted empty" is every key of this prefix deleted, not FLUSHDB. Task
commands append ``start``/``end`` lines with their lease token to a ledger file, so a test
can count the runs of each task. Every wait is bounded; on the way out every process the
test started is killed.
"""

from __future__ import annotations

import time

import pytest

from tests.fault._cluster import HEARTBEAT_SECONDS, REAPER_SECONDS, Cluster, workflow_text
from tests.support.waiting import wait_until
from tickwork.shared.domain.states import TaskState

pytestmark = [pytest.mark.slow]

QUEUED_TASKS = 200
CRASH_EXIT_CODE = 86
DISPATCH_CRASH_BOUND_SECONDS = 20.0
"""Well under a pending mark's minute: the reaper's grace and interval, and a start."""


@pytest.mark.timeout(60)
def test_every_queued_task_runs_after_redis_loses_all_its_keys(cluster: Cluster) -> None:
    cluster.start_executor()
    # One agent running one task at a time: most of the 200 are still queued in Redis.
    cluster.start_agent("agent-a", concurrency=1)
    names = [f"t{n:03d}" for n in range(QUEUED_TASKS)]
    tasks = {name: cluster.ledger.task(name) for name in names}
    attempt = cluster.submit("emptied_redis", workflow_text(tasks, parallel=True))
    # Every message is published (and marked queued) before Redis loses it all: the queued
    # tasks' messages, their marks, the leases and the event stream go together.
    wait_until(
        f"the executor publishes all {QUEUED_TASKS} messages",
        lambda: cluster.executor.metric("tickwork_tasks_dispatched_total") >= QUEUED_TASKS,
        30,
    )
    wait_until("the first tasks end", lambda: len(cluster.ledger.ends()) >= 3, 30)

    deleted = cluster.delete_redis_keys()
    ended_before = {end.task for end in cluster.ledger.ends()}
    assert deleted > 0, cluster.explain(attempt)
    assert len(ended_before) < QUEUED_TASKS // 2, (
        f"{len(ended_before)} tasks had ended before Redis was emptied: too few were queued"
    )

    state = cluster.wait_for_attempt_end(attempt, 40)
    explained = cluster.explain(attempt)
    assert state == "success", explained
    stored = {t.full_name.rpartition("+")[2]: t.state for t in cluster.tasks(attempt)}
    assert all(stored[name] is TaskState.SUCCESS for name in names), explained
    ended = {end.task for end in cluster.ledger.ends()}
    assert sorted(set(names) - ended) == [], explained


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "crash_point",
    [
        # The task's QUEUED state committed, nothing in Redis: no mark, no message.
        "after-commit-before-publish",
        # Its queued mark left in Redis, never confirmed, no message: the mark stays for a
        # minute, and the next executor does not wait for it to expire.
        "after-mark-before-send",
    ],
)
def test_a_task_of_an_executor_that_crashed_mid_dispatch_runs_once_within_seconds(
    cluster: Cluster, crash_point: str
) -> None:
    cluster.start_agent("agent-a")
    crashing = cluster.start_executor({"TICKWORK_CRASH_POINT": crash_point})
    work = cluster.ledger.task("work")
    attempt = cluster.submit("crashed_executor", workflow_text({"work": work}))

    assert crashing.wait_exit(20) == CRASH_EXIT_CODE, cluster.explain(attempt)
    explained = cluster.explain(attempt)
    assert cluster.task(attempt, "work").state is TaskState.QUEUED, explained
    assert cluster.ledger.starts("work") == [], explained

    replaced_at = time.monotonic()
    cluster.start_executor()
    state = cluster.wait_for_attempt_end(attempt, 30)
    took = time.monotonic() - replaced_at
    # Give a duplicate message time to show up (a redelivery after the result, say).
    time.sleep(2 * (HEARTBEAT_SECONDS + REAPER_SECONDS))
    explained = cluster.explain(attempt)
    assert state == "success", explained
    assert took < DISPATCH_CRASH_BOUND_SECONDS, f"took {took:.1f}s\n{explained}"
    assert len(cluster.ledger.starts("work")) == 1, explained
    assert len(cluster.ledger.ends("work")) == 1, explained
