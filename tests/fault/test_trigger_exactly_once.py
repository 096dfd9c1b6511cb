"""A workflow triggered by another's success runs once per upstream session, through a
scheduler and an executor killed with SIGKILL and started again.

Real processes: a scheduler, an executor and an agent (tests/fault/_cluster.py). The
upstream ``load`` is scheduled every 2 seconds; ``report`` has ``trigger: after: load``.
The trigger fires in the transaction that records the upstream's success, under a unique
key per upstream session, so neither a crash before that commit (nothing happened) nor
after it (it happened once) can lose or double a downstream session.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fault._cluster import Cluster
from tests.support.waiting import wait_until
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.archive import pack_project, read_project_archive
from tickwork.shared.store.projects import push_revision
from tickwork.shared.store.tables import attempts, sessions, trigger_firings

pytestmark = [pytest.mark.slow]

LOAD = 'schedule:\n  cron>: "@every 2s"\n+load:\n  echo>: loaded ${session_time}\n'
REPORT = "trigger:\n  after: load\n+report:\n  echo>: report of ${trigger.session_time}\n"
UPSTREAM_SESSIONS = 8
SETTLE_SECONDS = 60.0


def push_project(cluster: Cluster) -> None:
    source = cluster.root / "source"
    source.mkdir()
    (source / "load.dig").write_text(LOAD)
    (source / "report.dig").write_text(REPORT)
    with cluster.engine.begin() as conn:
        push_revision(
            conn,
            project_name="chain",
            revision_name="v1",
            archive=read_project_archive(pack_project(source)),
            now=utc_now(),
        )


def session_times(cluster: Cluster, workflow: str, state: str | None = None) -> list[datetime]:
    query = (
        sa.select(sessions.c.session_time)
        .join(attempts, attempts.c.session_id == sessions.c.id)
        .where(sessions.c.workflow_name == workflow)
        .order_by(sessions.c.session_time)
    )
    if state is not None:
        query = query.where(attempts.c.state == state)
    with cluster.engine.connect() as conn:
        return list(conn.scalars(query))


def firings(cluster: Cluster) -> int:
    with cluster.engine.connect() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(trigger_firings)).scalar_one()
        )


@pytest.mark.timeout(180)
def test_a_triggered_workflow_runs_once_per_upstream_session_through_kills(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    with Cluster(postgres_url, redis_url, redis_prefix, tmp_path) as cluster:
        push_project(cluster)
        scheduler = cluster.start_scheduler()
        executor = cluster.start_executor()
        cluster.start_agent("a", concurrency=2)
        wait_until(
            "two upstream sessions succeed",
            lambda: len(session_times(cluster, "load", "success")) >= 2,
            60,
        )

        # When the executor and then the scheduler are killed mid-stream and started again
        executor.signal_group(signal.SIGKILL)
        executor.wait_exit(10)
        time.sleep(1)
        cluster.start_executor()
        scheduler.signal_group(signal.SIGKILL)
        scheduler.wait_exit(10)
        time.sleep(3)  # upstream times come due while no scheduler runs
        scheduler = cluster.start_scheduler("scheduler-2")
        wait_until(
            f"{UPSTREAM_SESSIONS} upstream sessions succeed",
            lambda: len(session_times(cluster, "load", "success")) >= UPSTREAM_SESSIONS,
            90,
        )
        scheduler.process.send_signal(signal.SIGTERM)
        scheduler.wait_exit(20)

        # Then every upstream session that succeeded has exactly one downstream session
        def settled() -> bool:
            return session_times(cluster, "load", "success") == session_times(
                cluster, "report", "success"
            )

        wait_until("every report runs", settled, SETTLE_SECONDS, poll=0.5)
        upstream = session_times(cluster, "load", "success")
        downstream = session_times(cluster, "report")
        assert downstream == upstream, cluster.explain()
        assert firings(cluster) == len(upstream)
        gaps = {b - a for a, b in pairwise(upstream)}
        assert gaps <= {timedelta(seconds=2)}, f"an upstream time was lost: {upstream}"
