"""Specification of numbers and ``wait>`` options that ``${...}`` gives at run time.

An expression renders to a string as often as not; a string that spells a number is read
as that number, as the parser reads a quoted one, and anything else fails the task.
"""

from __future__ import annotations

from datetime import timedelta

from tests.executor.scenario import START, Scenario
from tickwork.shared.domain.states import AttemptState, TaskState


def test_a_loop_count_rendered_as_a_string_is_a_count(run: Scenario) -> None:
    run.start("""
        _export:
          times: "2"
        +repeat:
          loop>: ${times}
          _do:
            echo>: n=${i}
    """)
    assert run.run_to_end() is AttemptState.SUCCESS
    assert [message.command for message in run.messages_for("+wf+repeat^sub+loop-1")] == ["n=1"]


def test_a_range_of_strings_is_a_range(run: Scenario) -> None:
    run.start("""
        _export:
          last: "4"
        +range:
          for_range>:
            from: "0"
            to: ${last}
            step: "2"
          _do:
            echo>: ${range.from}
    """)
    assert run.run_to_end() is AttemptState.SUCCESS
    assert run.task("+wf+range^sub+range-from=2&to=4").state is TaskState.SUCCESS


def test_a_rendered_poll_interval_decides_when_a_wait_ends(run: Scenario) -> None:
    run.start("""
        _export:
          every: "20"
        +pause:
          wait>: 30s
          poll_interval: ${every}
    """)
    run.step()
    assert run.task("+wf+pause").not_before == START + timedelta(seconds=40)


def test_a_rendered_wait_option_digdag_refuses_fails_the_task(run: Scenario) -> None:
    run.start("""
        _export:
          hold: "true"
        +pause:
          wait>: 30s
          blocking: ${hold}
          poll_interval: 5s
    """)
    run.step()
    task = run.task("+wf+pause")
    assert task.state is TaskState.ERROR
    assert task.error == {"message": "'wait>' poll_interval cannot be set with blocking: true"}
