"""Specifications of results applied in batches: each result's fate, the statements a
batch costs, and promotion only where a sibling may wait.

Statements are counted, never timed. Both store backends run every scenario.
"""

from __future__ import annotations

import dataclasses
import time
import types

import pytest
from redis.exceptions import RedisError

from tests.executor.scenario import Scenario, finished
from tests.support.statements import StatementLog
from tickwork.services.executor import loop
from tickwork.services.executor.loop import WorkflowExecutor
from tickwork.shared.dispatch.messages import Outcome, TaskEvent, TaskMessage
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.tables import tasks

FAN_OUT = """
    +fan:
      _parallel: true
      +t0:
        echo>: 0
      +t1:
        echo>: 1
      +t2:
        echo>: 2
      +t3:
        echo>: 3
"""


def _downstream_queries(statements: list[str]) -> list[str]:
    """Statements that read the edges between tasks."""
    return [s for s in statements if "task_dependencies" in s]


def _ends_and_promotes_at_once(run: Scenario) -> bool:
    """Whether one statement ends runs and promotes what waited for them (PostgreSQL)."""
    return dialect_of(run.engine).chains_inserts


def _task_reads(statements: list[str]) -> list[str]:
    """Statements that read whole task rows."""
    return [s for s in statements if s.startswith("SELECT tasks.id, tasks.attempt_id")]


def _task_updates_to(statements: list[str], state: str) -> list[str]:
    return [s for s in statements if s.startswith("UPDATE tasks") and state in s]


def _started_fan_out(run: Scenario) -> dict[str, TaskMessage]:
    run.start(FAN_OUT)
    run.step()
    messages = {name.rsplit("+", 1)[-1]: run.open.pop(name) for name in list(run.open)}
    assert sorted(messages) == ["t0", "t1", "t2", "t3"]
    return messages


class TestFates:
    def test_a_batch_mixing_fresh_stale_and_repeated_results_gives_each_its_fate(
        self, run: Scenario
    ) -> None:
        # Given a fan-out whose t0 already succeeded
        messages = _started_fan_out(run)
        run.agent.report(finished(messages["t0"]))
        run.step()
        # When one batch brings t0's result again, t1's under a token it never had, t2's
        # success twice and t3's failure
        stale = dataclasses.replace(messages["t1"], lease_token=messages["t1"].lease_token + 1)
        run.agent.report(
            finished(messages["t0"]),
            finished(stale),
            finished(messages["t2"]),
            finished(messages["t2"]),
            finished(messages["t3"], Outcome.ERROR, error="boom"),
        )
        run.tick()
        # Then the fresh ones are applied, the stale one refused, the repeats counted so
        report = run.report
        assert (report.events_applied, report.stale_results, report.repeated_results) == (
            2,
            1,
            2,
        )
        states = run.states()
        assert states["+wf+fan+t1"] is TaskState.QUEUED
        assert states["+wf+fan+t2"] is TaskState.SUCCESS
        assert states["+wf+fan+t3"] is TaskState.ERROR
        assert run.task("+wf+fan+t3").error == {"message": "boom"}
        # And the moves say it in arrival order, each start before its end
        assert [(m.full_name, m.state) for m in report.moves] == [
            ("+wf+fan+t2", TaskState.RUNNING),
            ("+wf+fan+t2", TaskState.SUCCESS),
            ("+wf+fan+t3", TaskState.RUNNING),
            ("+wf+fan+t3", TaskState.ERROR),
        ]
        # And the attempt still ends once t1 reports under its own token
        run.agent.report(finished(messages["t1"]))
        run.step()
        assert run.attempt_state() is AttemptState.ERROR

    def test_a_result_of_a_run_ended_behind_the_executors_back_is_refused(
        self, run: Scenario
    ) -> None:
        # Given a fan-out whose t0 another process canceled under the same token (this
        # executor still knows t0's run as queued)
        messages = _started_fan_out(run)
        with run.engine.begin() as conn:
            conn.execute(
                tasks.update()
                .where(tasks.c.id == messages["t0"].task_id)
                .values(state=TaskState.CANCELED.value)
            )
        # When t0's result comes
        run.agent.report(finished(messages["t0"]))
        run.tick()
        # Then the fence in the UPDATE refuses it, judged on the task as it is now
        assert (run.report.events_applied, run.report.stale_results) == (0, 1)
        assert run.task("+wf+fan+t0").state is TaskState.CANCELED

    def test_a_late_result_of_a_run_a_retry_sent_back_to_wait_is_refused(
        self, run: Scenario
    ) -> None:
        # Given a run of +slow cut short by a failing SLA, and the workflow waiting to retry
        # (+slow back in BLOCKED, under the same token: tokens only grow)
        run.start("""
            sla:
              duration: 1m
              fail: true
            _retry:
              limit: 1
              interval: 600
            +slow:
              echo>: working
            +after:
              echo>: next
        """)
        run.step()
        slow = run.open.pop("+wf+slow")
        run.step(60)
        run.fail("+wf^sla^fail")
        run.step()
        assert run.states()["+wf+slow"] is TaskState.BLOCKED
        # When the old run's result comes late
        run.agent.report(finished(slow))
        published = run.step()
        # Then it ends nothing and starts nothing
        assert run.states()["+wf+slow"] is TaskState.BLOCKED
        assert published == []
        assert run.report.events_applied == 0

    def test_a_logged_failure_whose_ancestor_retries_at_once_drops_its_log_row_with_it(
        self, run: Scenario
    ) -> None:
        # Given a loop that retries, whose generated task fails with a log
        run.start("""
            +repeat:
              loop>: 1
              _retry: 1
              _do:
                echo>: round ${i}
        """)
        assert run.step() == ["+wf+repeat^sub+loop-0"]
        message = run.open.pop("+wf+repeat^sub+loop-0")
        failure = dataclasses.replace(
            finished(message, Outcome.ERROR, error="boom"),
            log_path="x/y.log",
            log_size_bytes=3,
        )
        # When the failure is applied, and the retry deletes the generated task in that pass
        run.agent.report(failure)
        published = run.tick()
        # Then the pass commits (the deleted task's log row is not written) and the loop
        # runs again at once, with a new task
        assert published == ["+wf+repeat^sub+loop-0"]
        assert run.open["+wf+repeat^sub+loop-0"].task_id != message.task_id
        assert run.task("+wf+repeat").retry_count == 1

    def test_a_result_that_stores_params_is_applied_beside_plain_ones(self, run: Scenario) -> None:
        messages = _started_fan_out(run)
        run.agent.report(
            finished(messages["t0"]),
            finished(messages["t1"], store={"k": 1}),
            finished(messages["t2"]),
            finished(messages["t3"]),
        )
        run.step()
        assert run.attempt_state() is AttemptState.SUCCESS
        assert run.task("+wf+fan+t1").output_params == {"k": 1}
        assert run.task("+wf+fan").output_params == {"k": 1}


class TestStatements:
    def test_plain_results_of_one_batch_end_their_tasks_in_one_update(self, run: Scenario) -> None:
        # Given a fan-out of four, three of which report in one batch (the group goes on)
        messages = _started_fan_out(run)
        run.agent.report(*(finished(messages[name]) for name in ("t0", "t1", "t2")))
        with StatementLog(run.engine) as log:
            run.tick()
        # Then one UPDATE ends them, without reading them (this executor queued them),
        # and nothing else moves
        assert run.report.events_applied == 3
        updates = _task_updates_to(log.statements, "")
        assert len(updates) == 1
        assert "lease_token" in updates[0].split("WHERE", 1)[1]  # fenced in the UPDATE
        assert _task_reads(log.statements) == []
        assert run.in_flight() == ["+wf+fan+t3"]

    def test_results_of_runs_another_executor_queued_read_their_tasks_in_one_statement(
        self, run: Scenario
    ) -> None:
        # Given a fan-out queued by an executor that then stopped, and a new one
        messages = _started_fan_out(run)
        run.executor = WorkflowExecutor(run.engine, run.agent, clock=run.clock)
        run.tick()  # its first pass rescans the store
        run.agent.report(*(finished(messages[name]) for name in ("t0", "t1", "t2")))
        with StatementLog(run.engine) as log:
            run.tick()
        # Then one statement reads the three tasks, and they end
        assert run.report.events_applied == 3
        assert len([s for s in _task_reads(log.statements) if "WHERE tasks.id IN" in s]) == 1
        assert run.in_flight() == ["+wf+fan+t3"]

    def test_a_parallel_childs_success_issues_no_downstream_query(self, run: Scenario) -> None:
        messages = _started_fan_out(run)
        run.agent.report(finished(messages["t0"]), finished(messages["t1"]))
        with StatementLog(run.engine) as log:
            run.tick()
        assert run.report.events_applied == 2
        assert _downstream_queries(log.statements) == []

    def test_a_sequential_groups_result_looks_for_its_downstream_once(self, run: Scenario) -> None:
        run.start("""
            +a:
              echo>: a
            +b:
              echo>: b
        """)
        run.step()
        run.succeed("+wf+a")
        with StatementLog(run.engine) as log:
            assert run.tick() == ["+wf+b"]
        # On PostgreSQL one statement ends a, promotes b and says what b sees; SQLite
        # promotes b in an UPDATE of its own, which says what b sees
        expected = ["WITH"] if _ends_and_promotes_at_once(run) else ["UPDATE"]
        assert [s.split()[0] for s in _downstream_queries(log.statements)] == expected

    def test_a_chain_link_costs_two_statements_on_postgresql_and_four_on_sqlite(
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
        run.succeed("+wf+a")
        run.tick()
        run.succeed("+wf+b")
        with StatementLog(run.engine) as log:
            assert run.tick() == ["+wf+c"]
        verbs = [s.split()[0] for s in log.statements if s.split()[0] not in ("BEGIN", "COMMIT")]
        # b ended (its row is known: this executor queued it) and c promoted, saying what
        # c sees (on PostgreSQL in one statement; SQLite promotes c in a statement of its
        # own), c queued and c's log indexed with b's (on PostgreSQL in one statement;
        # SQLite indexes them in one of their own)
        if _ends_and_promotes_at_once(run):
            assert verbs == ["WITH", "WITH"]
        else:
            assert verbs == ["UPDATE", "UPDATE", "UPDATE", "INSERT"]

    def test_a_task_promoted_by_a_plain_result_sees_what_its_parent_and_upstreams_pass_on(
        self, run: Scenario
    ) -> None:
        # Given a chain whose first task stores params, inside a group with params of its own
        run.start("""
            +g:
              _export:
                from_group: g
              +first:
                echo>: first
              +second:
                echo>: second
              +third:
                echo>: x=${x} from_group=${from_group}
        """)
        run.step()
        run.succeed("+wf+g+first", store={"x": 1})
        assert run.step() == ["+wf+g+second"]
        # When second ends plainly (its result goes through the batch, promoting third)
        run.succeed("+wf+g+second")
        assert run.step() == ["+wf+g+third"]
        # Then third sees what first stored, through second, and its group's own params
        assert run.open["+wf+g+third"].command == "x=1 from_group=g"
        assert run.open["+wf+g+third"].params["x"] == 1

    def test_a_task_waiting_for_two_that_end_in_one_batch_starts_seeing_both(
        self, run: Scenario
    ) -> None:
        # Given a task after two parallel ones, each passing on what a task before it stored
        run.start("""
            +fan:
              _parallel: true
              +a:
                echo>: a
              +b:
                echo>: b
              +after_a:
                _after: [+a]
                echo>: after a
              +after_b:
                _after: [+b]
                echo>: after b
              +join:
                _after: [+after_a, +after_b]
                echo>: ${x}-${y}
        """)
        assert sorted(run.step()) == ["+wf+fan+a", "+wf+fan+b"]
        run.succeed("+wf+fan+a", store={"x": 1})
        run.succeed("+wf+fan+b", store={"y": 2})
        assert sorted(run.step()) == ["+wf+fan+after_a", "+wf+fan+after_b"]
        # When both plain results are applied in one batch (on PostgreSQL the statement
        # that ends them sees neither ended in its snapshot, yet promotes what waits)
        run.succeed("+wf+fan+after_a")
        run.succeed("+wf+fan+after_b")
        with StatementLog(run.engine) as log:
            assert run.step() == ["+wf+fan+join"]
        assert len(_downstream_queries(log.statements)) == 1
        # Then the task waiting for both starts once, seeing what each passed on
        assert run.open["+wf+fan+join"].command == "1-2"

    def test_after_in_a_parallel_group_is_still_followed(self, run: Scenario) -> None:
        run.start("""
            +fan:
              _parallel: true
              +a:
                echo>: a
              +b:
                _after: [+a]
                echo>: b
              +c:
                echo>: c
        """)
        assert sorted(run.step()) == ["+wf+fan+a", "+wf+fan+c"]
        run.succeed("+wf+fan+c")
        assert run.step() == []
        run.succeed("+wf+fan+a")
        assert run.step() == ["+wf+fan+b"]
        run.succeed("+wf+fan+b")
        run.step()
        assert run.attempt_state() is AttemptState.SUCCESS


class TestFencedUpdate:
    def test_only_runs_under_their_current_token_end(self, run: Scenario) -> None:
        messages = _started_fan_out(run)
        t0, t1 = messages["t0"], messages["t1"]
        with run.engine.begin() as conn:
            moved = task_store.succeed_runs(
                conn,
                [(t0.task_id, t0.lease_token), (t1.task_id, t1.lease_token + 1)],
                (),
                run.clock.now(),
            )
            failed = task_store.fail_runs(
                conn, [(t1.task_id, t1.lease_token - 1)], {"message": "late"}, run.clock.now()
            )
        assert (moved, failed) == ({t0.task_id}, set())
        assert run.task("+wf+fan+t0").state is TaskState.SUCCESS
        assert run.task("+wf+fan+t1").state is TaskState.QUEUED


class TestResultsWaitingForOthers:
    """While agents have a backlog of an executor's runs on a queue, its results wait a
    little for others; the backlog is lowered here to two runs."""

    FAN_OUT_ON_TWO_QUEUES = """
        +fan:
          _parallel: true
          +slow1:
            _queue: slow
            echo>: 1
          +slow2:
            _queue: slow
            echo>: 2
          +slow3:
            _queue: slow
            echo>: 3
          +quick:
            echo>: q
    """

    @pytest.fixture(autouse=True)
    def small_backlog(self, monkeypatch: pytest.MonkeyPatch) -> list[float]:
        """The executor loop's sleeps, recorded instead of slept (the ``time`` module the
        loop sees is replaced, not the one every other module shares)."""
        slept: list[float] = []
        monkeypatch.setattr(loop, "RESULT_BATCH_BACKLOG", 2)
        monkeypatch.setattr(
            loop,
            "time",
            types.SimpleNamespace(
                monotonic=time.monotonic, perf_counter=time.perf_counter, sleep=slept.append
            ),
        )
        return slept

    def started_with_a_result(self, run: Scenario, name: str) -> None:
        """The fan-out queued, and the result of ``name`` reported by its agent."""
        run.start(self.FAN_OUT_ON_TWO_QUEUES)
        run.step()
        assert run.executor.scope.runs.waiting == 4
        run.agent.report(finished(run.open.pop(name)))

    def test_a_result_from_a_queue_with_a_backlog_waits_for_others(
        self, run: Scenario, small_backlog: list[float]
    ) -> None:
        self.started_with_a_result(run, "+wf+fan+slow1")
        run.executor.wait_for_work(1.0)
        assert small_backlog == [loop.RESULT_BATCH_SECONDS]

    def test_a_result_from_a_queue_without_a_backlog_is_applied_at_once(
        self, run: Scenario, small_backlog: list[float]
    ) -> None:
        # Given three runs waiting on "slow" and one on the default queue, when the
        # default queue's result comes, it does not wait for "slow"'s backlog
        self.started_with_a_result(run, "+wf+fan+quick")
        run.executor.wait_for_work(1.0)
        assert small_backlog == []

    def test_what_was_read_is_applied_even_if_the_second_read_fails(
        self, run: Scenario, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.started_with_a_result(run, "+wf+fan+slow1")
        reads = iter([run.agent.poll_events])

        def second_read_fails(timeout_seconds: float) -> list[TaskEvent]:
            first = next(reads, None)
            if first is None:
                raise RedisError("Redis went away")
            return first(timeout_seconds)

        with monkeypatch.context() as patched, pytest.raises(RedisError):
            patched.setattr(run.executor.dispatcher, "poll_events", second_read_fails)
            run.executor.wait_for_work(1.0)
        run.tick()
        assert run.task("+wf+fan+slow1").state is TaskState.SUCCESS
