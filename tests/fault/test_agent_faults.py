"""Agents that die, freeze, lose pool workers or are told to stop while a task runs.

Each test runs a real cluster (tests/fault/_cluster.py): one ``tickwork executor`` with the
test's PostgreSQL database, and ``tickwork agent`` processes that reach only the test's
Redis keyspace, with leases of 3 s renewed every second and a reaper every second. Every
process has its own session, so a test signals an agent's whole process group (main process
and pool workers) with one ``os.killpg``; operator commands lead process groups of their own
and are not reached by it. Task commands append ``start``/``end`` lines with their lease
token and pids to a ledger file, so a test can tell which run of a task did what, and
check that against the stored task row and the executor's metrics. Every wait is bounded;
on the way out every process the test started (and anything they started) is killed.
"""

from __future__ import annotations

import json
import time

import pytest
from redis import Redis

from tests.fault._cluster import (
    LEASE_TTL_SECONDS,
    MAX_LOST_LEASES,
    STOP_TIMEOUT_SECONDS,
    WORKER,
    Cluster,
    workflow_text,
)
from tests.support.waiting import wait_until
from tickwork.services.executor.recovery import TAKEN_OFF_QUEUE_SECONDS
from tickwork.shared.dispatch.messages import DEFAULT_QUEUE
from tickwork.shared.domain.states import TaskState

pytestmark = [pytest.mark.slow]

FIRST_START_SECONDS = 20.0
"""How long a submitted task may take to start on an idle agent (services just started)."""
PAUSE_SECONDS = 5.0
"""How long a frozen agent stays stopped: past its lease TTL of 3 s."""
KILLED_TASK_SECONDS = 8.0
"""How long the task of the agent that is killed runs: past the second agent's start."""
FROZEN_TASK_SECONDS = 3.0
"""How long the frozen agent's task runs: it ends while the agent is stopped."""
assert FROZEN_TASK_SECONDS < PAUSE_SECONDS
assert PAUSE_SECONDS > LEASE_TTL_SECONDS


@pytest.mark.timeout(60)
def test_a_task_whose_agent_is_killed_mid_run_finishes_on_another_agent_with_one_result(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    # Long enough to be still running when agent-a is killed, even if agent-b takes
    # seconds to start on a loaded machine.
    work = cluster.ledger.task("work", sleep_seconds=KILLED_TASK_SECONDS)
    attempt = cluster.submit("killed_agent", workflow_text({"work": work}))
    first = cluster.wait_for_start("work", FIRST_START_SECONDS)
    # The second agent starts only now, so the first run was agent-a's.
    cluster.start_agent("agent-b")

    assert not cluster.ledger.ends("work"), f"ended before the kill\n{cluster.explain(attempt)}"
    cluster.kill_agent("agent-a")
    cluster.agent("agent-a").wait_exit(STOP_TIMEOUT_SECONDS)

    state = cluster.wait_for_attempt_end(attempt, 40)
    explained = cluster.explain(attempt)
    assert state == "success", explained
    task = cluster.task(attempt, "work")
    assert task.state is TaskState.SUCCESS, explained
    assert task.lease_token > first.token, f"never requeued after agent-a died\n{explained}"
    ends = cluster.ledger.ends("work")
    assert [end.token for end in ends] == [task.lease_token], (
        f"expected exactly one end, under the final token {task.lease_token}\n{explained}"
    )
    assert cluster.applied_results(attempt, "work") == [task.lease_token], explained


@pytest.mark.timeout(60)
def test_an_agent_frozen_past_its_lease_loses_the_task_and_its_late_result_is_not_applied(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    # Short: the command (its own process group, not stopped) ends while agent-a is frozen,
    # so agent-a has a result to report when it wakes up.
    work = cluster.ledger.task("work", sleep_seconds=FROZEN_TASK_SECONDS)
    attempt = cluster.submit("frozen_agent", workflow_text({"work": work}))
    first = cluster.wait_for_start("work", FIRST_START_SECONDS)
    # Freeze it once the executor knows that agent-a runs the task (its start was applied).
    try:
        wait_until(
            "the executor marks the task running",
            lambda: cluster.task(attempt, "work").state is TaskState.RUNNING,
            FROZEN_TASK_SECONDS - 1,
            poll=0.01,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.explain(attempt)}") from None
    cluster.pause_agent("agent-a")
    paused_at = time.monotonic()
    cluster.start_agent("agent-b")

    wait_until(
        "the executor requeues the frozen agent's task under a newer token",
        lambda: cluster.task(attempt, "work").lease_token > first.token,
        15,
    )
    wait_until(
        "the frozen agent's command ends on its own",
        lambda: first.token in {end.token for end in cluster.ledger.ends("work")},
        5,
    )
    time.sleep(max(0.0, PAUSE_SECONDS - (time.monotonic() - paused_at)))
    stale_before = cluster.executor.metric("tickwork_stale_results_total")
    cluster.resume_agent("agent-a")

    state = cluster.wait_for_attempt_end(attempt, 30)
    assert state == "success", cluster.explain(attempt)
    # On waking, agent-a reports the result of its command (which ended while it was
    # stopped; its heartbeat, which finds the lease gone, stops only a command still
    # running): the executor refuses it, as its token is no longer the task's.
    try:
        wait_until(
            "the woken agent's result is refused",
            lambda: cluster.executor.metric("tickwork_stale_results_total") > stale_before,
            15,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.explain(attempt)}") from None
    task = cluster.task(attempt, "work")
    explained = cluster.explain(attempt)
    assert task.state is TaskState.SUCCESS, explained
    assert task.lease_token > first.token, explained
    assert {end.token for end in cluster.ledger.ends("work")} == {first.token, task.lease_token}
    assert cluster.applied_results(attempt, "work") == [task.lease_token], explained


@pytest.mark.timeout(60)
def test_a_task_that_kills_its_worker_process_every_time_fails_after_three_lost_agents(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    agent = cluster.start_agent("agent-a", concurrency=2)
    # The ledger notes the pool worker process running the task, not the agent itself.
    poison = f"{cluster.ledger.note('start', 'poison')} && kill -9 {WORKER} && sleep 1"
    sibling = cluster.ledger.task("sibling")
    text = workflow_text({"poison": poison, "sibling": sibling}, parallel=True)
    attempt = cluster.submit("poisoned", text)

    state = cluster.wait_for_attempt_end(attempt, 45)
    explained = cluster.explain(attempt)
    assert state == "error", explained
    poison_task = cluster.task(attempt, "poison")
    assert poison_task.state is TaskState.ERROR, explained
    assert f"lost its agent {MAX_LOST_LEASES} times" in json.dumps(poison_task.error), explained
    assert cluster.task(attempt, "sibling").state is TaskState.SUCCESS, explained
    assert len(cluster.ledger.ends("sibling")) == 1, explained
    starts = cluster.ledger.starts("poison")
    assert len(starts) == MAX_LOST_LEASES, explained
    assert len({start.token for start in starts}) == MAX_LOST_LEASES, explained
    # Only pool workers died: the agent's main process lived through all three.
    assert all(start.worker != agent.pid for start in starts), explained
    assert agent.is_alive(), explained


@pytest.mark.timeout(60)
def test_an_agent_sent_sigterm_finishes_its_running_task_then_exits_0(cluster: Cluster) -> None:
    cluster.start_executor()
    agent = cluster.start_agent("agent-a", grace_seconds=20)
    work = cluster.ledger.task("work", sleep_seconds=3)
    attempt = cluster.submit("graceful", workflow_text({"work": work}))
    first = cluster.wait_for_start("work", FIRST_START_SECONDS)

    cluster.stop_agent("agent-a")

    # No other agent exists: the attempt can only succeed if agent-a's run is applied.
    state = cluster.wait_for_attempt_end(attempt, 20)
    explained = cluster.explain(attempt)
    assert state == "success", explained
    task = cluster.task(attempt, "work")
    assert task.state is TaskState.SUCCESS, explained
    assert task.lease_token == first.token, explained
    assert [end.token for end in cluster.ledger.ends("work")] == [first.token], explained
    assert cluster.applied_results(attempt, "work") == [task.lease_token], explained
    assert agent.wait_exit(15) == 0, cluster.explain(attempt)


@pytest.mark.timeout(60)
def test_an_agent_whose_grace_runs_out_gives_its_task_back_to_run_elsewhere_at_once(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    leaving = cluster.start_agent("agent-a", grace_seconds=1)
    work = cluster.ledger.task("work", sleep_seconds=8)
    quick = cluster.ledger.task("quick")
    attempt = cluster.submit("handed_back", workflow_text({"work": work, "after": quick}))
    first = cluster.wait_for_start("work", FIRST_START_SECONDS)
    cluster.start_agent("agent-b")

    stopped_at = time.monotonic()
    cluster.stop_agent("agent-a")

    assert leaving.wait_exit(15) == 0, cluster.explain(attempt)
    # Given back, not lost: requeued under the next token at once, without waiting for
    # the lease to expire and without counting a lost agent.
    second = cluster.wait_for_start("work", 10, count=2)
    assert second.token == first.token + 1, cluster.explain(attempt)
    assert time.monotonic() - stopped_at < 1 + LEASE_TTL_SECONDS, cluster.explain(attempt)
    assert cluster.wait_for_attempt_end(attempt, 30) == "success", cluster.explain(attempt)
    task = cluster.task(attempt, "work")
    assert (task.lease_token, task.lost_count) == (second.token, 0), cluster.explain(attempt)
    assert [end.token for end in cluster.ledger.ends("work")] == [second.token]


@pytest.mark.timeout(90)
def test_a_message_an_agent_took_and_died_with_before_starting_it_is_sent_again(
    cluster: Cluster,
) -> None:
    # Given a task published while no agent runs
    cluster.start_executor()
    work = cluster.ledger.task("work")
    attempt = cluster.submit("taken_and_lost", workflow_text({"work": work}))
    queue = f"{cluster.redis_prefix}{DEFAULT_QUEUE}"
    client = Redis.from_url(cluster.redis_url)
    try:
        wait_until("the message is queued", lambda: client.llen(queue) == 1, FIRST_START_SECONDS)
        # When an agent takes it off the queue and dies before taking its lease (Celery's
        # worker holds it, or loses it on the way: either way it never comes back)
        assert client.rpop(queue) is not None
    finally:
        client.close()
    cluster.start_agent("agent-a")

    # Then the reaper sends it again once its queue stayed empty, under the same token,
    # and it runs once
    state = cluster.wait_for_attempt_end(attempt, TAKEN_OFF_QUEUE_SECONDS + 40)
    explained = cluster.explain(attempt)
    assert state == "success", explained
    assert [start.token for start in cluster.ledger.starts("work")] == [1], explained
    assert cluster.applied_results(attempt, "work") == [1], explained
