"""Specifications of ``_delay`` and ``_start_at`` in the executor, one ``tick(now)`` at a time.

The scenario's session time is 2024-05-01T00:00Z and its clock starts at 09:00Z that day.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.executor.scenario import START, Scenario
from tickwork.services.executor.loop import WorkflowExecutor
from tickwork.shared.domain.states import AttemptState, TaskState


class TestDelay:
    def test_a_delayed_task_waits_from_the_time_it_became_ready_then_starts(
        self, run: Scenario
    ) -> None:
        # Given +b waits a minute once +a is done
        run.start("""
            +a:
              echo>: a
            +b:
              _delay: 1m
              echo>: b
        """)
        assert run.step() == ["+wf+a"]

        # When +a ends ten seconds in
        run.succeed("+wf+a")
        assert run.step(10) == []

        # Then +b is delayed until a minute after that, and starts then, not before
        delayed = run.task("+wf+b")
        assert delayed.state is TaskState.DELAYED
        assert delayed.not_before == START + timedelta(seconds=70)
        assert run.step(59.999) == []
        assert run.step(0.001) == ["+wf+b"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_delayed_group_holds_its_children(self, run: Scenario) -> None:
        run.start("""
            +g:
              _delay: 30s
              +a:
                echo>: a
        """)

        assert run.step() == []
        assert run.states() == {
            "+wf": TaskState.PLANNED,
            "+wf+g": TaskState.DELAYED,
            "+wf+g+a": TaskState.BLOCKED,
        }
        assert run.step(30) == ["+wf+g+a"]

    def test_the_executor_wakes_when_a_delay_ends_not_at_its_next_rescan(
        self, run: Scenario
    ) -> None:
        run.start("+a:\n  _delay: 5s\n  echo>: a\n")
        run.step()

        # When a pass runs half a second before the delay ends
        assert run.step(4.5) == []

        # Then the executor sleeps half a second, and the pass then starts the task
        now = run.clock.now()
        assert run.executor.seconds_until_due(now, cap_seconds=10) == pytest.approx(0.5)
        assert run.tick(0.5) == ["+wf+a"]

    def test_a_retry_does_not_wait_for_the_delay_again(self, run: Scenario) -> None:
        run.start("+a:\n  _delay: 1m\n  _retry: 1\n  echo>: a\n")
        assert run.step(0) == []
        assert run.step(60) == ["+wf+a"]

        run.fail("+wf+a")

        assert run.step() == ["+wf+a"]

    def test_the_tasks_of_a_retried_group_wait_for_their_delay_again(self, run: Scenario) -> None:
        run.start("""
            +g:
              _retry: 1
              +a:
                _delay: 10s
                echo>: a
        """)
        assert run.step() == []
        assert run.step(10) == ["+wf+g+a"]

        # When +a fails and the group runs again
        run.fail("+wf+g+a")
        assert run.step() == []

        # Then +a became ready anew, and waits anew
        assert run.task("+wf+g+a").state is TaskState.DELAYED
        assert run.task("+wf+g+a").not_before == START + timedelta(seconds=20)
        assert run.step(10) == ["+wf+g+a"]


class TestStartAt:
    @pytest.mark.parametrize("start_at", ["2024-05-01T08:00:00Z", "'06:00'"])
    def test_a_start_time_in_the_past_does_not_delay(self, run: Scenario, start_at: str) -> None:
        run.start(f"+a:\n  _start_at: {start_at}\n  echo>: a\n")

        assert run.step() == ["+wf+a"]
        assert run.task("+wf+a").not_before == START  # computed, and stored, all the same

    def test_a_wall_time_is_on_the_sessions_date_in_the_workflow_zone(self, run: Scenario) -> None:
        # Given a Tokyo workflow: the session is 09:00 JST, the clock 18:00 JST
        run.start("timezone: Asia/Tokyo\n+a:\n  _start_at: '20:00'\n  echo>: a\n")

        # Then the task waits until 20:00 JST on the session's date
        assert run.step() == []
        assert run.task("+wf+a").not_before == START + timedelta(hours=2)
        assert run.step(2 * 3600) == ["+wf+a"]

    @pytest.mark.parametrize(
        ("delay", "start_at", "wait_minutes"),
        [("1h", "'09:30'", 60), ("10m", "'09:30'", 30)],
    )
    def test_the_later_of_delay_and_start_time_wins(
        self, run: Scenario, delay: str, start_at: str, wait_minutes: int
    ) -> None:
        run.start(f"+a:\n  _delay: {delay}\n  _start_at: {start_at}\n  echo>: a\n")

        assert run.step() == []
        assert run.task("+wf+a").not_before == START + timedelta(minutes=wait_minutes)
        assert run.step(wait_minutes * 60 - 1) == []
        assert run.step(1) == ["+wf+a"]


class TestWorkflowLevel:
    def test_a_workflow_start_time_holds_the_whole_workflow(self, run: Scenario) -> None:
        run.start("""
            _start_at: '10:00'
            +a:
              echo>: a
            +b:
              echo>: b
        """)

        assert run.step() == []
        assert run.states() == {
            "+wf": TaskState.DELAYED,
            "+wf+a": TaskState.BLOCKED,
            "+wf+b": TaskState.BLOCKED,
        }
        assert run.attempt_state() is AttemptState.RUNNING
        assert run.step(3599) == []
        assert run.step(1) == ["+wf+a"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_called_workflows_delay_holds_its_subtree(self, run: Scenario) -> None:
        run.start(
            "+c:\n  call>: sub.dig\n",
            files={"sub.dig": "_delay: 20s\n+s:\n  echo>: s\n"},
        )

        assert run.step() == []
        assert run.task("+wf+c^sub").state is TaskState.DELAYED
        assert run.step(20) == ["+wf+c^sub+s"]


class TestRestart:
    def test_a_fresh_executor_honours_the_stored_time_without_computing_it_again(
        self, run: Scenario
    ) -> None:
        # Given a task delayed a minute by the first executor
        run.start("+a:\n  _delay: 1m\n  echo>: a\n")
        assert run.step() == []
        assert run.task("+wf+a").not_before == START + timedelta(seconds=60)

        # When a new executor takes over half a minute later (a restart)
        run.executor = WorkflowExecutor(run.engine, run.agent, clock=run.clock)
        assert run.step(30) == []

        # Then the task still starts a minute after it became ready, not a minute after
        # the restart
        assert run.task("+wf+a").not_before == START + timedelta(seconds=60)
        assert run.step(29) == []
        assert run.step(1) == ["+wf+a"]
