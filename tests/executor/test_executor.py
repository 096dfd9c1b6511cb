"""Specifications of the workflow executor, driven one ``tick(now)`` at a time.

Each scenario (tests/executor/scenario.py) plays the agent: it decides when each published
message starts and how it ends. Both store backends run every scenario.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from tests.executor.scenario import Scenario, finished
from tests.support.waiting import wait_until
from tickwork.services.executor.loop import WorkflowExecutor
from tickwork.services.executor.metrics import ExecutorMetrics
from tickwork.shared.dispatch.messages import Outcome, TaskStarted
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.dialects import dialect_of as store_dialect
from tickwork.shared.store.engine import create_store_engine


class TestOrdering:
    def test_a_sequential_group_dispatches_one_task_at_a_time_in_order(self, run: Scenario) -> None:
        run.start("""
            +a:
              echo>: a
            +b:
              echo>: b
            +c:
              echo>: c
        """)
        assert run.step() == ["+wf+a"]
        assert run.step() == []
        run.succeed("+wf+a")
        assert run.step() == ["+wf+b"]
        run.succeed("+wf+b")
        assert run.step() == ["+wf+c"]
        run.succeed("+wf+c")
        run.step()
        assert run.attempt_state() is AttemptState.SUCCESS
        assert run.finished_attempts == [(run.attempt_id, AttemptState.SUCCESS)]
        run.assert_every_task_terminal()

    def test_a_parallel_group_dispatches_all_children_at_once(self, run: Scenario) -> None:
        run.start("""
            _parallel: true
            +a:
              echo>: a
            +b:
              echo>: b
            +c:
              echo>: c
        """)
        assert sorted(run.step()) == ["+wf+a", "+wf+b", "+wf+c"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_parallel_limit_is_a_sliding_window_not_waves(self, run: Scenario) -> None:
        run.start("""
            _parallel:
              limit: 2
            +a:
              echo>: a
            +b:
              echo>: b
            +c:
              echo>: c
            +d:
              echo>: d
            +e:
              echo>: e
        """)
        assert run.step() == ["+wf+a", "+wf+b"]
        # When one of the two ends, the next starts in that very pass, beside the other
        run.succeed("+wf+a")
        assert run.tick() == ["+wf+c"]
        assert run.in_flight() == ["+wf+b", "+wf+c"]
        run.succeed("+wf+c")
        assert run.tick() == ["+wf+d"]
        assert run.in_flight() == ["+wf+b", "+wf+d"]
        most = 2
        while run.open:
            run.succeed(sorted(run.open)[0])
            run.step()
            most = max(most, len(run.in_flight()))
        assert most == 2
        assert [m.full_name for m in run.agent.published] == [f"+wf+{n}" for n in "abcde"]
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_after_orders_siblings_of_a_parallel_group(self, run: Scenario) -> None:
        run.start("""
            _parallel: true
            +a:
              echo>: a
            +b:
              _after: a
              echo>: b
            +c:
              echo>: c
            +d:
              _after: [b, c]
              echo>: d
        """)
        assert sorted(run.step()) == ["+wf+a", "+wf+c"]
        run.succeed("+wf+c")
        assert run.step() == []
        run.succeed("+wf+a")
        assert run.step() == ["+wf+b"]
        run.succeed("+wf+b")
        assert run.step() == ["+wf+d"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_background_task_runs_beside_the_previous_one_and_the_next_waits(
        self, run: Scenario
    ) -> None:
        run.start("""
            +a:
              echo>: a
            +b:
              _background: true
              echo>: b
            +c:
              echo>: c
        """)
        assert sorted(run.step()) == ["+wf+a", "+wf+b"]
        run.succeed("+wf+a")
        assert run.step() == []  # +c waits for the background task too
        run.succeed("+wf+b")
        assert run.step() == ["+wf+c"]
        assert run.run_to_end() is AttemptState.SUCCESS


class TestFailure:
    def test_a_failed_task_cancels_later_siblings_and_the_attempt_ends_in_error(
        self, run: Scenario
    ) -> None:
        run.start("""
            +a:
              echo>: a
            +b:
              echo>: b
            +c:
              echo>: c
        """)
        run.step()
        run.fail("+wf+a", "disk full")
        assert run.step() == []
        assert run.states() == {
            "+wf": TaskState.ERROR,
            "+wf+a": TaskState.ERROR,
            "+wf+b": TaskState.CANCELED,
            "+wf+c": TaskState.CANCELED,
        }
        assert run.task("+wf+a").error == {"message": "disk full"}
        assert run.task("+wf").error == {"message": "disk full", "task": "+wf+a"}
        assert run.attempt_state() is AttemptState.ERROR
        assert run.finished_attempts == [(run.attempt_id, AttemptState.ERROR)]

    def test_a_failure_in_a_parallel_group_waits_for_running_siblings(self, run: Scenario) -> None:
        run.start("""
            _parallel: true
            +a:
              echo>: a
            +b:
              echo>: b
        """)
        run.step()
        run.fail("+wf+a")
        run.step()
        assert run.attempt_state() is AttemptState.RUNNING
        assert run.in_flight() == ["+wf+b"]
        run.succeed("+wf+b")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        assert run.states()["+wf+b"] is TaskState.SUCCESS

    def test_a_limited_parallel_group_starts_no_new_child_after_a_failure(
        self, run: Scenario
    ) -> None:
        # Given a window of 2 over four children
        run.start("""
            _parallel:
              limit: 2
            +a:
              echo>: a
            +b:
              echo>: b
            +c:
              echo>: c
            +d:
              echo>: d
        """)
        assert run.step() == ["+wf+a", "+wf+b"]
        # When one fails, its slot stays empty; the running sibling is waited for
        run.fail("+wf+a")
        assert run.step() == []
        run.succeed("+wf+b")
        assert run.step() == []
        # Then the children that never started end canceled, and so does the attempt
        states = run.states()
        assert (states["+wf+c"], states["+wf+d"]) == (TaskState.CANCELED, TaskState.CANCELED)
        assert run.attempt_state() is AttemptState.ERROR

    def test_an_undefined_variable_fails_the_task_naming_the_variable(self, run: Scenario) -> None:
        run.start("""
            +a:
              sh>: echo ${x}
            +b:
              echo>: b
        """)
        assert run.step() == []  # nothing reaches an agent
        task = run.task("+wf+a")
        assert task.state is TaskState.ERROR
        assert task.error is not None
        assert task.error["message"] == "undefined variable 'x'"  # the summary names the task
        assert run.states()["+wf+b"] is TaskState.CANCELED
        assert run.attempt_state() is AttemptState.ERROR


class TestMoves:
    def test_passes_report_the_states_tasks_entered_in_the_order_they_entered_them(
        self, run: Scenario
    ) -> None:
        # Given a task that fails once before a retry, then a task whose start is
        # reported on its own
        run.start("""
            +a:
              _retry:
                limit: 1
                interval: 5
              echo>: a
            +b:
              echo>: b
        """)
        run.step()
        run.fail("+wf+a", "first")
        run.step()
        run.step(after_seconds=5)
        run.succeed("+wf+a")
        run.step()
        b = run.open.pop("+wf+b")
        run.agent.report(TaskStarted(b.task_id, b.lease_token, time.time()))
        run.step()
        run.agent.report(finished(b))
        run.step()

        # Then the passes' moves are the run's history, a run whose start came with its
        # result included
        assert [(m.full_name, m.state.value) for m in run.moves] == [
            ("+wf", "planned"),
            ("+wf+a", "queued"),
            ("+wf+a", "running"),
            ("+wf+a", "retry_waiting"),
            ("+wf+a", "queued"),
            ("+wf+a", "running"),
            ("+wf+a", "success"),
            ("+wf+b", "queued"),
            ("+wf+b", "running"),
            ("+wf+b", "success"),
            ("+wf", "success"),
        ]
        (retry,) = [m for m in run.moves if m.state is TaskState.RETRY_WAITING]
        assert retry.not_before is not None
        assert (retry.retry_count, retry.retry_limit, retry.message) == (1, 1, "first")
        assert retry.not_before - retry.at == timedelta(seconds=5)


class TestRetry:
    def test_retry_2_runs_three_times_then_ends_in_error(self, run: Scenario) -> None:
        run.start("""
            +a:
              _retry: 2
              echo>: a
        """)
        assert run.step() == ["+wf+a"]
        run.fail("+wf+a", "first")
        assert run.step() == ["+wf+a"]
        run.fail("+wf+a", "second")
        assert run.step() == ["+wf+a"]
        run.fail("+wf+a", "third")
        assert run.step() == []
        task = run.task("+wf+a")
        assert [m.lease_token for m in run.messages_for("+wf+a")] == [1, 2, 3]
        assert [m.params["retry"] for m in run.messages_for("+wf+a")] == [0, 1, 2]
        assert (task.state, task.retry_count, task.error) == (
            TaskState.ERROR,
            2,
            {"message": "third"},
        )
        assert run.attempt_state() is AttemptState.ERROR

    def test_a_retry_waits_until_its_interval_has_passed(self, run: Scenario) -> None:
        run.start("""
            +a:
              _retry:
                limit: 1
                interval: 60
              echo>: a
        """)
        run.step()
        run.fail("+wf+a")
        assert run.step() == []
        failed_at = run.clock.now()
        task = run.task("+wf+a")
        assert task.state is TaskState.RETRY_WAITING
        assert task.not_before == failed_at + timedelta(seconds=60)
        assert run.step(after_seconds=59.9) == []
        assert run.step(after_seconds=0.1) == ["+wf+a"]
        run.succeed("+wf+a")
        run.step()
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_an_exponential_interval_doubles_up_to_max_interval(self, run: Scenario) -> None:
        run.start("""
            +a:
              _retry:
                limit: 3
                interval: 10
                interval_type: exponential
                max_interval: 25
              echo>: a
        """)
        run.step()
        for delay in (10, 20, 25):
            run.fail("+wf+a")
            assert run.step() == []
            assert run.step(after_seconds=delay - 1) == []
            assert run.step(after_seconds=1) == ["+wf+a"]
        run.fail("+wf+a")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        assert len(run.messages_for("+wf+a")) == 4

    SUB = """
        +x:
          echo>: x
    """

    def test_a_group_retry_reruns_every_child_and_drops_generated_tasks(
        self, run: Scenario
    ) -> None:
        run.start(
            """
            +g:
              _retry: 1
              _parallel: true
              +a:
                echo>: a
              +b:
                call>: sub.dig
              +c:
                echo>: c
            """,
            files={"sub.dig": self.SUB},
        )
        assert sorted(run.step()) == ["+wf+g+a", "+wf+g+b^sub+x", "+wf+g+c"]
        generated_before = run.task("+wf+g+b^sub+x").id
        run.succeed("+wf+g+a")
        run.succeed("+wf+g+b^sub+x")
        run.fail("+wf+g+c")
        # When the group fails, every child runs again and ^sub is generated anew
        assert sorted(run.step()) == ["+wf+g+a", "+wf+g+b^sub+x", "+wf+g+c"]
        assert run.task("+wf+g").retry_count == 1
        assert run.task("+wf+g+a").lease_token == 2  # static rows keep their growing token
        assert run.task("+wf+g+b^sub+x").lease_token == 1
        assert run.task("+wf+g+b^sub+x").is_generated
        with run.engine.connect() as conn:
            old = task_store.find_task(conn, generated_before)
        assert old is None or old.full_name == "+wf+g+b^sub+x"  # deleted (an id may be reused)
        assert run.run_to_end() is AttemptState.SUCCESS
        assert len([t for t in run.tasks() if t.full_name == "+wf+g+b^sub+x"]) == 1
        run.assert_every_task_terminal()

    def test_a_retried_sequential_group_keeps_its_order(self, run: Scenario) -> None:
        run.start("""
            +g:
              _retry: 1
              +a:
                echo>: a
              +b:
                echo>: b
        """)
        run.step()
        run.succeed("+wf+g+a")
        run.step()
        run.fail("+wf+g+b")
        assert run.step() == ["+wf+g+a"]

    def test_a_late_result_of_a_task_deleted_by_a_retry_is_refused(
        self, run: Scenario, request: pytest.FixtureRequest
    ) -> None:
        run.start(
            """
            +g:
              _retry: 1
              _parallel: true
              +b:
                call>: sub.dig
              +c:
                echo>: c
            """,
            files={"sub.dig": self.SUB},
        )
        run.step()
        first = run.succeed("+wf+g+b^sub+x")
        run.fail("+wf+g+c")
        run.step()  # the group retries; ^sub+x is generated again and queued
        # When the first run's result is delivered again
        run.agent.report(finished(first))
        run.step()
        # Then it is refused and the new ^sub+x is still waiting for its own result
        assert run.report.stale_results == 1
        assert run.states()["+wf+g+b^sub+x"] is TaskState.QUEUED


class TestHandlers:
    def test_error_runs_after_the_retries_and_the_task_still_ends_in_error(
        self, run: Scenario
    ) -> None:
        run.start("""
            +a:
              _retry: 1
              echo>: a
              _error:
                echo>: handling ${error.message}
        """)
        run.step()
        run.fail("+wf+a", "first")
        assert run.step() == ["+wf+a"]
        run.fail("+wf+a", "disk full")
        assert run.step() == ["+wf+a^error"]
        handler = run.open["+wf+a^error"]
        assert handler.command == "handling disk full"
        assert handler.params["error"]["message"] == "disk full"
        assert run.task("+wf+a").state is TaskState.PLANNED
        run.succeed("+wf+a^error")
        run.step()
        assert run.task("+wf+a").state is TaskState.ERROR
        assert run.attempt_state() is AttemptState.ERROR
        run.assert_every_task_terminal()

    def test_a_workflow_error_handler_sees_the_failed_tasks_message(self, run: Scenario) -> None:
        run.start("""
            _error:
              echo>: "workflow failed: ${error.message}"
            +a:
              echo>: a
            +b:
              echo>: b
        """)
        run.step()
        run.fail("+wf+a", "no such table")
        assert run.step() == ["+wf^error"]
        assert run.open["+wf^error"].command == "workflow failed: no such table"
        run.succeed("+wf^error")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        assert run.states()["+wf+b"] is TaskState.CANCELED

    def test_check_runs_after_success_before_the_next_sibling(self, run: Scenario) -> None:
        run.start("""
            +a:
              echo>: a
              _check:
                echo>: checking
            +b:
              echo>: b
        """)
        run.step()
        run.succeed("+wf+a")
        assert run.step() == ["+wf+a^check"]
        assert run.task("+wf+a").state is TaskState.PLANNED
        run.succeed("+wf+a^check")
        assert run.step() == ["+wf+b"]
        assert run.task("+wf+a").state is TaskState.SUCCESS
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_failed_check_fails_its_task(self, run: Scenario) -> None:
        run.start("""
            +a:
              echo>: a
              _check:
                echo>: checking
            +b:
              echo>: b
        """)
        run.step()
        run.succeed("+wf+a")
        run.step()
        run.fail("+wf+a^check", "row count is 0")
        assert run.step() == []
        assert run.states() == {
            "+wf": TaskState.ERROR,
            "+wf+a": TaskState.ERROR,
            "+wf+a^check": TaskState.ERROR,
            "+wf+b": TaskState.CANCELED,
        }
        assert run.task("+wf+a").error == {"message": "row count is 0", "task": "+wf+a^check"}
        assert run.attempt_state() is AttemptState.ERROR

    def test_call_generates_a_sub_subtree_and_sends_no_message_for_itself(
        self, run: Scenario
    ) -> None:
        run.start(
            """
            +c:
              call>: sub.dig
            +d:
              echo>: d
            """,
            files={"sub.dig": "+x:\n  echo>: x\n+y:\n  echo>: y\n"},
        )
        assert run.step() == ["+wf+c^sub+x"]
        run.succeed("+wf+c^sub+x")
        assert run.step() == ["+wf+c^sub+y"]
        run.succeed("+wf+c^sub+y")
        assert run.step() == ["+wf+d"]
        assert run.run_to_end() is AttemptState.SUCCESS
        generated = {t.full_name: t.is_generated for t in run.tasks()}
        assert generated == {
            "+wf": False,
            "+wf+c": False,
            "+wf+d": False,
            "+wf+c^sub": True,
            "+wf+c^sub+x": True,
            "+wf+c^sub+y": True,
        }
        assert run.messages_for("+wf+c") == []


class TestResults:
    def test_a_result_under_a_stale_lease_token_is_refused_and_changes_nothing(
        self, run: Scenario
    ) -> None:
        run.start("""
            +a:
              _retry: 1
              echo>: a
        """)
        run.step()
        first = run.fail("+wf+a")
        run.step()  # retried under token 2
        before = run.task("+wf+a")
        # When the first run wakes up late and reports under token 1
        run.agent.report(
            TaskStarted(first.task_id, first.lease_token, time.time()),
            finished(first, store={"late": True}),
        )
        assert run.step() == []
        # (its "started" event, arriving with the result, is moot and not applied either)
        assert run.report.stale_results == 1
        assert run.report.events_applied == 0
        assert run.task("+wf+a") == before
        assert before.state is TaskState.QUEUED
        assert before.lease_token == 2
        run.succeed("+wf+a")
        run.step()
        assert run.attempt_state() is AttemptState.SUCCESS
        assert run.task("+wf+a").output_params is None

    def test_a_duplicated_result_is_applied_once(self, run: Scenario) -> None:
        run.start("""
            +a:
              echo>: a
            +b:
              echo>: b
        """)
        run.step()
        message = run.open.pop("+wf+a")
        run.agent.report(finished(message), finished(message))
        assert run.tick() == ["+wf+b"]
        # (the second is refused as a repeat of a settled result, not as a stale one)
        assert (run.report.events_applied, run.report.repeated_results) == (1, 1)
        assert run.report.stale_results == 0
        run.agent.report(finished(message))  # once more, a tick later (sent again)
        assert run.step() == []
        assert run.report.repeated_results == 1
        assert len(run.messages_for("+wf+b")) == 1

    def test_a_duplicated_failure_retries_once(self, run: Scenario) -> None:
        run.start("""
            +a:
              _retry: 3
              echo>: a
        """)
        run.step()
        message = run.open.pop("+wf+a")
        failure = finished(message, Outcome.ERROR, error="boom")
        run.agent.report(failure, failure)
        assert run.tick() == ["+wf+a"]
        assert run.task("+wf+a").retry_count == 1

    def test_stored_params_reach_later_tasks_but_not_a_parallel_sibling(
        self, run: Scenario
    ) -> None:
        run.start("""
            +first:
              echo>: first
            +p:
              _parallel:
                limit: 1
              +a:
                echo>: a
              +b:
                echo>: b
            +last:
              echo>: x=${x} y=${y} deep=${nested.a},${nested.b}
        """)
        run.step()
        run.succeed("+wf+first", store={"x": 1, "nested": {"a": 1}})
        assert run.step() == ["+wf+p+a"]
        assert run.open["+wf+p+a"].params["x"] == 1
        run.succeed("+wf+p+a", store={"y": 2, "nested": {"b": 2}})
        assert run.step() == ["+wf+p+b"]
        sibling = run.open["+wf+p+b"].params
        assert sibling["x"] == 1
        assert "y" not in sibling
        assert sibling["nested"] == {"a": 1}
        run.succeed("+wf+p+b")
        assert run.step() == ["+wf+last"]
        assert run.open["+wf+last"].command == "x=1 y=2 deep=1,2"
        assert run.run_to_end() is AttemptState.SUCCESS


class TestResume:
    WORKFLOW = """
        +a:
          echo>: a
        +b:
          echo>: b=${x}
        +c:
          echo>: c
    """

    def test_a_resumed_attempt_skips_tasks_that_succeeded(self, run: Scenario) -> None:
        first = run.start(self.WORKFLOW)
        run.step()
        run.succeed("+wf+a", store={"x": 7})
        run.step()
        run.fail("+wf+b")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        # When the same session runs again
        second = run.start(self.WORKFLOW)
        assert second != first
        assert run.step() == ["+wf+b"]
        assert run.open["+wf+b"].command == "b=7"
        assert run.run_to_end() is AttemptState.SUCCESS
        assert len(run.messages_for("+wf+a")) == 1
        assert run.task("+wf+a").result == {"store": {"x": 7}, "resumed": True}

    def test_resuming_a_finished_run_succeeds_without_running_anything(self, run: Scenario) -> None:
        run.start(self.WORKFLOW)
        run.step()
        run.succeed("+wf+a", store={"x": 7})
        assert run.run_to_end() is AttemptState.SUCCESS
        published = len(run.agent.published)
        run.start(self.WORKFLOW)
        assert run.step() == []
        assert run.attempt_state() is AttemptState.SUCCESS
        assert len(run.agent.published) == published


def _wide(name: str, size: int, shape: str) -> WorkflowDefinition:
    children = tuple(
        TaskSpec(f"+t{i}", operator="echo", command=f"{i} ${{session_date}}") for i in range(size)
    )
    parallel = shape != "sequential"
    limit = 10 if shape == "parallel_limit" else None
    group = TaskSpec("+wide", parallel=parallel, parallel_limit=limit, children=children)
    return WorkflowDefinition(name, TaskSpec(f"+{name}", children=(group,)))


class StatementCounter:
    """Counts statements, and the values bound to them (an IN list of every sibling shows)."""

    def __init__(self) -> None:
        self.statements = 0
        self.bound_values = 0

    def listen(self) -> dict[str, Callable[..., None]]:
        return {"before_cursor_execute": self._before}

    def _before(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        self.statements += 1
        rows = parameters if many else [parameters]
        self.bound_values += sum(len(row or ()) for row in rows)


class SqliteStepCounter:
    """Counts SQLite virtual machine steps (in tens): it sees scans and sorts too."""

    def __init__(self) -> None:
        self.steps = 0

    def listen(self) -> dict[str, Callable[..., None]]:
        return {"before_cursor_execute": self._before, "after_cursor_execute": self._after}

    def _step(self) -> int:
        self.steps += 1
        return 0  # carry on

    def _before(self, conn: Any, *args: Any) -> None:
        conn.connection.driver_connection.set_progress_handler(self._step, 10)

    def _after(self, conn: Any, *args: Any) -> None:
        conn.connection.driver_connection.set_progress_handler(None, 10)


def _work_for_one_task(
    run: Scenario, shape: str, size: int, counter: StatementCounter | SqliteStepCounter
) -> None:
    """Start a ``size``-task group, end one (non-last) task, and count only that pass."""
    run.start_definition(_wide(f"wide{size}", size, shape))
    run.step()
    run.succeed(f"+wide{size}+wide+t0")
    listeners = counter.listen()
    for name, listener in listeners.items():
        event.listen(run.engine, name, listener)
    try:
        run.tick()
    finally:
        for name, listener in listeners.items():
            event.remove(run.engine, name, listener)
    # the "started" event arrived with its result, so only the result is applied
    assert run.report.events_applied == 1


SHAPES = ["parallel", "parallel_limit", "sequential"]


class TestScaling:
    @pytest.mark.parametrize("shape", SHAPES)
    def test_the_statements_for_one_task_do_not_grow_with_the_workflow(
        self, run: Scenario, shape: str
    ) -> None:
        small, large = StatementCounter(), StatementCounter()
        _work_for_one_task(run, shape, 50, small)
        _work_for_one_task(run, shape, 500, large)
        assert (large.statements, large.bound_values) == (small.statements, small.bound_values)

    @pytest.mark.parametrize("shape", SHAPES)
    def test_the_database_work_for_one_task_does_not_grow_with_the_workflow(
        self, migrated_sqlite_url: str, tmp_path: Path, shape: str
    ) -> None:
        engine = create_store_engine(migrated_sqlite_url)
        run = Scenario(engine, tmp_path)
        small, large = SqliteStepCounter(), SqliteStepCounter()
        try:
            _work_for_one_task(run, shape, 50, small)
            _work_for_one_task(run, shape, 500, large)
        finally:
            engine.dispose()
        assert large.steps <= small.steps * 1.2 + 10


class TestScope:
    def test_an_executor_scoped_to_attempts_leaves_other_attempts_alone(
        self, run: Scenario
    ) -> None:
        # Given two attempts of different workflows in one store
        other = run.start("""
            +other:
              echo>: other
        """)
        mine = run.start_definition(
            parse_workflow_text("+mine:\n  echo>: mine\n", "mine.dig", run.project_dir)
        )
        # When an executor scoped to one of them ticks
        run.executor = WorkflowExecutor(run.engine, run.agent, clock=run.clock, attempt_ids={mine})
        published = run.step()
        # Then only that attempt's tasks run; the other attempt is not even started
        assert published == ["+mine+mine"]
        with run.engine.connect() as conn:
            assert session_store.get_attempt_state(conn, other) is AttemptState.CREATED


class TestParamsAreDataOrTemplates:
    def test_a_stored_value_that_looks_like_a_template_is_passed_on_as_it_is(
        self, run: Scenario
    ) -> None:
        run.start("""
            +a:
              echo>: a
            +b:
              echo>: note=${note}
        """)
        run.step()
        run.succeed("+wf+a", store={"note": "price is ${amount} $$"})
        assert run.step() == ["+wf+b"]
        assert run.open["+wf+b"].command == "note=price is ${amount} $$"
        assert run.open["+wf+b"].params["note"] == "price is ${amount} $$"

    def test_a_task_whose_params_cannot_be_evaluated_uses_its_retries_then_fails(
        self, run: Scenario
    ) -> None:
        run.start("""
            +a:
              _retry: 2
              echo>: ${nope}
        """)
        for _ in range(3):
            assert run.step() == []
        task = run.task("+wf+a")
        assert (task.state, task.retry_count) == (TaskState.ERROR, 2)
        assert run.attempt_state() is AttemptState.ERROR

    def test_at_a_join_the_later_defined_sibling_wins_whatever_others_saw(
        self, run: Scenario
    ) -> None:
        # Given a stores x, b stores x, and c (after a) stores nothing
        run.start("""
            +p:
              _parallel: true
              +a:
                echo>: a
              +b:
                echo>: b
              +c:
                _after: [+a]
                echo>: c sees ${x}
            +after:
              echo>: after sees ${x}
        """)
        run.step()
        run.succeed("+wf+p+a", store={"x": "from-a"})
        run.succeed("+wf+p+b", store={"x": "from-b"})
        assert run.step() == ["+wf+p+c"]
        assert run.open["+wf+p+c"].command == "c sees from-a"
        run.succeed("+wf+p+c")
        # Then the task after the group sees b's value: b is defined after a
        assert run.step() == ["+wf+after"]
        assert run.open["+wf+after"].command == "after sees from-b"


class TestResumeAcrossSubtrees:
    def test_a_group_retry_after_a_resume_runs_the_resumed_subgroup_again(
        self, run: Scenario
    ) -> None:
        workflow = """
            +g:
              _retry: 1
              +h:
                +p:
                  echo>: p
              +q:
                echo>: q sees ${x}
        """
        # Given a first attempt where +h succeeded (storing x) and +q failed, twice
        run.start(workflow)
        for _ in range(2):
            assert run.step() == ["+wf+g+h+p"]
            run.succeed("+wf+g+h+p", store={"x": 41})
            assert run.step() == ["+wf+g+q"]
            run.fail("+wf+g+q")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        # When the session is resumed and +q fails once more, retrying the group
        run.start(workflow)
        assert run.step() == ["+wf+g+q"]
        run.fail("+wf+g+q")
        # Then the retried group runs the resumed +h again, and +q sees what it stores
        assert run.step() == ["+wf+g+h+p"]
        run.succeed("+wf+g+h+p", store={"x": 42})
        assert run.step() == ["+wf+g+q"]
        assert run.open["+wf+g+q"].command == "q sees 42"

    def test_a_resumed_call_runs_only_what_failed_in_the_called_workflow(
        self, run: Scenario
    ) -> None:
        workflow = """
            +c:
              call>: sub.dig
        """
        sub = {"sub.dig": "+s1:\n  echo>: s1\n+s2:\n  echo>: s2\n"}
        run.start(workflow, sub)
        assert run.run_to_end(fail=["+wf+c^sub+s2"]) is AttemptState.ERROR
        run.start(workflow, sub)
        assert run.step() == ["+wf+c^sub+s2"]
        assert run.run_to_end() is AttemptState.SUCCESS
        assert len(run.messages_for("+wf+c^sub+s1")) == 1


PASS_SECONDS = "tickwork_executor_pass_seconds"
CHAIN = """
+a:
  echo>: a
+b:
  echo>: b
"""


class TestPassMetrics:
    def test_a_pass_that_dispatches_records_how_long_each_of_its_phases_took(
        self, run: Scenario
    ) -> None:
        # Given an executor's metrics, and a workflow whose first task is dispatched
        metrics = ExecutorMetrics()
        run.start(CHAIN)
        published = run.step()
        metrics.record(run.report)  # the last pass of the step: nothing to do
        assert published == ["+wf+a"]
        # When the task's result is applied and the next task dispatched
        run.succeed("+wf+a")
        assert run.tick() == ["+wf+b"]
        metrics.record(run.report)
        # Then each phase of that pass was observed once, the idle pass not at all
        registry = metrics.registry
        for phase in ("statements", "commit", "publish"):
            labels = {"phase": phase}
            assert registry.get_sample_value(f"{PASS_SECONDS}_count", labels) == 1.0, phase
            seconds = registry.get_sample_value(f"{PASS_SECONDS}_sum", labels)
            assert seconds is not None and seconds >= 0


class TestTheLoopsConnection:
    def test_one_connection_serves_every_pass(self, run: Scenario) -> None:
        run.start(CHAIN)
        run.step()
        kept = run.executor._conn
        run.succeed("+wf+a")
        run.step()
        assert kept is not None and run.executor._conn is kept

    def test_a_connection_the_server_closed_between_passes_is_replaced_before_the_next(
        self, run: Scenario
    ) -> None:
        if run.engine.dialect.name != "postgresql":
            pytest.skip("a SQLite file has no server to close it")
        # Given a loop whose kept connection's backend the server then ends
        run.start(CHAIN)
        assert run.step() == ["+wf+a"]
        kept = run.executor._conn
        assert kept is not None
        backend = kept.execute(text("SELECT pg_backend_pid()")).scalar_one()
        kept.rollback()
        with run.engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
        wait_until(
            "the server closed it", lambda: store_dialect(run.engine).connection_lost(kept), 5
        )
        # When the task's result comes, the next pass applies it on another connection
        run.succeed("+wf+a")
        assert run.tick() == ["+wf+b"]
        assert run.executor._conn is not kept
