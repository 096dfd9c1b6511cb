"""Specifications of the control operators: ``loop>``, ``for_each>``, ``for_range>``, ``if>``.

They run in the executor, not on agents: their task generates a ``^sub`` group with
Digdag's iteration names, and the iterations run like any other tasks.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.executor.scenario import START, Scenario
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def params(run: Scenario, name: str) -> dict[str, object]:
    return dict(run.open[name].params)


class TestLoop:
    def test_a_loop_runs_its_do_once_per_index_one_after_another(self, run: Scenario) -> None:
        run.start("""
            +repeat:
              loop>: 3
              _do:
                echo>: round ${i}
        """)
        assert run.step() == ["+wf+repeat^sub+loop-0"]
        assert run.open["+wf+repeat^sub+loop-0"].command == "round 0"
        run.succeed("+wf+repeat^sub+loop-0")
        assert run.step() == ["+wf+repeat^sub+loop-1"]
        assert params(run, "+wf+repeat^sub+loop-1")["i"] == 1
        assert run.run_to_end() is AttemptState.SUCCESS
        assert run.task("+wf+repeat").state is TaskState.SUCCESS

    def test_a_count_that_is_not_a_whole_number_fails_the_task(self, run: Scenario) -> None:
        run.start("""
            _export:
              count: many
            +repeat:
              loop>: ${count}
              _do:
                echo>: x
        """)
        run.step()
        task = run.task("+wf+repeat")
        assert task.state is TaskState.ERROR
        assert task.error == {"message": "'loop>' needs a whole number of iterations, got 'many'"}

    def test_more_iterations_than_the_limit_fail_the_task_instead_of_being_cut(
        self, run: Scenario
    ) -> None:
        run.start("_export:\n  n: 10001\n+repeat:\n  loop>: ${n}\n  _do:\n    echo>: x\n")
        run.step()
        message = (run.task("+wf+repeat").error or {})["message"]
        assert message == "10001 iterations are over the limit of 10000"


class TestParallelLoop:
    def test_a_parallel_loop_never_runs_more_than_its_limit_at_once(self, run: Scenario) -> None:
        run.start("""
            _export:
              n: 5
            +repeat:
              loop>: ${n}
              _parallel: {limit: 2}
              _do:
                +step:
                  echo>: ${i}
        """)
        most = 0
        for _ in range(20):
            run.step()
            most = max(most, len(run.in_flight()))
            if not run.open:
                break
            for name in list(run.open):
                run.succeed(name)
        assert most == 2
        assert run.attempt_state() is AttemptState.SUCCESS
        steps = [t.full_name for t in run.tasks() if t.full_name.endswith("+step")]
        assert steps == [f"+wf+repeat^sub+loop-{i}+step" for i in range(5)]


class TestForEach:
    def test_for_each_runs_every_combination_with_digdags_names(self, run: Scenario) -> None:
        run.start("""
            +each:
              for_each>:
                fruit: [apple, banana]
                verb: [eat]
              _parallel: true
              _do:
                echo>: ${verb} ${fruit}
        """)
        names = run.step()
        assert names == [
            "+wf+each^sub+for-0=fruit=0=apple&1=verb=0=eat",
            "+wf+each^sub+for-0=fruit=1=banana&1=verb=0=eat",
        ]
        assert [run.open[n].command for n in names] == ["eat apple", "eat banana"]

    def test_for_each_accepts_json_text(self, run: Scenario) -> None:
        run.start("""
            +each:
              for_each>: '{"n": [1, 2]}'
              _do:
                echo>: ${n}
        """)
        assert run.step() == ["+wf+each^sub+for-0=n=0=1"]


class TestForRange:
    def test_for_range_by_step_exposes_from_to_and_index(self, run: Scenario) -> None:
        run.start("""
            +ranges:
              for_range>: {from: 0, to: 10, step: 4}
              _parallel: true
              _do:
                echo>: ${range.index} ${range.from}-${range.to}
        """)
        names = run.step()
        assert names == [
            "+wf+ranges^sub+range-from=0&to=4",
            "+wf+ranges^sub+range-from=4&to=8",
            "+wf+ranges^sub+range-from=8&to=10",
        ]
        assert [run.open[n].command for n in names] == ["0 0-4", "1 4-8", "2 8-10"]

    def test_for_range_by_slices_splits_evenly(self, run: Scenario) -> None:
        run.start("""
            +ranges:
              for_range>: {from: 0, to: 10, slices: 3}
              _parallel: true
              _do:
                echo>: ${range.from}-${range.to}
        """)
        assert [run.open[n].command for n in run.step()] == ["0-3", "3-6", "6-10"]


class TestIf:
    @pytest.mark.parametrize(("condition", "ran"), [("true", "yes"), ("false", "no")])
    def test_if_runs_do_when_true_and_else_do_when_false(
        self, run: Scenario, condition: str, ran: str
    ) -> None:
        run.start(f"""
            _export:
              flag: {condition}
            +check:
              if>: ${{flag}}
              _do:
                echo>: "yes"
              _else_do:
                echo>: "no"
        """)
        (name,) = run.step()
        assert run.open[name].command == ran
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_if_false_without_else_do_succeeds_running_nothing(self, run: Scenario) -> None:
        run.start("+check:\n  if>: false\n  _do:\n    echo>: x\n")
        assert run.step() == []
        assert run.attempt_state() is AttemptState.SUCCESS


class TestControlErrors:
    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            ("+l:\n  loop>: 2\n", "wf.dig:2: 'loop>' in '+l' needs '_do'"),
            ("+c:\n  if>: true\n", "wf.dig:2: 'if>' in '+c' needs '_do' or '_else_do'"),
            (
                "+l:\n  loop>: 2\n  _do: {echo>: x}\n  _else_do: {echo>: y}\n",
                "wf.dig:4: '_else_do' is only valid on 'if>'",
            ),
            (
                "+e:\n  echo>: x\n  _do: {echo>: y}\n",
                "wf.dig:3: unknown directive '_do'",
            ),
        ],
    )
    def test_a_missing_or_misplaced_do_or_else_do_is_reported_at_its_line(
        self, tmp_path: Path, text: str, problem: str
    ) -> None:
        with pytest.raises(InvalidWorkflow) as caught:
            parse_workflow_text(text, "wf.dig", tmp_path)
        first = str(caught.value.problems[0])
        assert first.startswith(problem), first


class TestWait:
    def test_wait_holds_no_agent_and_lets_the_next_task_start_when_its_time_is_up(
        self, run: Scenario
    ) -> None:
        run.start("""
            +pause:
              wait>: 30s
            +after:
              echo>: b
        """)
        assert run.step() == []  # nothing was sent to an agent
        waiting = run.task("+wf+pause")
        assert waiting.state is TaskState.DELAYED
        assert waiting.not_before == START + timedelta(seconds=30)
        assert run.step(29.999) == []
        assert run.step(0.001) == ["+wf+after"]
        assert run.task("+wf+pause").state is TaskState.SUCCESS
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_wait_whose_rendered_duration_is_bad_fails_the_task(self, run: Scenario) -> None:
        run.start("""
            _export:
              how_long: soon
            +pause:
              wait>: ${how_long}
        """)
        run.step()
        task = run.task("+wf+pause")
        assert task.state is TaskState.ERROR
        assert (task.error or {})["message"].startswith("'wait>' expected a duration")

    def test_a_literal_bad_wait_is_reported_at_its_line(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidWorkflow) as caught:
            parse_workflow_text("+w:\n  wait>: forever\n", "wf.dig", tmp_path)
        assert str(caught.value.problems[0]).startswith("wf.dig:2: 'wait>' expected a duration")


class TestParallelExpression:
    @pytest.mark.parametrize(("flag", "first"), [("true", 3), ("false", 1)])
    def test_a_loops_parallel_may_be_an_expression(
        self, run: Scenario, flag: str, first: int
    ) -> None:
        run.start(f"""
            _export:
              fan_out: {flag}
            +repeat:
              loop>: 3
              _parallel: ${{fan_out}}
              _do:
                echo>: ${{i}}
        """)
        assert len(run.step()) == first
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_parallel_expression_that_is_not_a_boolean_fails_the_task(
        self, run: Scenario
    ) -> None:
        run.start("+repeat:\n  loop>: 2\n  _parallel: ${1 + 1}\n  _do:\n    echo>: x\n")
        run.step()
        error = run.task("+wf+repeat").error or {}
        assert error["message"] == "'_parallel' needs true or false, got 2"


class TestTaskLimit:
    def test_a_loop_that_would_take_the_attempt_over_its_task_limit_fails_instead(
        self, run: Scenario
    ) -> None:
        run.executor.max_tasks_per_attempt = 10
        run.start("+repeat:\n  loop>: 5\n  _do:\n    +a:\n      echo>: a\n")
        run.step()
        error = run.task("+wf+repeat").error or {}
        # 2 tasks exist (the root and the loop); ^sub, 5 iterations and 5 of +a would follow
        assert error["message"] == (
            "the attempt would have 13 tasks, over the limit of 10 (TICKWORK_MAX_TASKS_PER_ATTEMPT)"
        )
        assert [t.full_name for t in run.tasks()] == ["+wf", "+wf+repeat"]
