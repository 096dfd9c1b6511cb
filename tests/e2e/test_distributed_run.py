"""The distributed mode when nothing goes wrong: real executors and agents as OS processes.

The cluster harness of the fault tests (tests/fault/_cluster.py) starts the services:
`tickwork run --on-executor` (the by-hand flow of the README), `_queue` routing, a
standby executor taking over, and the agents' metrics summed over their processes.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
import sqlalchemy as sa

from services.executor.service import LOCK_KEY, STANDBY_POLL_SECONDS
from tests.fault._cluster import Cluster, literal, session_of, workflow_text
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(60)
def test_a_run_on_the_executor_is_run_by_an_agent_and_followed_to_its_end(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    text = workflow_text(
        {"first": cluster.ledger.task("first"), "second": cluster.ledger.task("second")}
    )
    (cluster.project_dir / "handed.dig").write_text(text)

    done = cluster.tickwork("run", str(cluster.project_dir / "handed.dig"), "--on-executor", "-q")

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{cluster.explain()}"
    assert ": success" in done.stdout
    assert [e.task for e in cluster.ledger.ends()] == ["first", "second"]
    # The agent's pool worker ran them, not the command: each once, under the first token.
    assert {e.token for e in cluster.ledger.ends()} == {1}
    agent = cluster.agent("agent-a").pid
    assert {session_of(e.worker) for e in cluster.ledger.ends()} == {agent}


def test_on_executor_refuses_a_store_that_is_not_postgresql(cluster: Cluster) -> None:
    (cluster.project_dir / "wf.dig").write_text("+a:\n  echo>: a\n")
    done = cluster.tickwork(
        "run",
        str(cluster.project_dir / "wf.dig"),
        "--on-executor",
        env={"TICKWORK_DATABASE_URL": ""},
    )
    assert done.returncode == 2
    assert "--on-executor needs TICKWORK_DATABASE_URL" in done.stderr
    assert not (cluster.project_dir / ".tickwork").exists()


@pytest.mark.timeout(60)
def test_a_task_with_a_queue_runs_only_on_the_agents_serving_that_queue(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    plain_agent = cluster.start_agent("agent-default")
    gpu_agent = cluster.start_agent("agent-gpu", queues="gpu")
    text = (
        "_parallel: true\n"
        f"+plain:\n  sh>: {json.dumps(literal(cluster.ledger.task('plain')))}\n"
        f"+routed:\n  _queue: gpu\n  sh>: {json.dumps(literal(cluster.ledger.task('routed')))}\n"
    )
    attempt = cluster.submit("routing", text)
    assert cluster.wait_for_attempt_end(attempt, 40) == "success", cluster.explain(attempt)
    ran_on = {e.task: session_of(e.worker) for e in cluster.ledger.ends()}
    assert ran_on == {"plain": plain_agent.pid, "routed": gpu_agent.pid}, cluster.explain(attempt)


@pytest.mark.timeout(60)
def test_a_standby_executor_takes_over_when_the_active_one_dies(cluster: Cluster) -> None:
    first = cluster.start_executor()
    wait_until("one executor is active", lambda: first.metric("tickwork_executor_active") == 1, 10)
    with cluster.engine.connect() as conn:
        # pg_locks shows the whole server: other tests' executors hold the same key elsewhere.
        held = (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :key"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        assert conn.execute(sa.text(held), {"key": LOCK_KEY}).scalar_one() == 1
    second = cluster.start_executor()
    time.sleep(2 * STANDBY_POLL_SECONDS)  # it tried for the lock, at least once
    assert second.metric("tickwork_executor_active") == 0  # it stands by
    cluster.start_agent("agent-a")

    first.signal_group(signal.SIGKILL)
    first.wait_exit(10)
    attempt = cluster.submit("after_failover", workflow_text({"t": cluster.ledger.task("t")}))

    assert cluster.wait_for_attempt_end(attempt, 30) == "success", cluster.explain(attempt)
    assert second.metric("tickwork_executor_active") == 1
    assert [e.token for e in cluster.ledger.ends("t")] == [1]


@pytest.mark.timeout(60)
def test_an_agent_counts_its_runs_over_all_its_worker_processes(cluster: Cluster) -> None:
    cluster.start_executor()
    agent = cluster.start_agent("agent-a", concurrency=2)
    tasks = {f"t{i}": cluster.ledger.task(f"t{i}") for i in range(4)}
    attempt = cluster.submit("counted", workflow_text(tasks, parallel=True))
    assert cluster.wait_for_attempt_end(attempt, 30) == "success", cluster.explain(attempt)
    assert agent.metric("tickwork_agent_tasks_total", outcome="success") == 4
    assert agent.metric("tickwork_dispatch_start_latency_seconds_count") == 4
    assert cluster.executor.metric("tickwork_tasks_dispatched_total") == 4


def test_an_executor_that_cannot_reach_redis_says_so_in_one_line(cluster: Cluster) -> None:
    done = cluster.tickwork("executor", "--redis-url", "redis://:secret@127.0.0.1:1/0")
    assert done.returncode == 5, done.stderr  # a server out of reach, not invalid input
    assert "Traceback" not in done.stderr and "secret" not in done.stderr
    last = done.stderr.splitlines()[-1]  # after the service's own INFO log lines
    assert last.startswith("error: cannot use Redis at redis://:***@127.0.0.1:1/0: "), last


def test_an_agent_refuses_a_redis_url_that_is_not_one(cluster: Cluster) -> None:
    done = cluster.tickwork("agent", "--redis-url", "localhost:6379")
    assert done.returncode == 2
    assert "Invalid value for '--redis-url': expected a redis://" in done.stderr
