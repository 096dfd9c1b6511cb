"""Redis crashing mid-run (SIGKILL, restarted with nothing on disk) re-runs no finished task.

Each run is a real cluster (tests/fault/_cluster.py) on a private redis-server with
persistence off, on a port of its own under the test's temporary directory: the spec
kills it with SIGKILL while short tasks stream through two agents, and starts a new one on
the same port, empty. Every task appends ``start``/``end`` lines to the ledger, so a task
whose ``end`` shows up twice is a side effect that ran twice.

Tasks that were still running when Redis died lose their lease and run again (at least
once), but their ``end`` had not been written: that is no duplicate. Tasks that had
finished keep their result in their agent's outbox until the executor says it applied it,
and the executor waits for the agents to put their marks back before it trusts a missing
lease: none of them runs again.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fault._cluster import Cluster, workflow_text
from tests.support.servers import ThrowawayRedis
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow]

TASKS = 150
CRASH_AFTER_ENDS = TASKS // 4
"""Tasks ended before Redis is killed: the rest are queued or running when it dies."""
OUTAGE_SECONDS = 1.0
"""How long Redis stays down: agents finish tasks meanwhile and cannot report them."""
AFTER_END_SECONDS = 3.0
"""How long the spec keeps watching after the attempt ended, for late duplicate runs."""


@dataclass
class CrashingRedis:
    """A private redis-server that can be killed and started again, empty, on its port."""

    binary: str
    root: Path
    server: ThrowawayRedis
    restarts: int = 0

    @property
    def url(self) -> str:
        return self.server.url

    def crash_and_restart(self, outage_seconds: float) -> None:
        """SIGKILL the server, wait ``outage_seconds``, start an empty one on its port."""
        self.server.process.kill()
        self.server.process.wait(timeout=10)
        time.sleep(outage_seconds)
        self.restarts += 1
        root = self.root / f"redis-{self.restarts}"
        self.server = ThrowawayRedis.start(self.binary, self.server.port, root=root)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def crashing_redis(tmp_path: Path) -> Iterator[CrashingRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs the redis-server binary to crash and restart a private Redis")
    server = ThrowawayRedis.start(binary, root=tmp_path / "redis-0")
    redis = CrashingRedis(binary, tmp_path, server)
    try:
        yield redis
    finally:
        redis.stop()


@pytest.mark.timeout(150)
def test_no_task_that_finished_around_a_redis_crash_runs_again(
    postgres_url: str, redis_prefix: str, tmp_path: Path, crashing_redis: CrashingRedis
) -> None:
    root = tmp_path / "cluster"
    with Cluster(postgres_url, crashing_redis.url, redis_prefix, root) as cluster:
        # Given two agents working through many short tasks
        cluster.start_executor()
        cluster.start_agent("agent-a", concurrency=3)
        cluster.start_agent("agent-b", concurrency=3)
        names = [f"t{n:03d}" for n in range(TASKS)]
        tasks = {name: cluster.ledger.task(name) for name in names}
        attempt = cluster.submit("redis_crash", workflow_text(tasks, parallel=True))
        wait_until(
            f"{CRASH_AFTER_ENDS} tasks end",
            lambda: len(cluster.ledger.ends()) >= CRASH_AFTER_ENDS,
            60,
        )

        # When Redis dies mid-run and comes back empty
        crashing_redis.crash_and_restart(OUTAGE_SECONDS)
        ended_before_restart = len(cluster.ledger.ends())

        # Then every task succeeds, and none that had finished ran a second time
        state = cluster.wait_for_attempt_end(attempt, 100)
        time.sleep(AFTER_END_SECONDS)
        explained = cluster.explain(attempt)
        assert state == "success", explained
        assert ended_before_restart < TASKS, f"Redis died after the last task\n{explained}"
        ends = Counter(end.task for end in cluster.ledger.ends())
        assert sorted(set(names) - set(ends)) == [], explained
        twice = sorted(name for name, count in ends.items() if count > 1)
        assert twice == [], (
            f"{len(twice)} of {TASKS} tasks ran their command to the end twice: {twice}\n"
            f"{explained}"
        )
