"""Specifications of the executor's recovery: the reaper, released tasks, fencing and kills.

The agent stub plays Redis too: ``run.agent.leases`` is what the reaper reads from the
lease keys (a task absent from it has no lease at all).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from tests.executor.scenario import Scenario, finished
from tickwork.services.executor.loop import Recovery
from tickwork.services.executor.recovery import TAKEN_OFF_QUEUE_SECONDS
from tickwork.shared.dispatch.leases import CANCELED, DONE, QUEUED, Lease, LeaseState
from tickwork.shared.dispatch.messages import TaskMessage, TaskReleased, TaskStarted
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store import sessions as session_store

ONE_TASK = """
    +a:
      echo>: a
"""
TWO_THEN_ONE = """
    _parallel: true
    +a:
      echo>: a
    +b:
      echo>: b
    +c:
      _after: [+a]
      echo>: c
"""


def request_kill(run: Scenario) -> AttemptState:
    """Ask for the scenario's attempt to be killed, as the API does; its state then."""
    with run.engine.begin() as conn:
        return session_store.request_kill(conn, run.attempt_id, run.clock.now())


@pytest.fixture
def reaping(run: Scenario) -> Scenario:
    """A scenario whose executor runs the reaper on every pass after 2 quiet seconds."""
    run.executor.recovery = Recovery(every_seconds=0.001, grace_seconds=2, max_lost=3)
    run.agent.leases = {}
    return run


def taken(run: Scenario, name: str, owner: str = "agent-1") -> Lease:
    """An agent took the task's lease (and has not said so yet)."""
    message = run.open[name]
    lease = Lease(message.task_id, message.lease_token, owner)
    assert run.agent.leases is not None
    run.agent.leases[message.task_id] = lease
    run.agent.taken[message.task_id] = message.lease_token
    return lease


def marked_queued(run: Scenario, message: TaskMessage) -> None:
    """The executor's confirmed ``queued`` mark on the message's token."""
    assert run.agent.leases is not None
    run.agent.leases[message.task_id] = Lease(message.task_id, message.lease_token, QUEUED)


def started(run: Scenario, name: str, owner: str = "agent-1") -> Lease:
    """An agent took the task's lease and said so."""
    message = run.open[name]
    lease = taken(run, name, owner)
    run.agent.report(TaskStarted(message.task_id, message.lease_token, time.time()))
    run.step()
    return lease


class TestLostMessages:
    def test_a_queued_task_without_a_lease_or_mark_is_published_again_under_its_token(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        (first,) = [reaping.open[n] for n in reaping.step()]
        # Redis restarted empty: no queued mark, no message.
        assert reaping.tick(after_seconds=3) == ["+wf+a"]
        (again,) = reaping.messages_for("+wf+a")[1:]
        assert again.lease_token == first.lease_token
        assert reaping.report.republished == 1
        assert reaping.task("+wf+a").state is TaskState.QUEUED

    def test_a_queued_task_with_its_queued_mark_is_left_alone(self, reaping: Scenario) -> None:
        reaping.start(ONE_TASK)
        (message,) = [reaping.open[n] for n in reaping.step()]
        marked_queued(reaping, message)
        assert reaping.step(after_seconds=60) == []

    def test_a_message_an_agent_took_off_its_queue_and_never_started_is_sent_again(
        self, reaping: Scenario
    ) -> None:
        # An agent took the message off the queue and died before taking the lease: its
        # confirmed queued mark stays, and the queue is empty.
        reaping.start(ONE_TASK)
        (first,) = [reaping.open[n] for n in reaping.step()]
        marked_queued(reaping, first)
        reaping.agent.off_queue.add(first.task_id)
        assert reaping.step(after_seconds=3) == []  # first seen off its queue
        assert reaping.step(after_seconds=TAKEN_OFF_QUEUE_SECONDS - 1) == []
        assert reaping.tick(after_seconds=2) == ["+wf+a"]
        (again,) = reaping.messages_for("+wf+a")[1:]
        assert again.lease_token == first.lease_token
        assert reaping.report.republished == 1

    def test_a_message_off_its_queue_is_left_alone_while_its_queue_holds_others(
        self, reaping: Scenario
    ) -> None:
        # A backlog on the queue: the message may be among those waiting.
        reaping.start(TWO_THEN_ONE)
        opened = [reaping.open[n] for n in reaping.step()]
        for message in opened:
            marked_queued(reaping, message)
        reaping.agent.off_queue.add(opened[0].task_id)
        assert reaping.step(after_seconds=3) == []
        assert reaping.step(after_seconds=TAKEN_OFF_QUEUE_SECONDS * 3) == []

    def test_a_queued_mark_never_confirmed_is_published_again_after_the_grace(
        self, reaping: Scenario
    ) -> None:
        # The executor that published it died between leaving the mark and sending.
        reaping.start(ONE_TASK)
        (first,) = [reaping.open[n] for n in reaping.step()]
        marked_queued(reaping, first)
        reaping.agent.unconfirmed.add(first.task_id)
        assert reaping.step(after_seconds=1) == []
        assert reaping.tick(after_seconds=3) == ["+wf+a"]
        (again,) = reaping.messages_for("+wf+a")[1:]
        assert again.lease_token == first.lease_token
        assert reaping.report.republished == 1

    def test_a_task_is_not_published_again_before_the_grace_has_passed(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        assert reaping.step(after_seconds=1) == []


class TestWhatTheReaperReads:
    def test_it_asks_redis_only_about_tasks_unchanged_for_its_grace(
        self, reaping: Scenario
    ) -> None:
        # Given two in-flight tasks, one of which changed a second ago
        reaping.start("""
            +fan:
              _parallel: true
              +a:
                echo>: a
              +b:
                echo>: b
        """)
        reaping.step()
        asked: list[list[int]] = []
        lease_states = reaping.agent.lease_states

        def recorded(task_ids: Sequence[int]) -> dict[int, LeaseState] | None:
            asked.append(list(task_ids))
            return lease_states(task_ids)

        reaping.agent.lease_states = recorded  # type: ignore[method-assign]
        reaping.clock.advance(1.5)
        started(reaping, "+wf+fan+b")  # b is RUNNING since now
        # When the reaper looks 1 second later (a's message went out 2.5 seconds ago)
        reaping.tick(after_seconds=1)
        # Then only a was a candidate
        a = reaping.task("+wf+fan+a").id
        assert asked[-1] == [a]


class TestLostAgents:
    def test_a_running_task_whose_lease_expired_is_requeued_under_a_new_token(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        lease = started(reaping, "+wf+a")
        assert reaping.task("+wf+a").state is TaskState.RUNNING
        assert reaping.agent.leases is not None
        del reaping.agent.leases[lease.task_id]  # the agent died; its lease expired
        assert reaping.tick(after_seconds=3) == ["+wf+a"]
        task = reaping.task("+wf+a")
        assert (task.state, task.lease_token, task.lost_count) == (TaskState.QUEUED, 2, 1)
        assert task.retry_count == 0  # not a retry of the user's _retry budget
        assert reaping.report.leases_lost == 1

    def test_a_result_that_outlived_its_lease_is_applied_while_no_newer_token_was_issued(
        self, reaping: Scenario
    ) -> None:
        # Given Redis lost the lease of a running task (it restarted empty)
        reaping.start(ONE_TASK)
        reaping.step()
        message = reaping.open["+wf+a"]
        lease = started(reaping, "+wf+a")
        assert reaping.agent.leases is not None
        del reaping.agent.leases[lease.task_id]
        # When its agent sends the result again before the reaper gave the task a new token
        reaping.agent.report(finished(message))
        # Then the result is applied, and the task never runs again
        assert reaping.step(after_seconds=3) == []
        assert reaping.task("+wf+a").state is TaskState.SUCCESS
        assert reaping.report.leases_lost == 0
        assert reaping.messages_for("+wf+a") == [message]

    def test_the_dead_agents_late_result_is_refused_and_the_new_one_applies_once(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        old = reaping.open["+wf+a"]
        lease = started(reaping, "+wf+a")
        assert reaping.agent.leases is not None
        del reaping.agent.leases[lease.task_id]
        reaping.step(after_seconds=3)
        reaping.agent.report(finished(old))  # the stalled agent wakes up and reports
        reaping.tick()
        assert reaping.report.stale_results == 1
        assert reaping.task("+wf+a").state is TaskState.QUEUED
        reaping.succeed("+wf+a")
        reaping.step()
        assert reaping.attempt_state() is AttemptState.SUCCESS

    def test_a_task_that_lost_its_agent_max_lost_times_fails_with_that_error(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        assert reaping.agent.leases is not None
        for _ in range(3):
            lease = started(reaping, "+wf+a")
            del reaping.agent.leases[lease.task_id]
            reaping.open.pop("+wf+a")
            reaping.step(after_seconds=3)
        task = reaping.task("+wf+a")
        assert task.state is TaskState.ERROR
        assert task.error == {"message": "lost its agent 3 times"}
        assert reaping.attempt_state() is AttemptState.ERROR
        assert len(reaping.messages_for("+wf+a")) == 3

    def test_an_agent_that_died_before_its_start_was_reported_counts_as_lost(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        lease = taken(reaping, "+wf+a")  # the agent took the lease, then died at once
        assert reaping.agent.leases is not None
        del reaping.agent.leases[lease.task_id]
        assert reaping.tick(after_seconds=3) == ["+wf+a"]
        task = reaping.task("+wf+a")
        assert (task.state, task.lease_token, task.lost_count) == (TaskState.QUEUED, 2, 1)
        assert reaping.report.republished == 0

    def test_a_running_task_whose_result_is_on_the_way_is_not_requeued(
        self, reaping: Scenario
    ) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        lease = started(reaping, "+wf+a")
        assert reaping.agent.leases is not None
        reaping.agent.leases[lease.task_id] = Lease(lease.task_id, lease.token, DONE)
        assert reaping.step(after_seconds=60) == []
        assert reaping.task("+wf+a").state is TaskState.RUNNING

    def test_without_leases_nothing_is_reaped(self, run: Scenario) -> None:
        run.executor.recovery = Recovery(every_seconds=0.001, grace_seconds=2)
        run.start(ONE_TASK)
        run.step()
        assert run.step(after_seconds=600) == []


class TestReleasedTasks:
    def test_a_task_released_by_a_stopping_agent_is_requeued_at_once_without_counting_a_loss(
        self, run: Scenario
    ) -> None:
        run.start(ONE_TASK)
        run.step()
        message = run.open.pop("+wf+a")
        run.agent.report(
            TaskStarted(message.task_id, message.lease_token, time.time()),
            TaskReleased(message.task_id, message.lease_token, "the agent is shutting down"),
        )
        assert run.step() == ["+wf+a"]
        task = run.task("+wf+a")
        assert (task.state, task.lease_token, task.lost_count) == (TaskState.QUEUED, 2, 0)

    def test_a_stale_release_changes_nothing(self, run: Scenario) -> None:
        run.start(ONE_TASK)
        run.step()
        message = run.open["+wf+a"]
        run.agent.report(TaskReleased(message.task_id, message.lease_token - 1, "old"))
        assert run.step() == []
        assert run.task("+wf+a").lease_token == message.lease_token


class TestKill:
    def test_a_killed_attempt_ends_killed_its_tasks_canceled_and_in_flight_ones_revoked(
        self, run: Scenario
    ) -> None:
        run.start(TWO_THEN_ONE)
        run.step()
        a, b = run.open["+wf+a"], run.open["+wf+b"]
        run.agent.report(TaskStarted(a.task_id, a.lease_token, time.time()))
        run.step()
        assert request_kill(run) is AttemptState.CANCELING
        run.step(after_seconds=1)  # the next rescan (a NOTIFY wakes a distributed executor)
        assert run.attempt_state() is AttemptState.KILLED
        assert set(run.states().values()) == {TaskState.CANCELED}
        assert sorted(run.agent.revoked) == sorted(
            [(a.task_id, a.lease_token), (b.task_id, b.lease_token)]
        )
        assert (run.attempt_id, AttemptState.KILLED) in run.finished_attempts
        # A result that arrives after the kill is refused.
        run.agent.report(finished(a))
        run.tick()
        assert run.report.stale_results == 1
        assert run.task("+wf+a").state is TaskState.CANCELED

    def test_the_runs_of_a_killed_attempt_no_longer_count_as_waiting_for_an_agent(
        self, run: Scenario
    ) -> None:
        # Given two runs queued and never started (no agent took them)
        run.start(TWO_THEN_ONE)
        run.step()
        assert run.executor.scope.runs.waiting == 2
        # When the attempt is killed (its runs will never send a result)
        assert request_kill(run) is AttemptState.CANCELING
        run.step(after_seconds=1)
        assert run.attempt_state() is AttemptState.KILLED
        # Then they are not counted as waiting: results would otherwise wait for others
        assert run.executor.scope.runs.waiting == 0

    def test_killing_an_ended_attempt_changes_nothing(self, run: Scenario) -> None:
        run.start(ONE_TASK)
        assert run.run_to_end() is AttemptState.SUCCESS
        assert request_kill(run) is AttemptState.SUCCESS

    def test_a_canceled_lease_mark_keeps_the_reaper_away(self, reaping: Scenario) -> None:
        reaping.start(ONE_TASK)
        reaping.step()
        message = reaping.open["+wf+a"]
        assert reaping.agent.leases is not None
        reaping.agent.leases[message.task_id] = Lease(
            message.task_id, message.lease_token, CANCELED
        )
        assert reaping.step(after_seconds=60) == []


class TestRouting:
    def test_a_tasks_queue_is_the_queue_of_its_message(self, run: Scenario) -> None:
        run.start("""
            _parallel: true
            +a:
              _queue: gpu
              echo>: a
            +b:
              echo>: b
        """)
        run.step()
        assert (run.open["+wf+a"].queue, run.open["+wf+b"].queue) == ("gpu", "default")
