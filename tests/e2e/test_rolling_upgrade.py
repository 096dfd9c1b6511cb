"""A rolling upgrade of every service of a running cluster misses no session and fails no attempt.

The cluster is separate processes on PostgreSQL and Redis (tests/fault/_cluster.py): API
(gunicorn), scheduler, executor and agents. While a workflow scheduled ``@every 10s`` and
a manual workflow of sequential tasks run, each agent is replaced by a new one and then
stopped with SIGTERM in the middle of a task (one with a long grace, which lets the task
finish; one with a short grace, which gives the task back to run elsewhere); then the next
release's migration runs (the schema's revision becomes one this code does not know, as
when a newer release migrated it additively), and the scheduler and the executor are
replaced on it, the executor while a task runs. Afterwards every attempt
succeeded as the API reports it, and the scheduled sessions are one per scheduled time,
none missing and none twice, from the first to well after the last replacement.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.e2e._scheduling import stored_sessions
from tests.fault._cluster import Cluster, LedgerEntry, Service, session_of, workflow_text
from tests.support.waiting import wait_until
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.archive import pack_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

ADMIN_TOKEN = "rolling-admin-token"
NEXT_RELEASE = "9999_next_release"
"""The schema revision the next release's migration leaves (unknown to this code)."""
PROJECT = "rolling"
SCHEDULED = "tick"
MANUAL = "steps"
INTERVAL_SECONDS = 10
TASK_SECONDS = 3
MANUAL_STEPS = 8
SESSIONS_AFTER_UPGRADE = 3
"""Scheduled times the cluster keeps running for once every service has been replaced."""
LONG_GRACE_SECONDS = 20.0
"""Longer than a task: the agent finishes its running task before it exits."""
SHORT_GRACE_SECONDS = 1.0
"""Shorter than a task: the agent gives its running task back before it exits."""
BUSY_TIMEOUT_SECONDS = 45.0
"""How long an agent may wait to be given a task (a scheduled one comes every
``INTERVAL_SECONDS``, manual steps one after the other, each to one of the agents)."""
EXIT_TIMEOUT_SECONDS = TASK_SECONDS + 12.0
"""How long a process sent SIGTERM may take to exit (an agent first ends its task)."""
TAKEOVER_TIMEOUT_SECONDS = 10.0
SETTLE_TIMEOUT_SECONDS = SESSIONS_AFTER_UPGRADE * INTERVAL_SECONDS + 40.0
DONE_STATES = frozenset({"success", "error", "killed", "canceled"})


def write_project(directory: Path, cluster: Cluster) -> Path:
    """The project's files: ``tick`` (scheduled) and ``steps`` (manual), each task noting
    its start and end in the cluster's ledger; a scheduled run notes ``tick-<task id>``."""
    directory.mkdir(parents=True, exist_ok=True)
    tick = cluster.ledger.task("tick-$TICKWORK_TASK_ID", sleep_seconds=TASK_SECONDS)
    schedule = f'schedule:\n  cron>: "@every {INTERVAL_SECONDS}s"\n'
    (directory / f"{SCHEDULED}.dig").write_text(schedule + workflow_text({"tick": tick}))
    steps = {
        f"step{n}": cluster.ledger.task(f"step{n}", sleep_seconds=TASK_SECONDS)
        for n in range(1, MANUAL_STEPS + 1)
    }
    (directory / f"{MANUAL}.dig").write_text(workflow_text(steps))
    return directory


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    """A client of the cluster's API process (gunicorn), started here, with an admin token."""
    port = cluster.start_api(f"admin:{ADMIN_TOKEN}").metrics_port
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=10.0,
    ) as client:
        yield client


def running_task(cluster: Cluster, agent: Service, skipped: int) -> LedgerEntry | None:
    """A task run that started (after the first ``skipped`` starts in the ledger) and has
    not ended, whose shell is in ``agent``'s session."""
    ended = {(entry.task, entry.token) for entry in cluster.ledger.ends()}
    for start in cluster.ledger.starts()[skipped:]:
        if (start.task, start.token) not in ended and session_of(start.pid) == agent.pid:
            return start
    return None


def wait_until_busy(cluster: Cluster, *agents: Service) -> LedgerEntry:
    """Wait until one of ``agents`` starts a task; that run's ledger entry.

    Only a run that starts from now on counts, so that the task still has nearly all of
    its ``TASK_SECONDS`` to go when this returns.
    """
    skipped = len(cluster.ledger.starts())
    found: list[LedgerEntry] = []

    def busy() -> bool:
        runs = (running_task(cluster, agent, skipped) for agent in agents)
        found.extend(run for run in runs if run is not None)
        return bool(found)

    names = " or ".join(agent.name for agent in agents)
    try:
        wait_until(f"{names} starts a task", busy, BUSY_TIMEOUT_SECONDS, poll=0.02)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.explain()}") from None
    return found[0]


def terminate(cluster: Cluster, service: Service) -> int:
    """SIGTERM ``service`` and wait for it to exit; its exit code."""
    service.process.send_signal(signal.SIGTERM)
    try:
        return service.wait_exit(EXIT_TIMEOUT_SECONDS)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.explain()}") from None


def replace_agent(cluster: Cluster, old: str, new: str) -> tuple[LedgerEntry, int]:
    """Start agent ``new``, then SIGTERM ``old`` while it runs a task: that task's run and
    ``old``'s exit code."""
    cluster.start_agent(new, grace_seconds=LONG_GRACE_SECONDS)
    leaving = cluster.agent(old)
    running = wait_until_busy(cluster, leaving)
    return running, terminate(cluster, leaving)


def replace_executor(cluster: Cluster, agents: list[str]) -> int:
    """Start a standby executor, SIGTERM the active one while one of ``agents`` runs a
    task, wait for the standby to take over; the old one's exit code."""
    old = cluster.executor
    new = cluster.start_executor()
    wait_until_busy(cluster, *(cluster.agent(name) for name in agents))
    exit_code = terminate(cluster, old)
    wait_until(
        f"{new.name} is the active executor",
        lambda: new.metric("tickwork_executor_active") == 1,
        TAKEOVER_TIMEOUT_SECONDS,
        poll=0.2,
    )
    return exit_code


def wait_for_attempt_end(api: httpx.Client, attempt_id: str, cluster: Cluster) -> str:
    """Wait until the attempt is done, as the API reports it; its state."""
    states: list[str] = []

    def done() -> bool:
        states.append(api.get(f"/api/attempts/{attempt_id}").json()["state"])
        return states[-1] in DONE_STATES

    try:
        wait_until(f"attempt {attempt_id} ends", done, SETTLE_TIMEOUT_SECONDS, poll=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc} (still {states[-1]})\n{cluster.explain()}") from None
    return states[-1]


def scheduled_sessions(api: httpx.Client) -> list[dict[str, Any]]:
    """The scheduled workflow's sessions as the API lists them, oldest first."""
    params = {"project": PROJECT, "workflow": SCHEDULED, "limit": "1000"}
    page = api.get("/api/sessions", params=params)
    assert page.status_code == 200, page.text
    assert page.json()["next_cursor"] is None, "more sessions than one page holds"
    return list(reversed(page.json()["items"]))


def session_time(session: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(session["session_time"]).astimezone(UTC)


def wait_for_sessions_through(
    api: httpx.Client, last: datetime, cluster: Cluster
) -> list[dict[str, Any]]:
    """Wait until the session at ``last`` exists and every one up to it is done; those."""
    found: list[dict[str, Any]] = []

    def settled() -> bool:
        found[:] = [s for s in scheduled_sessions(api) if session_time(s) <= last]
        return (
            bool(found)
            and session_time(found[-1]) == last
            and all(s["last_attempt"] and s["last_attempt"]["state"] in DONE_STATES for s in found)
        )

    try:
        wait_until(f"sessions through {last} end", settled, SETTLE_TIMEOUT_SECONDS, poll=0.5)
    except AssertionError as exc:
        times = [f"{session_time(s):%H:%M:%S}" for s in found]
        raise AssertionError(f"{exc}: {times}\n{cluster.explain()}") from None
    return found


def next_scheduled_time(instant: datetime) -> datetime:
    """The first multiple of the interval after the Unix epoch strictly after ``instant``."""
    seconds = int(instant.timestamp()) // INTERVAL_SECONDS * INTERVAL_SECONDS + INTERVAL_SECONDS
    return datetime.fromtimestamp(seconds, UTC)


def test_a_rolling_upgrade_of_every_service_misses_no_session_and_fails_no_attempt(
    cluster: Cluster, api: httpx.Client
) -> None:
    # Given a cluster of separate processes: API, scheduler s1, executor, agents a1 and a2
    # (a1 lets a running task finish when stopped, a2 gives it back)
    cluster.start_scheduler("s1")
    cluster.start_executor()
    cluster.start_agent("a1", grace_seconds=LONG_GRACE_SECONDS)
    cluster.start_agent("a2", grace_seconds=SHORT_GRACE_SECONDS)
    # and a project pushed over REST: a workflow scheduled every 10 s and a manual one
    source = write_project(cluster.root / "source", cluster)
    pushed_from = utc_now()
    pushed = api.put(
        f"/api/projects/{PROJECT}",
        params={"revision": "v1"},
        content=pack_project(source),
        headers={"Content-Type": "application/gzip"},
    )
    pushed_until = utc_now()
    assert pushed.status_code == 201, pushed.text
    assert pushed.json()["schedules"]["added"] == [SCHEDULED], pushed.text
    # and the manual workflow started by hand
    started = api.post("/api/attempts", json={"project": PROJECT, "workflow": MANUAL})
    assert started.status_code == 201, started.text
    manual_id = started.json()["id"]

    # When each agent is replaced: a new one starts, the old one is stopped mid-task
    finished, a1_exit = replace_agent(cluster, "a1", "a3")
    given_back, a2_exit = replace_agent(cluster, "a2", "a4")
    # and the next release's migration job has run: an additive migration, whose revision
    # the running code does not know (the services started from here must accept it)
    with cluster.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": NEXT_RELEASE})
    # and the scheduler is replaced
    cluster.start_scheduler("s2")
    s1_exit = terminate(cluster, cluster.services["s1"])
    # and the executor is replaced while a task runs
    executor_exit = replace_executor(cluster, ["a3", "a4"])
    upgraded_at = utc_now()
    # and the cluster keeps running for several more scheduled times
    last = next_scheduled_time(upgraded_at) + timedelta(
        seconds=INTERVAL_SECONDS * (SESSIONS_AFTER_UPGRADE - 1)
    )
    sessions = wait_for_sessions_through(api, last, cluster)
    manual_state = wait_for_attempt_end(api, manual_id, cluster)

    # Then every stopped process exited 0
    exits = {"a1": a1_exit, "a2": a2_exit, "s1": s1_exit, "executor-1": executor_exit}
    assert exits == dict.fromkeys(exits, 0), cluster.explain()
    # and no process failed along the way
    failed = sorted({s.name for s in cluster.services.values() if "Traceback" in s.log()})
    assert not failed, f"tracebacks in the logs of {failed}\n{cluster.explain()}"
    # and a1 finished its running task, a2 gave its task back to run again elsewhere
    ends = {(entry.task, entry.token) for entry in cluster.ledger.ends()}
    assert (finished.task, finished.token) in ends, cluster.explain()
    assert (given_back.task, given_back.token) not in ends, cluster.explain()
    assert (given_back.task, given_back.token + 1) in ends, cluster.explain()
    # and the manual attempt succeeded
    assert manual_state == "success", cluster.explain(int(manual_id))
    # and so did every scheduled session's attempt
    for session in sessions:
        attempt = session["last_attempt"]
        assert attempt["state"] == "success", cluster.explain(int(attempt["id"]))
    # and the scheduled sessions are one per scheduled time from the push on: no gap, none twice
    times = [session_time(s) for s in sessions]
    explained = f"{[f'{t:%H:%M:%S}' for t in times]}\n{cluster.explain()}"
    step = timedelta(seconds=INTERVAL_SECONDS)
    assert pushed_from < times[0] <= pushed_until + step, explained
    assert times == [times[0] + n * step for n in range(len(times))], explained
    assert times[-1] == last, explained
    # and the store holds exactly one attempt for each of them
    stored = stored_sessions(cluster.database_url, PROJECT)[SCHEDULED]
    stored_times = [s.session_time for s in stored if s.session_time <= last]
    assert stored_times == times, stored
    assert all(len(s.attempt_states) == 1 for s in stored), stored
