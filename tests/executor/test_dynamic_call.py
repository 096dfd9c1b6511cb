"""Specifications of ``call>`` with an expression and of the folder a called workflow
works in (Digdag's ``_workdir``).

An expression is resolved when the call task runs, from its params, in the project's
files; a bad target fails that task alone, naming the file. Each run of the task (a
``_retry``, a retried attempt) resolves it again. Tasks of a called file run in that
file's folder. They run on SQLite and PostgreSQL in turn (the ``engine`` fixture).
"""

from __future__ import annotations

from tests.executor.scenario import Scenario
from tests.executor.test_language_specs import start_with_session_params
from tests.executor.test_retry_from import published_in_order, retry
from tests.support.files import write_under
from tickwork.shared.dispatch.messages import WorkCommitted
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.starts import RetryMode, retry_attempt

DYNAMIC = """
    _export:
      child: ${which}
    +c:
      call>: ${child}.dig
"""


def dynamic(which: str) -> str:
    return DYNAMIC.replace("${which}", which)


class TestDynamicCall:
    def test_the_file_named_by_a_param_runs_as_the_call(self, run: Scenario) -> None:
        run.start(dynamic("sub/child"), files={"sub/child.dig": "+x:\n  echo>: x\n"})
        assert run.run_to_end() is AttemptState.SUCCESS
        assert [m.full_name for m in run.agent.published] == ["+wf+c^sub+x"]
        assert run.messages_for("+wf+c^sub+x")[0].workdir == "sub"

    def test_a_missing_target_fails_that_task_only_naming_the_file(self, run: Scenario) -> None:
        text = """
            +both:
              _parallel: true
              +c:
                call>: ${'sub/' + 'none'}
              +other:
                echo>: other
        """
        run.start(text)
        assert run.run_to_end() is AttemptState.ERROR
        assert run.task("+wf+both+other").state is TaskState.SUCCESS
        failed = run.task("+wf+both+c")
        assert failed.state is TaskState.ERROR
        assert failed.error == {
            "message": "'call>' target 'sub/none' does not exist (sub/none.dig)"
        }

    def test_an_invalid_target_fails_naming_its_file_and_line(self, run: Scenario) -> None:
        run.start(dynamic("bad"), files={"bad.dig": "+x:\n  ech>: x\n"})
        assert run.run_to_end() is AttemptState.ERROR
        message = (run.task("+wf+c").error or {})["message"]
        assert message.startswith("'call>' target 'bad.dig' is not a valid workflow")
        assert "bad.dig:2: unknown operator 'ech>'" in message

    def test_a_target_outside_the_project_is_refused(self, run: Scenario) -> None:
        (run.project_dir.parent / "outside.dig").write_text("+x:\n  echo>: x\n")
        run.start(dynamic("../outside"))
        assert run.run_to_end() is AttemptState.ERROR
        assert run.task("+wf+c").error == {
            "message": "'call>' target '../outside.dig' is outside the project"
        }
        assert run.agent.published == []

    def test_a_retry_on_a_dynamic_call_runs_the_called_workflow_again(self, run: Scenario) -> None:
        text = "+c:\n  _retry: 1\n  call>: ${'sub'}.dig\n"
        run.start(text, files={"sub.dig": "+x:\n  echo>: x\n+y:\n  echo>: y\n"})
        assert run.run_to_end(fail=["+wf+c^sub+y"]) is AttemptState.ERROR
        runs = [m.full_name for m in run.agent.published]
        assert runs == ["+wf+c^sub+x", "+wf+c^sub+y"] * 2
        assert run.task("+wf+c").retry_count == 1

    def test_a_retried_attempt_resolves_the_target_again(self, run: Scenario) -> None:
        # Given an attempt whose dynamic call named a file that did not exist yet
        run.start(dynamic("later"))
        assert run.run_to_end() is AttemptState.ERROR
        # When the file is added and the failed tasks are retried
        write_under(run.project_dir, "later.dig", "+x:\n  echo>: x\n")
        before = len(run.agent.published)
        retry(run, RetryMode.FAILED)
        # Then the call finds it this time
        assert run.run_to_end() is AttemptState.SUCCESS
        assert published_in_order(run, before) == ["+wf+c^sub+x"]

    def test_a_retry_with_other_params_calls_the_file_they_name(self, run: Scenario) -> None:
        write_under(run.project_dir, "fixed.dig", "+x:\n  echo>: x\n")
        start_with_session_params(run, "+c:\n  call>: ${child}\n", {"child": "broken"})
        assert run.run_to_end() is AttemptState.ERROR
        with run.engine.begin() as conn:
            run.attempt_id = retry_attempt(
                conn,
                run.attempt_id,
                mode=RetryMode.FAILED,
                from_task=None,
                params={"child": "fixed"},
                now=run.clock.now(),
            )
        run.agent.report(WorkCommitted())
        assert run.run_to_end() is AttemptState.SUCCESS
        assert [m.full_name for m in run.agent.published] == ["+wf+c^sub+x"]

    def test_a_retried_attempt_resumes_inside_a_dynamic_call(self, run: Scenario) -> None:
        run.start(dynamic("sub"), files={"sub.dig": "+x:\n  echo>: x\n+y:\n  echo>: y\n"})
        assert run.run_to_end(fail=["+wf+c^sub+y"]) is AttemptState.ERROR
        before = len(run.agent.published)
        retry(run, RetryMode.FAILED)
        assert run.run_to_end() is AttemptState.SUCCESS
        assert published_in_order(run, before) == ["+wf+c^sub+y"]


class TestWorkdir:
    def test_called_workflows_work_in_their_own_folders(self, run: Scenario) -> None:
        files = {
            "sub/child.dig": "+a:\n  echo>: a\n+deeper:\n  call>: subsub/grandchild.dig\n",
            "sub/subsub/grandchild.dig": "+b:\n  echo>: ${_workdir}\n",
        }
        run.start("+top:\n  echo>: top\n+c:\n  call>: sub/child\n", files=files)
        assert run.run_to_end() is AttemptState.SUCCESS
        (top,) = run.messages_for("+wf+top")
        (a,) = run.messages_for("+wf+c^sub+a")
        (b,) = run.messages_for("+wf+c^sub+deeper^sub+b")
        assert (top.workdir, a.workdir, b.workdir) == ("", "sub", "sub/subsub")
        assert b.command == "sub/subsub"

    def test_a_workdir_in_a_called_file_is_relative_to_its_folder(self, run: Scenario) -> None:
        files = {"sub/child.dig": "_workdir: data\n+a:\n  echo>: a\n"}
        run.start("+c:\n  call>: sub/child\n", files=files)
        assert run.run_to_end() is AttemptState.SUCCESS
        assert run.messages_for("+wf+c^sub+a")[0].workdir == "sub/data"
