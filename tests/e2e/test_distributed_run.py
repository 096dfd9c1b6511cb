"""The distributed mode when nothing goes wrong: real executors and agents as OS processes.

The cluster harness of the fault tests (tests/fault/_cluster.py) starts the services:
`tickwork run --on-executor` (the by-hand flow of the README), `_queue` routing, two
executors sharing the partitions out and one taking them all when the other dies, and
the agents' metrics summed over their processes.
"""

from __future__ import annotations

import json
import signal

import pytest
import sqlalchemy as sa

from tests.fault._cluster import Cluster, Service, literal, session_of, workflow_text
from tests.support.waiting import wait_until
from tickwork.services.executor.partitions import MEMBER_KEY

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


PARTITIONS = 16
REBALANCE_BOUND_SECONDS = 5.0
"""How long the executors may take to share the partitions out again (about a second)."""


def partitions_held(*executors: Service) -> list[float]:
    return [e.metric("tickwork_executor_partitions") for e in executors]


@pytest.mark.timeout(60)
def test_a_second_executor_takes_half_of_the_partitions_and_all_once_the_first_dies(
    cluster: Cluster,
) -> None:
    # Given one executor, which holds every partition (and the membership lock, shared)
    first = cluster.start_executor()
    wait_until("the first holds all", lambda: partitions_held(first) == [PARTITIONS], 10)
    with cluster.engine.connect() as conn:
        # pg_locks shows the whole server: other tests' executors hold the same key elsewhere.
        held = (
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :key"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        assert conn.execute(sa.text(held), {"key": MEMBER_KEY}).scalar_one() == 1
    # When a second one starts, both work: half of the partitions each
    second = cluster.start_executor()
    wait_until(
        "each holds half",
        lambda: partitions_held(first, second) == [PARTITIONS / 2, PARTITIONS / 2],
        REBALANCE_BOUND_SECONDS,
    )
    assert first.metric("tickwork_executor_active") == second.metric("tickwork_executor_active")
    cluster.start_agent("agent-a")

    # When the first dies, the second holds them all and runs new work
    first.signal_group(signal.SIGKILL)
    first.wait_exit(10)
    wait_until(
        "the second holds all",
        lambda: partitions_held(second) == [PARTITIONS],
        REBALANCE_BOUND_SECONDS,
    )
    attempts = [
        cluster.submit(
            f"after_failover_{i}", workflow_text({f"t{i}": cluster.ledger.task(f"t{i}")})
        )
        for i in range(4)
    ]

    for attempt in attempts:
        assert cluster.wait_for_attempt_end(attempt, 30) == "success", cluster.explain(attempt)
    assert sorted(e.token for e in cluster.ledger.ends()) == [1, 1, 1, 1]


@pytest.mark.timeout(60)
def test_an_executor_stopped_gives_its_partitions_to_the_other(cluster: Cluster) -> None:
    first = cluster.start_executor()
    second = cluster.start_executor()
    wait_until(
        "each holds half",
        lambda: partitions_held(first, second) == [PARTITIONS / 2, PARTITIONS / 2],
        REBALANCE_BOUND_SECONDS,
    )

    second.process.send_signal(signal.SIGTERM)
    assert second.wait_exit(10) == 0

    wait_until(
        "the first holds all",
        lambda: partitions_held(first) == [PARTITIONS],
        REBALANCE_BOUND_SECONDS,
    )


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
