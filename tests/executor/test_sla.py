"""Specifications of ``sla:`` in the executor, one ``tick(now)`` at a time.

The scenario's clock starts at 2024-05-01T09:00Z; the attempt starts on the first pass,
so ``duration: 1m`` makes its deadline 09:01Z. An executor looks for missed deadlines on
its rescan (every second).
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from tests.executor.scenario import START, AgentStub, Scenario
from tickwork.services.executor.loop import TickReport, WorkflowExecutor
from tickwork.services.executor.metrics import ExecutorMetrics
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store import sla as sla_store
from tickwork.shared.store.sessions import request_kill
from tickwork.shared.store.tables import attempts

LATE_NOTICE = """
    sla:
      duration: 1m
      +notice:
        echo>: late
    +slow:
      echo>: working
    +after:
      echo>: after
"""


def alerts_of(run: Scenario) -> list[tuple[str, str]]:
    with run.engine.connect() as conn:
        return [(a.kind, a.message) for a in sla_store.list_alerts(conn, run.attempt_id)]


def sla_columns(run: Scenario) -> tuple[object, object]:
    query = sa.select(attempts.c.sla_deadline, attempts.c.sla_fired_at).where(
        attempts.c.id == run.attempt_id
    )
    with run.engine.connect() as conn:
        deadline, fired = conn.execute(query).one()
    return deadline, fired


class TestDeadline:
    def test_the_deadline_is_set_when_the_attempt_starts(self, run: Scenario) -> None:
        run.start(LATE_NOTICE)
        run.step()
        assert sla_columns(run) == (START + timedelta(minutes=1), None)

    def test_a_workflow_without_sla_has_no_deadline(self, run: Scenario) -> None:
        run.start("+a:\n  echo>: a\n")
        run.step()
        assert sla_columns(run) == (None, None)


class TestMissedSla:
    def test_the_sla_tasks_run_beside_the_late_task_and_the_attempt_waits_for_them(
        self, run: Scenario
    ) -> None:
        # Given +slow is still running
        run.start(LATE_NOTICE)
        assert run.step() == ["+wf+slow"]
        assert run.step(59.9) == []

        # When the deadline has passed, at the next rescan (at most a second later)
        assert run.step(1) == ["+wf^sla+notice"]

        # Then ^sla runs beside +slow, and the rest of the workflow goes on as usual
        assert run.states()["+wf+slow"] is TaskState.QUEUED
        run.succeed("+wf+slow")
        assert run.step() == ["+wf+after"]
        run.succeed("+wf+after")
        run.step()
        assert run.attempt_state() is AttemptState.RUNNING  # ^sla+notice has not ended
        assert run.run_to_end() is AttemptState.SUCCESS
        assert run.task("+wf^sla").is_generated

    def test_an_alert_is_recorded_once(self, run: Scenario) -> None:
        run.start(LATE_NOTICE)
        run.step()
        run.step(60)
        run.step(10)

        ((kind, message),) = alerts_of(run)
        assert kind == "sla"
        assert message == (
            "SLA missed: workflow wf was not done by 2024-05-01T09:01:00+00:00 (duration 60s)"
        )
        assert sla_columns(run)[1] == START + timedelta(minutes=1)
        assert len(run.messages_for("+wf^sla+notice")) == 1

    def test_alert_false_records_nothing_but_still_runs_the_tasks(self, run: Scenario) -> None:
        run.start(
            "sla:\n  duration: 1m\n  alert: false\n  +notice:\n    echo>: late\n"
            "+slow:\n  echo>: working\n"
        )
        run.step()
        assert run.step(60) == ["+wf^sla+notice"]
        assert alerts_of(run) == []

    def test_a_failing_sla_task_fails_the_attempt(self, run: Scenario) -> None:
        run.start(LATE_NOTICE)
        run.step()
        run.step(60)
        assert run.run_to_end(fail=["+wf^sla+notice"]) is AttemptState.ERROR
        assert run.states()["+wf+after"] is TaskState.SUCCESS

    def test_the_executor_counts_missed_slas_in_its_metrics(self, run: Scenario) -> None:
        metrics = ExecutorMetrics()
        run.start(LATE_NOTICE)
        run.step()
        run.tick(60)
        metrics.record(run.report)
        assert metrics.registry.get_sample_value("tickwork_sla_missed_total") == 1.0


class TestFail:
    def test_fail_true_stops_the_attempt_at_the_deadline_and_fails_it(self, run: Scenario) -> None:
        # Given a workflow whose first task is still running at its deadline
        run.start("""
            sla:
              duration: 1m
              fail: true
              +notice:
                echo>: late
            +slow:
              echo>: working
            +after:
              echo>: after
        """)
        run.step()
        slow = run.open["+wf+slow"]

        # When the deadline passes
        published = run.step(60)

        # Then the unfinished tasks are canceled (the running one's agent told to stop),
        # the SLA tasks and a fail> task run, and the attempt ends in error
        assert sorted(published) == ["+wf^sla+notice", "+wf^sla^fail"]
        assert (slow.task_id, slow.lease_token) in run.agent.revoked
        assert run.states()["+wf+slow"] is TaskState.CANCELED
        assert run.states()["+wf+after"] is TaskState.CANCELED
        run.open.pop("+wf+slow")
        assert run.run_to_end(fail=["+wf^sla^fail"]) is AttemptState.ERROR
        assert run.messages_for("+wf+after") == []
        run.assert_every_task_terminal()

    def test_a_late_result_of_a_canceled_task_is_refused(self, run: Scenario) -> None:
        run.start("sla:\n  duration: 1m\n  fail: true\n+slow:\n  echo>: working\n")
        run.step()
        run.step(60)
        run.succeed("+wf+slow")
        run.step()
        assert run.report.stale_results == 1
        assert run.states()["+wf+slow"] is TaskState.CANCELED

    def test_the_roots_error_handler_runs_after_an_sla_failure(self, run: Scenario) -> None:
        run.start(
            "sla:\n  duration: 1m\n  fail: true\n_error:\n  echo>: cleanup\n"
            "+slow:\n  echo>: working\n"
        )
        run.step()
        run.step(60)
        run.open.pop("+wf+slow")
        run.fail("+wf^sla^fail")
        assert run.step() == ["+wf^error"]
        assert run.run_to_end() is AttemptState.ERROR


class TestNothingFires:
    def test_an_attempt_done_before_its_deadline_fires_nothing(self, run: Scenario) -> None:
        run.start(LATE_NOTICE)
        assert run.run_to_end() is AttemptState.SUCCESS
        published = len(run.agent.published)

        run.step(3600)

        assert len(run.agent.published) == published
        assert alerts_of(run) == []
        assert sla_columns(run) == (None, None)  # the met deadline is no longer watched

    def test_a_killed_attempt_fires_nothing(self, run: Scenario) -> None:
        run.start(LATE_NOTICE)
        run.step()
        with run.engine.begin() as conn:
            request_kill(conn, run.attempt_id, run.clock.now())
        run.step(2)
        run.step(60)
        assert alerts_of(run) == []
        assert run.messages_for("+wf^sla+notice") == []


class TestTwoExecutors:
    def test_two_executors_ticking_past_the_deadline_fire_it_once(self, run: Scenario) -> None:
        # Given a second executor on the same store
        other_agent = AgentStub()
        other = WorkflowExecutor(run.engine, other_agent, clock=run.clock)
        run.start(LATE_NOTICE)
        run.step()

        # When both pass after the deadline, one after the other and again
        now = run.clock.advance(60)
        reports = [run.executor.tick(now), other.tick(now), other.tick(now + timedelta(seconds=2))]

        # Then the SLA fired once: one alert, one ^sla task, one message for it
        assert [r.slas_missed for r in reports] == [1, 0, 0]
        assert len(alerts_of(run)) == 1
        published = [*run.agent.published, *other_agent.published]
        assert [m.full_name for m in published].count("+wf^sla+notice") == 1

    def test_only_one_of_two_claims_wins(self, run: Scenario) -> None:
        run.start(LATE_NOTICE)
        run.step()
        now = run.clock.advance(60)
        with run.engine.begin() as conn:
            first = sla_store.claim_missed_sla(conn, run.attempt_id, now)
            second = sla_store.claim_missed_sla(conn, run.attempt_id, now)
        assert (first, second) == (True, False)

    def test_an_executor_racing_an_uncommitted_claim_waits_and_then_does_not_fire(
        self, run: Scenario
    ) -> None:
        if run.engine.dialect.name != "postgresql":
            pytest.skip("SQLite runs one writer at a time: there is no race to lose")
        other_agent = AgentStub()
        other = WorkflowExecutor(run.engine, other_agent, clock=run.clock)
        run.start(LATE_NOTICE)
        run.step()
        now = run.clock.advance(60)
        reports: list[TickReport] = []

        # Given one executor has claimed the missed SLA and not committed yet
        with run.engine.begin() as conn:
            assert sla_store.claim_missed_sla(conn, run.attempt_id, now)
            # When another executor's pass finds the same attempt meanwhile
            racer = threading.Thread(target=lambda: reports.append(other.tick(now)))
            racer.start()
            racer.join(timeout=1.0)
            assert racer.is_alive()  # its claim waits for the first one's commit
        racer.join(timeout=10.0)

        # Then, once the first commits, the other finds it claimed and fires nothing
        assert not racer.is_alive()
        assert reports[0].slas_missed == 0
        assert [m.full_name for m in other_agent.published] == []
