"""Specifications of ``require>``: Digdag's start-or-wait for another workflow's session.

The scenario's executor runs every attempt in the store, so the test answers the tasks of
the required workflow (``+other...``) as well as those of the requiring one (``+wf...``).
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from tests.executor.scenario import SESSION_TIME, Scenario
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.dsl.archive import pack_project, read_project_archive
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store.projects import push_revision
from tickwork.shared.store.sessions import AttemptRow
from tickwork.shared.store.starts import kill_attempt
from tickwork.shared.store.tables import attempts, sessions

OTHER = """
+a:
  echo>: other
"""

OTHER_WITH_X = """
+a:
  echo>: other ${x}
"""


def require(options: str = "") -> str:
    """A workflow that requires ``other``, then runs ``+after``."""
    lines = "".join(f"  {line}\n" for line in textwrap.dedent(options).strip().splitlines())
    return f"+req:\n  require>: other\n{lines}+after:\n  echo>: after\n"


def start_other(run: Scenario, text: str = OTHER) -> int:
    """Run ``other`` by itself for the scenario's session time (with ``x``); its attempt id."""
    (run.project_dir / "other.dig").write_text(text)
    definition = parse_workflow_text(text, "other.dig", run.project_dir)
    request = RunRequest(
        definition=definition,
        project_dir=run.project_dir,
        state_dir=run.project_dir / ".state",
        database_url="unused",
        params={"x": "by-hand"},
        session_time=SESSION_TIME,
    )
    with run.engine.begin() as conn:
        return create_run_attempt(conn, request, run.clock.now()).attempt_id


def other_attempts(run: Scenario) -> list[AttemptRow]:
    """Every attempt of other's session at the scenario's session time, oldest first."""
    with run.engine.connect() as conn:
        query = select(sessions.c.id).where(sessions.c.workflow_name == "other")
        ids = list(conn.execute(query).scalars())
        return [a for i in ids for a in session_store.list_session_attempts(conn, i)]


def settle(run: Scenario, seconds: float = 1.0) -> list[str]:
    """Step past one rescan (new attempts are found then); the full names published."""
    return run.step() + run.step(seconds)


def finish_other(run: Scenario, *, fail: bool = False) -> None:
    """Let the existing ``other`` attempt end, succeeding or failing."""
    settle(run)
    if fail:
        run.fail("+other+a")
    else:
        run.succeed("+other+a")
    run.step()


class TestNoExistingSession:
    def test_the_required_workflow_is_started_and_waited_for(self, run: Scenario) -> None:
        # Given a workflow whose first task requires `other`, which never ran
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start(require())

        # When the executor runs it
        published = settle(run)

        # Then other's session starts with the same session time, and +after waits
        assert published == ["+other+a"]
        (started,) = other_attempts(run)
        assert started.session_time == SESSION_TIME
        assert run.task("+wf+req").state is TaskState.DELAYED
        assert run.step(30) == []

        # When other ends, +req succeeds at once (no poll interval to wait) and +after runs
        run.succeed("+other+a")
        assert run.step() == ["+wf+after"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_the_required_attempt_gets_the_params_given(self, run: Scenario) -> None:
        (run.project_dir / "other.dig").write_text(OTHER_WITH_X)
        run.start(require("params: {x: '${session_date}'}"))

        settle(run)

        (started,) = other_attempts(run)
        assert started.params == {"x": "2024-05-01"}
        assert run.open["+other+a"].command == "other 2024-05-01"

    def test_session_time_names_another_session(self, run: Scenario) -> None:
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start(require("session_time: '2024-04-30T00:00:00+00:00'"))

        settle(run)

        (started,) = other_attempts(run)
        assert started.session_time == datetime(2024, 4, 30, tzinfo=UTC)

    def test_the_executor_goes_on_with_other_tasks_while_one_waits(self, run: Scenario) -> None:
        # Given a parallel workflow: +req waits for other, +b does not
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start("""
            _parallel: true
            +req:
              require>: other
            +b:
              echo>: b
        """)

        # Then +b is dispatched and ends while +req waits; no agent ever gets +req
        assert sorted(settle(run)) == ["+other+a", "+wf+b"]
        run.succeed("+wf+b")
        run.step()
        assert run.task("+wf+b").state is TaskState.SUCCESS
        assert run.task("+wf+req").state is TaskState.DELAYED
        run.succeed("+other+a")
        assert run.run_to_end() is AttemptState.SUCCESS
        assert run.messages_for("+wf+req") == []

    def test_a_wait_polls_with_a_growing_interval_of_at_most_ten_seconds(
        self, run: Scenario
    ) -> None:
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start(require())
        run.step()
        waits = []
        for _ in range(6):
            task = run.task("+wf+req")
            assert task.not_before is not None
            waits.append((task.not_before - run.clock.now()).total_seconds())
            run.step(waits[-1])
        assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


class TestRerunOn:
    def test_none_uses_a_session_that_succeeded(self, run: Scenario) -> None:
        start_other(run)
        finish_other(run)
        run.start(require("rerun_on: none"))

        assert settle(run) == ["+wf+after"]
        assert len(other_attempts(run)) == 1

    def test_none_is_the_default_and_fails_with_a_session_that_failed(self, run: Scenario) -> None:
        first = start_other(run)
        finish_other(run, fail=True)
        run.start(require())

        assert settle(run) == []
        assert run.attempt_state() is AttemptState.ERROR
        error = run.task("+wf+req").error or {}
        assert error["message"].startswith("required workflow other ended error")
        assert f"attempt {first}" in error["message"]
        assert len(other_attempts(run)) == 1

    def test_none_waits_for_a_session_that_is_running(self, run: Scenario) -> None:
        start_other(run)
        settle(run)
        run.start(require("rerun_on: none"))

        assert settle(run) == []
        run.succeed("+other+a")
        assert run.step() == ["+wf+after"]
        assert len(other_attempts(run)) == 1

    def test_failed_does_not_rerun_a_session_that_succeeded(self, run: Scenario) -> None:
        start_other(run)
        finish_other(run)
        run.start(require("rerun_on: failed"))

        assert settle(run) == ["+wf+after"]
        assert len(other_attempts(run)) == 1

    def test_failed_reruns_a_session_that_failed(self, run: Scenario) -> None:
        start_other(run)
        finish_other(run, fail=True)
        run.start(require("rerun_on: failed"))

        assert settle(run) == ["+other+a"]
        first, rerun = other_attempts(run)
        assert (first.state, rerun.name) == (AttemptState.ERROR, "retry-1")
        run.succeed("+other+a")
        assert run.step() == ["+wf+after"]

    def test_failed_waits_for_a_session_that_is_running(self, run: Scenario) -> None:
        start_other(run)
        settle(run)
        run.start(require("rerun_on: failed"))

        assert settle(run) == []
        run.fail("+other+a")
        run.step()
        # The attempt waited for failed: it is not run again (as in Digdag)
        assert run.attempt_state() is AttemptState.ERROR
        assert len(other_attempts(run)) == 1

    def test_all_reruns_a_session_that_succeeded(self, run: Scenario) -> None:
        start_other(run, OTHER_WITH_X)
        finish_other(run)
        run.start(require("rerun_on: all\nparams: {x: again}"))

        assert settle(run) == ["+other+a"]
        assert run.open["+other+a"].command == "other again"
        assert [a.state for a in other_attempts(run)] == [
            AttemptState.SUCCESS,
            AttemptState.RUNNING,
        ]

    def test_all_reruns_a_session_that_failed(self, run: Scenario) -> None:
        start_other(run)
        finish_other(run, fail=True)
        run.start(require("rerun_on: all"))

        assert settle(run) == ["+other+a"]
        assert len(other_attempts(run)) == 2

    def test_all_waits_for_a_session_that_is_running(self, run: Scenario) -> None:
        start_other(run)
        settle(run)
        run.start(require("rerun_on: all"))

        assert settle(run) == []
        run.succeed("+other+a")
        assert run.step() == ["+wf+after"]
        assert len(other_attempts(run)) == 1

    def test_a_rerun_is_named_by_retry_attempt_name_once(self, run: Scenario) -> None:
        start_other(run)
        finish_other(run)
        run.start(require("rerun_on: all\nretry_attempt_name: nightly-fix"))
        settle(run)
        run.succeed("+other+a")
        run.run_to_end()

        # When another workflow's require names the same attempt, it is used, not rerun
        text = require("rerun_on: all\nretry_attempt_name: nightly-fix")
        run.start_definition(parse_workflow_text(text, "wf2.dig", run.project_dir))
        assert settle(run) == ["+wf2+after"]
        assert [a.name for a in other_attempts(run)] == ["run-1", "nightly-fix"]

    def test_a_bad_rerun_on_fails_the_task_naming_the_values(self, run: Scenario) -> None:
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start(require("rerun_on: sometimes"))
        settle(run)
        error = run.task("+wf+req").error or {}
        assert error["message"] == "'rerun_on' must be none, failed or all, got 'sometimes'"
        assert other_attempts(run) == []


class TestFailures:
    def test_ignore_failure_succeeds_when_the_required_attempt_failed(self, run: Scenario) -> None:
        start_other(run)
        finish_other(run, fail=True)
        run.start(require("ignore_failure: true"))

        assert settle(run) == ["+wf+after"]
        assert run.run_to_end() is AttemptState.SUCCESS

    def test_a_required_attempt_that_fails_later_fails_the_task(self, run: Scenario) -> None:
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start(require())
        settle(run)
        run.fail("+other+a")
        run.step()
        assert run.attempt_state() is AttemptState.ERROR
        assert run.states()["+wf+after"] is TaskState.CANCELED

    def test_an_unknown_workflow_fails_the_task_naming_it(self, run: Scenario) -> None:
        run.start(require().replace("other", "nope"))
        settle(run)
        error = run.task("+wf+req").error or {}
        assert error["message"].startswith("'require>' no workflow 'nope' in project ")
        assert run.attempt_state() is AttemptState.ERROR

    def test_an_unknown_project_fails_the_task_naming_it(self, run: Scenario) -> None:
        run.start(require("project_name: elsewhere"))
        settle(run)
        error = run.task("+wf+req").error or {}
        assert error["message"] == "'require>' no project 'elsewhere'"

    def test_requiring_itself_is_refused(self, run: Scenario) -> None:
        run.start("+req:\n  require>: wf\n")
        settle(run)
        error = run.task("+wf+req").error or {}
        assert error["message"] == (
            "'require>' of wf with its own session time 2024-05-01T00:00:00+00:00 "
            "would wait for itself"
        )

    def test_two_workflows_requiring_each_other_fail_instead_of_waiting_forever(
        self, run: Scenario
    ) -> None:
        # Given other requires wf, and wf requires other
        (run.project_dir / "other.dig").write_text("+back:\n  require>: wf\n")
        run.start(require())

        settle(run)
        run.step(1)

        # Then the second require> sees the cycle, and both attempts end in error
        error = next(t.error for t in run.tasks() if t.full_name == "+wf+req") or {}
        assert run.attempt_state() is AttemptState.ERROR, error
        (other,) = other_attempts(run)
        assert other.state is AttemptState.ERROR
        assert "required workflow other ended error" in error["message"]

    def test_killing_the_requiring_attempt_leaves_the_required_one_running(
        self, run: Scenario
    ) -> None:
        (run.project_dir / "other.dig").write_text(OTHER)
        run.start(require())
        settle(run)
        with run.engine.begin() as conn:
            kill_attempt(conn, run.attempt_id, run.clock.now())
        settle(run)

        assert run.attempt_state() is AttemptState.KILLED
        (other,) = other_attempts(run)
        assert other.state is AttemptState.RUNNING
        run.succeed("+other+a")
        run.step()
        assert other_attempts(run)[0].state is AttemptState.SUCCESS


class TestPushedProjects:
    def test_another_project_is_named_and_its_latest_revision_runs(
        self, run: Scenario, tmp_path: Path
    ) -> None:
        # Given project "lib" pushed twice: its latest revision's `other` echoes "v2"
        lib = tmp_path / "lib"
        lib.mkdir()
        for version in ("v1", "v2"):
            (lib / "other.dig").write_text(f"+a:\n  echo>: {version}\n")
            with run.engine.begin() as conn:
                archive = read_project_archive(pack_project(lib))
                push_revision(
                    conn,
                    project_name="lib",
                    revision_name=version,
                    archive=archive,
                    now=run.clock.now(),
                )
        run.start(require("project_name: lib"))

        settle(run)

        assert run.open["+other+a"].command == "v2"
        with run.engine.connect() as conn:
            names = conn.execute(select(attempts.c.name).order_by(attempts.c.id)).scalars()
            assert list(names) == ["run-1", "manual"]
