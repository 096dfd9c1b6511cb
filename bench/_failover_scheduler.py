"""Part (3) of bench/failover.py: two schedulers emitting ``@every 1s`` schedules, one
stopped with SIGTERM; the emission lag around the stop, and no session time missed or
emitted twice."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from _failover_cluster import Cluster, wait_exit
from _services import (
    BenchFailed,
)
from _stores import percentile
from sqlalchemy import Engine, select

from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store import emission as emission_store
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store.tables import schedules, sessions

SCHEDULES = 5
SCHEDULE_EVERY = "@every 1s"
SCHEDULE_INTERVAL_SECONDS = 1
SCHEDULER_BEFORE_SECONDS = 8.0  # both schedulers emitting, before the SIGTERM
SCHEDULER_AFTER_SECONDS = 8.0  # one scheduler emitting, after it


@dataclass(frozen=True)
class SchedulerHandover:
    """The sessions emitted around one scheduler's SIGTERM, and its exit."""

    lags: list[float]  # seconds, one per session in the window
    near_switch_lags: list[float]  # sessions within 1 s before to 3 s after the signal
    sessions: int
    duplicates: int
    missing: int
    exit_seconds: float


def schedule_text() -> str:
    return f'schedule:\n  cron>: "{SCHEDULE_EVERY}"\n+a:\n  echo>: x\n'


def database_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        found = emission_store.database_now(conn)
    if found is None:
        raise BenchFailed("the store is not PostgreSQL")
    return found


def push_schedules(cluster: Cluster) -> list[int]:
    """``SCHEDULES`` workflows of one project, each on ``SCHEDULE_EVERY``; their ids."""
    now = database_now(cluster.engine)
    with cluster.engine.begin() as conn:
        project_id = project_store.ensure_project(conn, "failover", now)
        revision_id = project_store.ensure_revision(conn, project_id, "r1", {}, now)
        for index in range(SCHEDULES):
            name = f"every_second_{index}"
            definition = parse_workflow_text(schedule_text(), f"{name}.dig", cluster.project_dir)
            definition_id = project_store.ensure_workflow_definition(conn, revision_id, definition)
            schedule_store.upsert_schedule(
                conn,
                project_id=project_id,
                definition_id=definition_id,
                definition=definition,
                now=now,
            )
        found = conn.scalars(select(schedules.c.id).where(schedules.c.project_id == project_id))
        return list(found)


def run_scheduler_handover(cluster: Cluster, say: Callable[[str], None]) -> SchedulerHandover:
    """Two schedulers emit; one gets SIGTERM; read what was emitted on either side."""
    ids = push_schedules(cluster)
    stopped, kept = cluster.start_scheduler(), cluster.start_scheduler()
    for scheduler in (stopped, kept):
        cluster.wait_ready(scheduler)
    # The window starts at the first whole second after both were seen ready.
    start = database_now(cluster.engine).replace(microsecond=0) + timedelta(seconds=1)
    say(f"(3) two schedulers emitting; SIGTERM to one in {SCHEDULER_BEFORE_SECONDS:g} s")
    time.sleep(SCHEDULER_BEFORE_SECONDS)
    signalled_at = database_now(cluster.engine)
    signalled = time.monotonic()
    stopped.process.send_signal(signal.SIGTERM)
    exit_seconds = wait_exit(stopped) - signalled
    time.sleep(SCHEDULER_AFTER_SECONDS)
    kept.check_alive()
    # The window ends 2 s back, so that every session time in it is long due.
    end = database_now(cluster.engine).replace(microsecond=0) - timedelta(seconds=2)
    query = select(sessions.c.schedule_id, sessions.c.session_time, sessions.c.created_at).where(
        sessions.c.schedule_id.in_(ids),
        sessions.c.session_time >= start,
        sessions.c.session_time <= end,
    )
    with cluster.engine.connect() as conn:
        found = conn.execute(query).all()
    seconds = int((end - start).total_seconds()) // SCHEDULE_INTERVAL_SECONDS + 1
    distinct = {(row.schedule_id, row.session_time) for row in found}
    near = (signalled_at - timedelta(seconds=1), signalled_at + timedelta(seconds=3))
    return SchedulerHandover(
        lags=[(row.created_at - row.session_time).total_seconds() for row in found],
        near_switch_lags=[
            (row.created_at - row.session_time).total_seconds()
            for row in found
            if near[0] <= row.session_time <= near[1]
        ],
        sessions=len(found),
        duplicates=len(found) - len(distinct),
        missing=len(ids) * seconds - len(distinct),
        exit_seconds=exit_seconds,
    )


def describe_scheduler(run: SchedulerHandover) -> str:
    return (
        f"(3) scheduler handover: {run.sessions} sessions, lag p50 "
        f"{1000 * percentile(run.lags, 0.5):.0f} ms, max {1000 * max(run.lags):.0f} ms "
        f"(near the switch {1000 * max(run.near_switch_lags):.0f} ms); "
        f"{run.duplicates} duplicates, {run.missing} missing; stopped scheduler gone after "
        f"{1000 * run.exit_seconds:.0f} ms"
    )
