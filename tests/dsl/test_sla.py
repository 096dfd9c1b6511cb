"""Specification of ``sla:`` in workflow files: what it parses into and every error's place."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tickwork.shared.domain.sla import SlaSpec
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def sla_of(project: Path, text: str) -> SlaSpec | None:
    definition = parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    return None if definition.sla is None else SlaSpec.from_config(definition.sla)


def problems(project: Path, text: str) -> list[str]:
    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    return [str(problem) for problem in caught.value.problems]


class TestValidSla:
    def test_a_workflow_without_sla_has_none(self, tmp_path: Path) -> None:
        assert sla_of(tmp_path, "+a:\n  echo>: a\n") is None

    def test_a_time_of_day_with_tasks_alert_and_fail(self, tmp_path: Path) -> None:
        sla = sla_of(
            tmp_path,
            """
            sla:
              time: 02:00
              alert: false
              fail: true
              +notice:
                echo>: late
            +a:
              echo>: a
            """,
        )
        notice = TaskSpec("+notice", operator="echo", command="late")
        assert sla == SlaSpec(
            time="02:00:00", alert=False, fail=True, tasks=TaskSpec("^sla", children=(notice,))
        )

    def test_alert_defaults_to_true_and_fail_to_false(self, tmp_path: Path) -> None:
        sla = sla_of(tmp_path, "sla:\n  time: '23:59:30'\n")
        assert sla == SlaSpec(time="23:59:30", alert=True, fail=False, tasks=None)

    @pytest.mark.parametrize(
        ("written", "seconds"),
        [("01:30", 5400), ("00:00:45", 45), ("1h30m", 5400), ("90", 90), (120, 120)],
    )
    def test_a_duration_is_digdags_hh_mm_ss_or_a_duration_or_seconds(
        self, tmp_path: Path, written: object, seconds: int
    ) -> None:
        sla = sla_of(tmp_path, f"sla:\n  duration: {written}\n")
        assert sla is not None and sla.duration_seconds == seconds

    def test_sla_tasks_may_be_groups_and_are_checked_like_any_task(self, tmp_path: Path) -> None:
        sla = sla_of(
            tmp_path,
            """
            sla:
              duration: 1h
              +tell:
                _parallel: true
                +ops:
                  echo>: ops
                +owner:
                  echo>: owner
            """,
        )
        assert sla is not None and sla.tasks is not None
        (tell,) = sla.tasks.children
        assert tell.parallel and [c.name for c in tell.children] == ["+ops", "+owner"]


class TestSlaErrors:
    def test_time_and_duration_together_are_refused(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  echo>: a\nsla:\n  time: 02:00\n  duration: 1h\n") == [
            "wf.dig:3: 'sla' needs either 'time: HH:MM' or 'duration' (one, not both)"
        ]

    def test_neither_time_nor_duration_is_refused(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "sla:\n  fail: true\n") == [
            "wf.dig:1: 'sla' needs either 'time: HH:MM' or 'duration' (one, not both)"
        ]

    @pytest.mark.parametrize("written", ["25:00", "7pm", "02:60", "'${t}'", "1h"])
    def test_a_time_that_is_not_a_time_of_day_is_refused_at_its_line(
        self, tmp_path: Path, written: str
    ) -> None:
        (problem,) = problems(tmp_path, f"sla:\n  fail: true\n  time: {written}\n")
        assert problem.startswith("wf.dig:3: 'sla' time must be a time of day HH:MM or HH:MM:SS")

    @pytest.mark.parametrize("written", ["soon", "0s", "32d", "-5", "true"])
    def test_a_duration_out_of_form_or_range_is_refused_at_its_line(
        self, tmp_path: Path, written: str
    ) -> None:
        (problem,) = problems(tmp_path, f"sla:\n  duration: {written}\n")
        assert problem.startswith("wf.dig:2: 'sla' duration must be HH:MM[:SS] or a duration")

    def test_an_unknown_option_is_refused_with_a_suggestion(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "sla:\n  time: 02:00\n  alrt: true\n") == [
            "wf.dig:3: unknown 'sla' option 'alrt' (did you mean 'alert'?)"
        ]

    def test_alert_and_fail_must_be_booleans(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "sla:\n  time: 02:00\n  alert: loud\n  fail: 1\n") == [
            "wf.dig:3: 'sla' alert must be true or false, got 'loud'",
            "wf.dig:4: 'sla' fail must be true or false, got 1",
        ]

    def test_sla_must_be_a_mapping(self, tmp_path: Path) -> None:
        (problem,) = problems(tmp_path, "sla: 02:00\n")
        assert problem.startswith("wf.dig:1: 'sla' must be a mapping")

    def test_a_bad_sla_task_is_reported_where_it_is(self, tmp_path: Path) -> None:
        text = "sla:\n  time: 02:00\n  +notice:\n    shh>: echo late\n"
        (problem,) = problems(tmp_path, text)
        assert problem.startswith("wf.dig:4: unknown operator 'shh>'")

    def test_an_sla_in_a_group_is_checked_and_has_no_effect(self, tmp_path: Path) -> None:
        # As Digdag's compiler: a group may hold a workflow's keys (an included file's).
        (problem,) = problems(tmp_path, "+g:\n  sla:\n    time: 99:00\n  +a:\n    echo>: a\n")
        assert problem.startswith("wf.dig:3:")
        text = "+g:\n  sla:\n    time: 02:00\n  +a:\n    echo>: a\n"
        assert parse_workflow_text(text, "ok.dig", tmp_path).sla is None
