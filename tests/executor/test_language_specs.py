"""Specifications of the workflow language taken from Digdag's documented behaviour.

Each one says which tasks run, in which order, how many times and with which params:
a group's ``_retry`` runs the whole group again (also inside ``call>``), ``_error`` runs
and the failure stands, parallel branches keep their stores apart until they join, a
loop's ``_parallel: {limit: N}`` is a sliding window, and ``_export`` beats session params.
They run on SQLite and PostgreSQL in turn (the ``engine`` fixture).
"""

from __future__ import annotations

import textwrap
from typing import Any

from tests.executor.scenario import SESSION_TIME, Scenario
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.shared.dispatch.messages import WorkCommitted
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.dsl.parser import parse_workflow_text


def start_with_session_params(run: Scenario, text: str, params: dict[str, Any]) -> int:
    """Like :meth:`Scenario.start`, with session params (``tickwork run -p``)."""
    definition = parse_workflow_text(textwrap.dedent(text), "wf.dig", run.project_dir)
    request = RunRequest(
        definition=definition,
        project_dir=run.project_dir,
        state_dir=run.project_dir / ".state",
        database_url="unused",
        params=params,
        session_time=SESSION_TIME,
    )
    with run.engine.begin() as conn:
        run.attempt_id = create_run_attempt(conn, request, run.clock.now()).attempt_id
    run.agent.report(WorkCommitted())
    return run.attempt_id


def answer_in_order(run: Scenario, fail: dict[str, int]) -> list[str]:
    """Run a sequential workflow to its end, one task at a time; the names dispatched.

    ``fail`` says how many of its runs each task fails (its first runs); others succeed.
    """
    dispatched: list[str] = []
    failures = dict(fail)
    for _ in range(60):
        published = run.step()
        dispatched += published
        if run.attempt_state().is_done:
            return dispatched
        assert len(run.open) == 1, f"more than one task at once: {sorted(run.open)}"
        (name,) = run.open
        if failures.get(name, 0) > 0:
            failures[name] -= 1
            run.fail(name, f"{name} failed")
        else:
            run.succeed(name)
    raise AssertionError(f"the attempt never ended; dispatched {dispatched}")


class TestGroupRetry:
    WORKFLOW = """
        +g:
          _retry: 2
          +a:
            echo>: a
          +b:
            echo>: b
          +c:
            echo>: c
        +after:
          echo>: after
    """

    def test_a_group_retry_runs_every_child_again_in_order(self, run: Scenario) -> None:
        # Given a group with _retry: 2 whose last child fails on its first two runs
        run.start(self.WORKFLOW)

        # When it runs to the end
        dispatched = answer_in_order(run, fail={"+wf+g+c": 2})

        # Then the whole group ran three times, in order, and then the task after it
        group = ["+wf+g+a", "+wf+g+b", "+wf+g+c"]
        assert dispatched == group * 3 + ["+wf+after"]
        assert run.task("+wf+g").retry_count == 2
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_a_group_that_keeps_failing_runs_limit_plus_one_times_then_fails(
        self, run: Scenario
    ) -> None:
        run.start(self.WORKFLOW)

        dispatched = answer_in_order(run, fail={"+wf+g+b": 3})

        # Then a and b ran three times each, c and +after never: the failure stands
        assert dispatched == ["+wf+g+a", "+wf+g+b"] * 3
        assert run.states()["+wf+g"] is TaskState.ERROR
        assert run.states()["+wf+after"] is TaskState.CANCELED
        assert run.attempt_state() is AttemptState.ERROR
        run.assert_every_task_terminal()

    def test_when_the_first_child_fails_the_later_ones_run_once_after_the_retry(
        self, run: Scenario
    ) -> None:
        run.start(self.WORKFLOW)

        dispatched = answer_in_order(run, fail={"+wf+g+a": 1})

        assert dispatched == ["+wf+g+a", "+wf+g+a", "+wf+g+b", "+wf+g+c", "+wf+after"]
        assert run.attempt_state() is AttemptState.SUCCESS


class TestErrorHandler:
    def test_a_groups_error_task_runs_with_the_message_and_the_failure_stands(
        self, run: Scenario
    ) -> None:
        # Given a group with an _error task, whose second child fails
        run.start("""
            +load:
              _error:
                echo>: "alert: ${error.message}"
              +stage:
                echo>: stage
              +swap:
                echo>: swap
            +publish:
              echo>: publish
        """)
        assert run.step() == ["+wf+load+stage"]
        run.succeed("+wf+load+stage")
        assert run.step() == ["+wf+load+swap"]
        run.fail("+wf+load+swap", "table is locked")

        # Then the _error task runs and sees the failure's message
        assert run.step() == ["+wf+load^error"]
        handler = run.open["+wf+load^error"]
        assert handler.command == "alert: table is locked"
        assert handler.params["error"]["message"] == "table is locked"
        run.succeed("+wf+load^error")

        # and the failure stands: the group and attempt end in error, +publish never runs
        assert run.step() == []
        assert run.states()["+wf+load"] is TaskState.ERROR
        assert run.states()["+wf+load^error"] is TaskState.SUCCESS
        assert run.states()["+wf+publish"] is TaskState.CANCELED
        assert run.attempt_state() is AttemptState.ERROR
        run.assert_every_task_terminal()

    def test_a_failing_error_task_still_ends_the_attempt_in_error(self, run: Scenario) -> None:
        run.start("""
            +a:
              fail>: broken
              _error:
                echo>: handling ${error.message}
        """)
        # fail> runs on an agent like any operator: here the stub fails it
        assert run.step() == ["+wf+a"]
        run.fail("+wf+a", "broken")
        assert run.step() == ["+wf+a^error"]
        run.fail("+wf+a^error", "pager is down")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        assert run.task("+wf+a").state is TaskState.ERROR


class TestRetryInsideCall:
    SUB_WITH_GROUP_RETRY = """
        +g:
          _retry: 1
          +x:
            echo>: x
          +y:
            echo>: y
    """

    def test_a_group_retry_in_a_called_workflow_reruns_that_group(self, run: Scenario) -> None:
        # Given a called workflow whose group has _retry: 1, and +y failing once
        run.start(
            """
            +c:
              call>: sub.dig
            +after:
              echo>: after
            """,
            files={"sub.dig": self.SUB_WITH_GROUP_RETRY},
        )

        dispatched = answer_in_order(run, fail={"+wf+c^sub+g+y": 1})

        # Then the called group ran twice, in order, and the caller carried on
        group = ["+wf+c^sub+g+x", "+wf+c^sub+g+y"]
        assert dispatched == group * 2 + ["+wf+after"]
        assert run.task("+wf+c^sub+g").retry_count == 1
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_a_retry_on_the_call_task_runs_the_called_workflow_again(self, run: Scenario) -> None:
        # Given _retry: 1 on the call> task itself (Digdag: a task that generated children)
        run.start(
            """
            +c:
              _retry: 1
              call>: sub.dig
            """,
            files={"sub.dig": "+x:\n  echo>: x\n+y:\n  echo>: y\n"},
        )

        dispatched = answer_in_order(run, fail={"+wf+c^sub+y": 1})

        # Then the whole called workflow runs again
        assert dispatched == ["+wf+c^sub+x", "+wf+c^sub+y"] * 2
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_a_retry_at_the_top_of_a_called_file_reruns_the_called_workflow(
        self, run: Scenario
    ) -> None:
        run.start(
            """
            +c:
              call>: sub.dig
            """,
            files={"sub.dig": "_retry: 1\n+x:\n  echo>: x\n+y:\n  echo>: y\n"},
        )

        dispatched = answer_in_order(run, fail={"+wf+c^sub+y": 1})

        assert dispatched == ["+wf+c^sub+x", "+wf+c^sub+y"] * 2
        assert run.attempt_state() is AttemptState.SUCCESS


class TestParallelStores:
    WORKFLOW = """
        +branches:
          _parallel: true
          +left:
            +l1:
              echo>: l1
            +l2:
              echo>: l2
          +right:
            +r1:
              echo>: r1
            +r2:
              echo>: r2
        +joined:
          echo>: shared=${shared} left=${left_only} right=${right_only}
    """

    def test_a_branch_never_sees_what_the_other_branch_stored(self, run: Scenario) -> None:
        run.start(self.WORKFLOW)
        assert sorted(run.step()) == ["+wf+branches+left+l1", "+wf+branches+right+r1"]

        # When the left branch stores values before the right branch's next task starts
        run.succeed("+wf+branches+left+l1", store={"shared": "left", "left_only": 1})
        assert run.step() == ["+wf+branches+left+l2"]
        run.succeed("+wf+branches+right+r1", store={"shared": "right", "right_only": 2})
        assert run.step() == ["+wf+branches+right+r2"]

        # Then each branch's next task sees its own branch's values only
        left = run.open["+wf+branches+left+l2"].params
        right = run.open["+wf+branches+right+r2"].params
        assert (left["shared"], left["left_only"], "right_only" in left) == ("left", 1, False)
        assert (right["shared"], right["right_only"], "left_only" in right) == ("right", 2, False)

    def test_after_the_join_the_last_defined_branch_wins(self, run: Scenario) -> None:
        run.start(self.WORKFLOW)
        run.step()
        # Given the right branch (defined last) stores first and the left branch last
        run.succeed("+wf+branches+right+r1", store={"shared": "right", "right_only": 2})
        run.step()
        run.succeed("+wf+branches+right+r2")
        run.step()
        run.succeed("+wf+branches+left+l1", store={"shared": "left", "left_only": 1})
        run.step()
        run.succeed("+wf+branches+left+l2")

        # Then the task after the group sees both branches' values, and the right one's
        # for the key both stored: definition order decides, not finishing order
        assert run.step() == ["+wf+joined"]
        assert run.open["+wf+joined"].command == "shared=right left=1 right=2"
        assert run.run_to_end() is AttemptState.SUCCESS


class TestParallelLoopWindow:
    WORKFLOW = """
        +each:
          loop>: 6
          _parallel:
            limit: 2
          _do:
            echo>: part ${i}
        +after:
          echo>: after
    """

    def test_a_limited_loop_never_runs_more_than_two_children_at_once(self, run: Scenario) -> None:
        run.start(self.WORKFLOW)
        most = 0
        started: list[str] = []
        for _ in range(30):
            started += run.step()
            most = max(most, len(run.in_flight()))
            if not run.open:
                break
            # The oldest open child ends first
            run.succeed(min(run.open, key=lambda name: run.open[name].task_id))
        assert most == 2
        children = [f"+wf+each^sub+loop-{i}" for i in range(6)]
        assert started == [*children, "+wf+after"]
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_a_new_child_starts_as_soon_as_one_ends_not_after_the_whole_wave(
        self, run: Scenario
    ) -> None:
        run.start(self.WORKFLOW)
        assert run.step() == ["+wf+each^sub+loop-0", "+wf+each^sub+loop-1"]

        # When loop-1 ends while loop-0 still runs
        run.succeed("+wf+each^sub+loop-1")

        # Then loop-2 starts at once beside loop-0 (Digdag would wait for loop-0 too)
        assert run.step() == ["+wf+each^sub+loop-2"]
        assert run.in_flight() == ["+wf+each^sub+loop-0", "+wf+each^sub+loop-2"]


class TestExportAndSessionParams:
    def test_export_beats_a_session_param_and_a_local_key_beats_export(self, run: Scenario) -> None:
        # Given -p table=from_session -p region=eu, and an _export of table
        start_with_session_params(
            run,
            """
            _export:
              table: from_export
            +plain:
              echo>: ${table} ${region}
            +own_key:
              table: from_task
              echo>: ${table}
            """,
            {"table": "from_session", "region": "eu"},
        )

        # Then the task sees the exported value, and the session param nobody overrides
        assert run.step() == ["+wf+plain"]
        assert run.open["+wf+plain"].command == "from_export eu"
        run.succeed("+wf+plain")
        # and a task's own key beats the export
        assert run.step() == ["+wf+own_key"]
        assert run.open["+wf+own_key"].command == "from_task"
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_an_inner_export_beats_an_outer_one_for_its_descendants_only(
        self, run: Scenario
    ) -> None:
        start_with_session_params(
            run,
            """
            _export:
              level: outer
            +inner:
              _export:
                level: inner
              +t:
                echo>: ${level}
            +sibling:
              echo>: ${level}
            """,
            {"level": "session"},
        )
        assert run.step() == ["+wf+inner+t"]
        assert run.open["+wf+inner+t"].command == "inner"
        run.succeed("+wf+inner+t")
        assert run.step() == ["+wf+sibling"]
        assert run.open["+wf+sibling"].command == "outer"


def test_session_params_reach_every_task_when_nothing_overrides_them(run: Scenario) -> None:
    start_with_session_params(run, "+a:\n  echo>: ${who}\n", {"who": "ops"})
    assert run.step() == ["+wf+a"]
    assert run.open["+wf+a"].command == "ops"
