"""Pools and priority in the executor's dispatch: a pool's tasks are queued only into its
free slots, a slot comes back however its task's run ends, and ready tasks are handed out
highest priority first, with waiting counted against priority (ageing)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from tests.executor.scenario import START, Scenario
from tickwork.services.executor.report import RESCAN_SECONDS
from tickwork.shared.dispatch.messages import WorkCommitted
from tickwork.shared.domain.pools import PRIORITY_STEP_SECONDS
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store import sessions as session_store

FIVE_IN_A_POOL = """
    _parallel: true
    _pool: db
    +t1:
      echo>: 1
    +t2:
      echo>: 2
    +t3:
      echo>: 3
    +t4:
      echo>: 4
    +t5:
      echo>: 5
"""


def set_pool(engine: Engine, name: str, slots: int) -> None:
    with engine.begin() as conn:
        pool_store.set_pool(conn, name, slots, None, START)


class TestSlots:
    def test_a_pool_admits_only_as_many_tasks_as_it_has_slots(self, run: Scenario) -> None:
        set_pool(run.engine, "db", 2)
        run.start(FIVE_IN_A_POOL)
        assert run.step() == ["+wf+t1", "+wf+t2"]
        states = run.states()
        assert [states[f"+wf+t{i}"] for i in range(3, 6)] == [TaskState.READY] * 3

    def test_a_slot_comes_back_when_its_task_succeeds_or_fails(self, run: Scenario) -> None:
        set_pool(run.engine, "db", 2)
        run.start(FIVE_IN_A_POOL)
        run.step()
        run.succeed("+wf+t1")
        assert run.step() == ["+wf+t3"]
        run.fail("+wf+t2")
        assert run.step() == ["+wf+t4"]
        assert run.in_flight() == ["+wf+t3", "+wf+t4"]

    def test_every_task_runs_in_the_end_and_never_more_than_the_slots_at_once(
        self, run: Scenario
    ) -> None:
        set_pool(run.engine, "db", 2)
        run.start(FIVE_IN_A_POOL)
        for _ in range(10):
            run.step()
            assert len(run.in_flight()) <= 2
            if run.attempt_state().is_done:
                break
            for name in list(run.open):
                run.succeed(name)
        assert run.attempt_state() is AttemptState.SUCCESS

    def test_a_task_of_a_pool_that_does_not_exist_waits_until_it_is_set(
        self, run: Scenario
    ) -> None:
        run.start(FIVE_IN_A_POOL)
        assert run.step() == []
        assert set(run.states().values()) >= {TaskState.READY}
        set_pool(run.engine, "db", 1)
        assert run.step(RESCAN_SECONDS) == ["+wf+t1"]

    def test_a_pool_of_no_slots_holds_its_tasks_and_more_slots_release_them(
        self, run: Scenario
    ) -> None:
        set_pool(run.engine, "db", 0)
        run.start(FIVE_IN_A_POOL)
        assert run.step() == []
        set_pool(run.engine, "db", 3)
        assert run.step(RESCAN_SECONDS) == ["+wf+t1", "+wf+t2", "+wf+t3"]

    def test_fewer_slots_than_in_use_takes_none_back_and_admits_none_until_below(
        self, run: Scenario
    ) -> None:
        set_pool(run.engine, "db", 3)
        run.start(FIVE_IN_A_POOL)
        run.step()
        set_pool(run.engine, "db", 1)
        run.succeed("+wf+t1")
        assert run.step(RESCAN_SECONDS) == []
        assert run.in_flight() == ["+wf+t2", "+wf+t3"]
        run.succeed("+wf+t2")
        run.succeed("+wf+t3")
        assert run.step() == ["+wf+t4"]

    def test_tasks_the_executor_runs_itself_take_no_slot(self, run: Scenario) -> None:
        set_pool(run.engine, "db", 0)
        run.start("""
            _pool: db
            +n:
              nop>:
            +e:
              echo>: e
        """)
        run.step()
        assert run.states()["+wf+n"] is TaskState.SUCCESS
        assert run.states()["+wf+e"] is TaskState.READY

    def test_tasks_of_no_pool_go_on_while_a_pool_is_full(self, run: Scenario) -> None:
        set_pool(run.engine, "db", 1)
        run.start("""
            _parallel: true
            +a:
              _pool: db
              echo>: a
            +b:
              _pool: db
              echo>: b
            +c:
              echo>: c
        """)
        assert sorted(run.step()) == ["+wf+a", "+wf+c"]


class TestPriority:
    def test_higher_priorities_are_handed_out_first_and_ties_in_order(self, run: Scenario) -> None:
        set_pool(run.engine, "one", 1)
        run.start("""
            _parallel: true
            _pool: one
            +low:
              echo>: low
            +high:
              _priority: 5
              echo>: high
            +mid:
              _priority: 2
              echo>: mid
            +low2:
              echo>: low2
        """)
        order = run.step()
        for _ in range(4):
            for name in list(run.open):
                run.succeed(name)
            order += run.step()
        assert order == ["+wf+high", "+wf+mid", "+wf+low", "+wf+low2"]

    def test_tasks_of_no_pool_are_handed_out_by_priority_when_more_are_ready_than_a_pass_takes(
        self, run: Scenario
    ) -> None:
        run.executor.scope.dispatch_batch_size = 2
        run.start("""
            _parallel: true
            +a:
              echo>: a
            +b:
              _priority: 1
              echo>: b
            +c:
              _priority: 9
              echo>: c
            +d:
              echo>: d
        """)
        assert run.tick() == ["+wf+c", "+wf+b"]
        assert run.tick() == ["+wf+a", "+wf+d"]

    def test_a_killed_attempt_gives_its_tasks_slots_back(self, run: Scenario) -> None:
        set_pool(run.engine, "db", 2)
        run.start(FIVE_IN_A_POOL)
        run.step()
        first = run.attempt_id
        with run.engine.begin() as conn:
            session_store.request_kill(conn, first, START)
        run.agent.report(WorkCommitted())
        run.step()
        assert run.in_flight() == []
        run.start(FIVE_IN_A_POOL)
        assert run.step() == ["+wf+t1", "+wf+t2"]

    def _low_then_high_after(self, run: Scenario, seconds: float) -> list[str]:
        """A slot busy, a priority-0 task ready now and a priority-5 one ready
        ``seconds`` later: which of the two takes the slot when it frees."""
        set_pool(run.engine, "one", 1)
        run.start("""
            _parallel: true
            +busy:
              _pool: one
              echo>: busy
            +low:
              _pool: one
              echo>: low
            +later:
              +first:
                echo>: first
              +high:
                _pool: one
                _priority: 5
                echo>: high
        """)
        assert sorted(run.step()) == ["+wf+busy", "+wf+later+first"]
        run.succeed("+wf+later+first")
        run.step(seconds)
        assert run.states()["+wf+later+high"] is TaskState.READY
        run.succeed("+wf+busy")
        return run.step()

    def test_a_newer_task_of_higher_priority_goes_before_an_older_one(self, run: Scenario) -> None:
        assert self._low_then_high_after(run, 4 * PRIORITY_STEP_SECONDS) == ["+wf+later+high"]

    def test_a_low_priority_that_waited_longer_than_the_difference_goes_first(
        self, run: Scenario
    ) -> None:
        assert self._low_then_high_after(run, 6 * PRIORITY_STEP_SECONDS) == ["+wf+low"]

    def test_a_pass_reports_how_long_each_task_it_queued_was_ready_by_priority(
        self, run: Scenario
    ) -> None:
        set_pool(run.engine, "one", 1)
        run.start("""
            _parallel: true
            _pool: one
            +a:
              _priority: 3
              echo>: a
            +b:
              echo>: b
        """)
        assert run.tick() == ["+wf+a"]
        assert run.report.ready_waits == [(3, 0.0)]
        run.succeed("+wf+a")
        run.tick(30)
        assert run.report.ready_waits == [(0, 30.0)]


class TestManyExecutors:
    def test_a_slot_one_executor_frees_goes_to_a_better_task_another_runs(
        self, engine: Engine, tmp_path: Path
    ) -> None:
        set_pool(engine, "one", 1)
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        low, high = Scenario(engine, tmp_path / "b"), Scenario(engine, tmp_path / "a")
        low.start("""
            _parallel: true
            _pool: one
            _priority: -5
            +x1:
              echo>: 1
            +x2:
              echo>: 2
        """)
        low.executor.scope.attempt_ids = frozenset({low.attempt_id})
        assert low.step() == ["+wf+x1"]
        high.start("""
            +hi:
              _pool: one
              _priority: 5
              echo>: hi
        """)
        high.executor.scope.attempt_ids = frozenset({high.attempt_id})
        assert high.step() == []
        low.succeed("+wf+x1")
        assert low.step() == []
        assert high.step(RESCAN_SECONDS) == ["+wf+hi"]


class TestRanks:
    def test_a_task_whose_start_time_has_passed_is_ranked_when_it_becomes_ready(
        self, run: Scenario
    ) -> None:
        set_pool(run.engine, "one", 0)
        run.start("""
            +first:
              _pool: one
              _start_at: "00:00"
              echo>: first
        """)
        run.step()
        task = run.task("+wf+first")
        assert task.state is TaskState.READY
        assert task.ready_rank is not None
