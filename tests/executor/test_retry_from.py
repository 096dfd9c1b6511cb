"""Specifications of retries that resume an attempt: the executor runs only what they ask."""

from __future__ import annotations

from tests.executor.scenario import Scenario
from tickwork.shared.dispatch.messages import WorkCommitted
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.starts import RetryMode, retry_attempt

FOUR_STEPS = """
    +prepare:
      echo>: prepare
    +load:
      +extract:
        echo>: extract
      +transform:
        echo>: transform
    +report:
      echo>: report
    +publish:
      echo>: publish
"""


def retry(run: Scenario, mode: RetryMode, from_task: str | None = None) -> int:
    """Retry the scenario's attempt and make the scenario follow the new one."""
    with run.engine.begin() as conn:
        new_id = retry_attempt(
            conn, run.attempt_id, mode=mode, from_task=from_task, params=None, now=run.clock.now()
        )
    run.attempt_id = new_id
    run.open.clear()
    run.agent.report(WorkCommitted())
    return new_id


def published_in_order(run: Scenario, since: int) -> list[str]:
    return [m.full_name for m in run.agent.published[since:]]


class TestRetryFrom:
    def test_a_retry_from_a_task_runs_it_and_what_follows_but_not_its_upstreams(
        self, run: Scenario
    ) -> None:
        # Given an attempt that succeeded entirely
        run.start(FOUR_STEPS)
        assert run.run_to_end() is AttemptState.SUCCESS
        before = len(run.agent.published)
        # When it is retried from +report
        retry(run, RetryMode.FROM, "+report")
        # Then +prepare and the +load group count as done, and +report, +publish run again
        assert run.run_to_end() is AttemptState.SUCCESS
        assert published_in_order(run, before) == ["+wf+report", "+wf+publish"]
        assert run.task("+wf+load+transform").result == {"resumed": True}
        assert run.task("+wf+report").result != {"resumed": True}

    def test_a_retry_from_a_task_inside_a_group_keeps_the_earlier_siblings_and_upstreams(
        self, run: Scenario
    ) -> None:
        run.start(FOUR_STEPS)
        assert run.run_to_end(fail=["+wf+publish"]) is AttemptState.ERROR
        before = len(run.agent.published)
        retry(run, RetryMode.FROM, "+wf+load+transform")
        assert run.run_to_end() is AttemptState.SUCCESS
        assert published_in_order(run, before) == [
            "+wf+load+transform",
            "+wf+report",
            "+wf+publish",
        ]
        assert run.task("+wf+prepare").state is TaskState.SUCCESS

    def test_a_retry_of_failed_tasks_runs_only_what_did_not_succeed(self, run: Scenario) -> None:
        run.start(FOUR_STEPS)
        assert run.run_to_end(fail=["+wf+report"]) is AttemptState.ERROR
        before = len(run.agent.published)
        retry(run, RetryMode.FAILED)
        assert run.run_to_end() is AttemptState.SUCCESS
        assert published_in_order(run, before) == ["+wf+report", "+wf+publish"]

    def test_a_retry_of_everything_runs_every_task_again(self, run: Scenario) -> None:
        run.start(FOUR_STEPS)
        assert run.run_to_end(fail=["+wf+report"]) is AttemptState.ERROR
        before = len(run.agent.published)
        retry(run, RetryMode.ALL)
        assert run.run_to_end() is AttemptState.SUCCESS
        assert published_in_order(run, before)[0] == "+wf+prepare"
        assert len(published_in_order(run, before)) == 5
