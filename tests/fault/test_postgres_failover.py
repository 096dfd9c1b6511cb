"""A PostgreSQL primary replaced by its promoted standby mid-run: every service reconnects
on its own, the attempt succeeds, and no scheduled session is lost or emitted twice.

Real processes throughout: a primary made with ``initdb`` and a standby made from it with
``pg_basebackup -R`` (tests/support/postgres_standby.py), a scheduler, an executor and two
agents (tests/fault/_cluster.py). Every service that reads the store is given both servers
in one multi-host URL with ``target_session_attrs=read-write``. While a fan-out runs and a
schedule catches up (a burst of sessions, one per minute of the last half hour), the spec
stops the primary in immediate mode and promotes the standby, with asynchronous and with
synchronous replication.

What a commit on the old primary that never reached the standby costs: the executor's
and the scheduler's transactions are lost whole (a task dispatched again, a session
emitted again, under the same unique key); a result an agent reported is kept in its
outbox until the executor says it applied it, and a task whose lease record was lost is
requeued by the reaper, so every task still ends.

The spec prints its figures (a JSON line per mode): seconds from the stop to the first task
result applied after it, WAL the standby had not received, tasks started or ended
twice, sessions lost or doubled.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fault._cluster import DONE_ATTEMPT_STATES, Cluster, workflow_text
from tests.support.postgres_standby import MissingBinaries, ReplicatedPostgres
from tests.support.waiting import wait_until
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.archive import pack_project, read_project_archive
from tickwork.shared.store.projects import push_revision
from tickwork.shared.store.tables import attempts, sessions

pytestmark = [pytest.mark.slow]

TASKS = 120
STOP_AFTER_ENDS = TASKS // 4
CATCH_UP_MINUTES = 30
ATTEMPT_TIMEOUT_SECONDS = 150.0
RECOVERY_TIMEOUT_SECONDS = 60.0
SCHEDULED = """\
timezone: UTC
schedule:
  cron>: "* * * * *"
  catchup: all
  max_catchup: 100
+note:
  echo>: ${session_time}
"""


@pytest.fixture(params=["asynchronous", "synchronous"])
def replicated(request: pytest.FixtureRequest) -> Iterator[ReplicatedPostgres]:
    try:
        servers = ReplicatedPostgres.start(synchronous=request.param == "synchronous")
    except MissingBinaries as exc:
        pytest.skip(str(exc))
    try:
        yield servers
    finally:
        servers.stop()


def push_schedule(cluster: Cluster) -> None:
    """A project whose workflow runs every minute, caught up from half an hour ago."""
    source = cluster.root / "scheduled"
    source.mkdir()
    (source / "every_minute.dig").write_text(SCHEDULED)
    archive = read_project_archive(pack_project(source))
    now = utc_now()
    with cluster.engine.begin() as conn:
        push_revision(
            conn,
            project_name="scheduled",
            revision_name="v1",
            archive=archive,
            now=now,
            schedule_from=now - timedelta(minutes=CATCH_UP_MINUTES),
        )


def scheduled_sessions(cluster: Cluster) -> list[tuple[datetime, str]]:
    """(session time, its attempts' states joined) of the scheduled workflow's sessions."""
    query = (
        sa.select(sessions.c.session_time, sa.func.string_agg(attempts.c.state, ","))
        .join(attempts, attempts.c.session_id == sessions.c.id)
        .where(sessions.c.workflow_name == "every_minute")
        .group_by(sessions.c.id, sessions.c.session_time)
        .order_by(sessions.c.session_time)
    )
    with cluster.engine.connect() as conn:
        return [(row[0], str(row[1])) for row in conn.execute(query)]


@pytest.mark.timeout(300)
def test_a_primary_switch_mid_run_loses_no_task_and_emits_no_session_twice(
    replicated: ReplicatedPostgres, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    with Cluster(replicated.url(), redis_url, redis_prefix, tmp_path / "cluster") as cluster:
        # Given a scheduler, an executor and two agents on a primary and its standby
        services = [
            cluster.start_scheduler(),
            cluster.start_executor(),
            *(cluster.start_agent(f"agent-{n}", concurrency=3) for n in "ab"),
        ]
        # and a fan-out running while a schedule catches up
        names = [f"t{n:03d}" for n in range(TASKS)]
        attempt = cluster.submit(
            "fan_out", workflow_text({n: cluster.ledger.task(n) for n in names}, parallel=True)
        )
        push_schedule(cluster)
        wait_until(
            f"{STOP_AFTER_ENDS} tasks end",
            lambda: len(cluster.ledger.ends()) >= STOP_AFTER_ENDS,
            90,
        )

        # When the primary stops at once and the standby is promoted
        stopped_at = time.monotonic()
        wal = replicated.fail_over()
        ended_at_stop = len(cluster.ledger.ends())
        recovered_after = cluster.seconds_to_progress(attempt, stopped_at, RECOVERY_TIMEOUT_SECONDS)

        # Then the attempt succeeds, with no service restarted
        state = cluster.wait_for_attempt_end(attempt, ATTEMPT_TIMEOUT_SECONDS)
        explained = cluster.explain(attempt)
        assert state == "success", explained
        assert ended_at_stop < TASKS, f"the primary stopped after the last task\n{explained}"
        # and each task's result was applied once
        rows = [t for t in cluster.tasks(attempt) if not t.is_group]
        applied = cluster.applied_per_task(attempt)
        assert sorted(n for t in rows if (n := applied[t.id]) != 1) == [], explained

        # and the schedule has one session per minute, none missing, each run to its end
        def all_sessions_ended() -> bool:
            found = scheduled_sessions(cluster)
            return bool(found) and all(set(s.split(",")) <= DONE_ATTEMPT_STATES for _, s in found)

        wait_until(
            "every scheduled session ends", all_sessions_ended, RECOVERY_TIMEOUT_SECONDS, poll=0.5
        )
        found = scheduled_sessions(cluster)
        times = [t for t, _ in found]
        assert len(times) == len(set(times)), f"a session emitted twice: {times}"
        steps = {b - a for a, b in pairwise(times)}
        assert steps <= {timedelta(minutes=1)}, f"a scheduled time was skipped: {times}"
        assert len(times) >= CATCH_UP_MINUTES, f"the catch-up was cut short: {times}"
        assert all(s == "success" for _, s in found), found
        # and every service is still the one started, and ready
        assert all(s.is_alive() for s in services), cluster.explain(attempt)
        for service in services:
            wait_until(
                f"{service.name} is ready",
                lambda s=service: s.get("/readyz") is not None,  # type: ignore[misc]
                RECOVERY_TIMEOUT_SECONDS,
                poll=0.2,
            )

        ends = Counter(e.task for e in cluster.ledger.ends())
        starts = Counter(e.task for e in cluster.ledger.starts())
        print(
            json.dumps(
                {
                    "failover": "postgresql",
                    "replication": "synchronous" if replicated.synchronous else "asynchronous",
                    "tasks": TASKS,
                    "ended_before_stop": ended_at_stop,
                    "first_result_applied_after_stop_seconds": round(recovered_after, 2),
                    "unreplicated_wal_bytes": wal.unreplicated_bytes,
                    "started_twice": sum(1 for n in starts.values() if n > 1),
                    "ended_twice": sum(1 for n in ends.values() if n > 1),
                    "sessions": len(times),
                    "sessions_doubled": len(times) - len(set(times)),
                }
            )
        )
