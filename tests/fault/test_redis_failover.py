"""A Redis primary killed under Sentinel mid-run: the services find the promoted replica on
their own, every task ends, and each result is applied once.

Real processes throughout: a primary, a replica and three sentinels
(tests/support/redis_sentinel.py), an executor and two agents (tests/fault/_cluster.py)
given the deployment as ``TICKWORK_REDIS_URL=sentinel://.../tickwork/0``. The spec kills
the primary with SIGKILL while a 300-task fan-out streams through the agents and does not
start it again.

Replication is asynchronous, so a write the old primary acknowledged may never reach the
replica: a lease, a heartbeat, a queued message or an event. What it costs:

- a lost or expired lease makes its agent stop the task and report nothing; the executor
  requeues the task under a new lease token, and a result reported under the old token is
  refused (the applied result's token must be the task's current one): a task may run
  twice, its result is applied once;
- a lost message is republished by the executor's reconciler; a lost result event stays in
  its agent's outbox until the executor says it applied it.

The spec prints its figures (a JSON line): the seconds the sentinels took to promote the
replica, from the kill to the first task result applied after it, tasks started or ended
twice.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault._cluster import Cluster, workflow_text
from tests.support.redis_sentinel import SentinelDeployment, start_sentinel_deployment
from tests.support.servers import ServerUnavailable
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow]

TASKS = 300
KILL_AFTER_ENDS = TASKS // 4
"""Tasks ended before the primary is killed: the rest are queued or running then."""
FAILOVER_TIMEOUT_SECONDS = 30.0
ATTEMPT_TIMEOUT_SECONDS = 150.0
RECOVERY_TIMEOUT_SECONDS = 30.0


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelDeployment]:
    try:
        deployment = start_sentinel_deployment(tmp_path / "redis")
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.mark.timeout(240)
def test_a_sentinel_failover_mid_run_loses_no_task_and_applies_each_result_once(
    postgres_url: str, redis_prefix: str, tmp_path: Path, sentinels: SentinelDeployment
) -> None:
    with Cluster(postgres_url, sentinels.url, redis_prefix, tmp_path / "cluster") as cluster:
        # Given an executor and two agents that know Redis only by its sentinels
        executor = cluster.start_executor()
        agents = [cluster.start_agent(f"agent-{n}", concurrency=3) for n in "ab"]
        names = [f"t{n:03d}" for n in range(TASKS)]
        attempt = cluster.submit(
            "failover", workflow_text({n: cluster.ledger.task(n) for n in names}, parallel=True)
        )
        wait_until(
            f"{KILL_AFTER_ENDS} tasks end",
            lambda: len(cluster.ledger.ends()) >= KILL_AFTER_ENDS,
            90,
        )

        # When the primary dies with SIGKILL and the sentinels promote the replica
        killed_at = time.monotonic()
        sentinels.kill_primary()
        ended_at_kill = len(cluster.ledger.ends())
        promoted_after = sentinels.wait_for_failover(FAILOVER_TIMEOUT_SECONDS)
        recovered_after = cluster.seconds_to_progress(attempt, killed_at, RECOVERY_TIMEOUT_SECONDS)

        # Then the attempt succeeds without a restart of any service
        state = cluster.wait_for_attempt_end(attempt, ATTEMPT_TIMEOUT_SECONDS)
        explained = cluster.explain(attempt)
        assert state == "success", explained
        assert ended_at_kill < TASKS, f"the primary died after the last task\n{explained}"
        assert all(s.is_alive() for s in [executor, *agents]), explained

        # and every task ended, its result applied exactly once
        rows = [t for t in cluster.tasks(attempt) if not t.is_group]
        applied = cluster.applied_per_task(attempt)
        assert len(rows) == TASKS
        assert sorted(n for t in rows if (n := applied[t.id]) != 1) == [], explained
        ends = Counter(e.task for e in cluster.ledger.ends())
        starts = Counter(e.task for e in cluster.ledger.starts())
        assert set(ends) == set(names), explained

        # and the probes answer ready again
        for service in [executor, *agents]:
            wait_until(
                f"{service.name} is ready again",
                lambda s=service: s.get("/readyz") is not None,  # type: ignore[misc]
                RECOVERY_TIMEOUT_SECONDS,
                poll=0.2,
            )

        print(
            json.dumps(
                {
                    "failover": "redis-sentinel",
                    "tasks": TASKS,
                    "ended_before_kill": ended_at_kill,
                    "promoted_after_seconds": round(promoted_after, 2),
                    "first_result_applied_after_kill_seconds": round(recovered_after, 2),
                    "started_twice": sum(1 for n in starts.values() if n > 1),
                    "ended_twice": sum(1 for n in ends.values() if n > 1),
                    "applied_twice": sum(1 for n in applied.values() if n > 1),
                }
            )
        )
