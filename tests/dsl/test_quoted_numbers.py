"""Specification of numbers written as strings in workflow files (``_retry: "3"``).

Digdag takes a string that spells a number wherever a number is expected; garbage is
still refused, naming the file and line.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tickwork.shared.domain.workflow import IntervalType, RetryPolicy, WorkflowDefinition
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def parse(project: Path, text: str) -> WorkflowDefinition:
    return parse_workflow_text(textwrap.dedent(text), "wf.dig", project)


def problems(project: Path, text: str) -> list[str]:
    with pytest.raises(InvalidWorkflow) as caught:
        parse(project, text)
    return [str(problem) for problem in caught.value.problems]


class TestAccepted:
    def test_a_quoted_retry_count_is_a_count(self, tmp_path: Path) -> None:
        task = parse(tmp_path, '+a:\n  echo>: x\n  _retry: "3"\n').root.children[0]
        assert task.retry == RetryPolicy(limit=3)

    def test_every_retry_option_may_be_quoted(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            """
            _retry:
              limit: "2"
              interval: "10"
              interval_type: exponential
              max_interval: "90.5"
            +a:
              echo>: x
            """,
        )
        assert definition.root.retry == RetryPolicy(2, 10.0, IntervalType.EXPONENTIAL, 90.5)

    def test_a_quoted_fraction_of_a_second_is_an_interval(self, tmp_path: Path) -> None:
        task = parse(
            tmp_path, "+a:\n  echo>: x\n  _retry: {limit: 1, interval: '0.5'}\n"
        ).root.children[0]
        assert task.retry == RetryPolicy(1, 0.5)

    def test_a_quoted_parallel_limit_is_a_limit(self, tmp_path: Path) -> None:
        definition = parse(tmp_path, "_parallel: {limit: '2'}\n+a:\n  echo>: x\n")
        assert (definition.root.parallel, definition.root.parallel_limit) == (True, 2)

    def test_quoted_timeouts_and_delays_are_seconds(self, tmp_path: Path) -> None:
        task = parse(tmp_path, "+a:\n  echo>: x\n  _timeout: '60'\n  _delay: '5'\n").root.children[
            0
        ]
        assert task.timeout_seconds == 60
        assert task.start is not None and task.start.delay_seconds == 5

    def test_quoted_loop_and_range_counts_pass_the_check(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            """
            +loop:
              loop>: "3"
              _do:
                echo>: ${i}
            +range:
              for_range>: {from: "0", to: "10", step: "5"}
              _do:
                echo>: ${range.from}
            """,
        )
        assert [task.command for task in definition.root.children] == [
            "3",
            {"from": "0", "to": "10", "step": "5"},
        ]

    def test_quoted_schedule_counts_are_numbers(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path, "schedule:\n  daily>: 07:00:00\n  max_active: '2'\n+a:\n  echo>: x\n"
        )
        assert definition.schedule is not None and definition.schedule["max_active"] == 2


class TestRefused:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            (
                "+a:\n  echo>: x\n  _retry: '3x'\n",
                "wf.dig:3: '_retry' must be a whole number from 0 to 1000 or {limit: N, ...},"
                " got '3x'",
            ),
            (
                "+a:\n  echo>: x\n  _retry: {limit: '-1'}\n",
                "wf.dig:3: '_retry' limit must be a whole number from 0 to 1000, got '-1'",
            ),
            (
                "+a:\n  echo>: x\n  _retry: {limit: true}\n",
                "wf.dig:3: '_retry' limit must be a whole number from 0 to 1000, got True",
            ),
            (
                "+a:\n  echo>: x\n  _retry: {limit: 1, interval: '1.5x'}\n",
                "wf.dig:3: '_retry' interval must be from 0 to 604800 seconds"
                " or a duration such as 10m, got '1.5x'",
            ),
            (
                "_parallel: {limit: '0'}\n+a:\n  echo>: x\n",
                "wf.dig:1: '_parallel' limit must be a whole number from 1 to 10000, got '0'",
            ),
            (
                "_parallel:\n  limit: 'two'\n+a:\n  echo>: x\n",
                "wf.dig:2: '_parallel' limit must be a whole number from 1 to 10000, got 'two'",
            ),
            (
                "+a:\n  loop>: '3x'\n  _do:\n    echo>: x\n",
                "wf.dig:2: 'loop>' needs a whole number of iterations, got '3x'",
            ),
            (
                "+a:\n  for_range>: {from: 0, to: '9', step: '0'}\n  _do:\n    echo>: x\n",
                "wf.dig:2: 'for_range>' needs a whole number 'step' above 0",
            ),
            (
                "+a:\n  if>: maybe\n  _do:\n    echo>: x\n",
                "wf.dig:2: 'if>' needs true or false, got 'maybe'",
            ),
        ],
    )
    def test_garbage_is_refused_at_its_line(self, tmp_path: Path, text: str, message: str) -> None:
        assert problems(tmp_path, text) == [message]

    def test_a_quoted_schedule_count_that_is_no_number_is_refused(self, tmp_path: Path) -> None:
        text = "schedule:\n  daily>: 07:00:00\n  max_active: '2x'\n+a:\n  echo>: x\n"
        assert problems(tmp_path, text) == [
            "wf.dig:3: 'max_active' must be a whole number from 1 to 10000"
        ]
