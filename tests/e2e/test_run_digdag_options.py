"""``tickwork run`` with the options of Digdag's ``run``: params from a file (``-P``),
session keywords (``-t last``), a partial rerun from a task (``--start``), a dry run that
shows the tasks and their params (``-dE``), and a limit on tasks run at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._run import Project

pytestmark = pytest.mark.e2e

STEPS = """
    +a:
      sh>: echo "a ${greeting}" >> out.txt
    +b:
      sh>: echo "b ${who.name}" >> out.txt
    +c:
      sh>: echo c >> out.txt
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    made = Project.empty(tmp_path)
    made.write("wf.dig", STEPS)
    made.write("params.yml", "greeting: hi\nwho:\n  name: ann\n")
    return made


def test_a_params_file_gives_session_params_and_p_wins_over_it(project: Project) -> None:
    run = project.run("wf.dig", "-P", "params.yml", "-p", "who.name=bo", "-t", "2026-01-01")
    assert run.exit_code == 0, run.explain()
    assert project.lines("out.txt") == ["a hi", "b bo", "c"]


def test_a_params_file_that_is_not_yaml_is_refused_at_its_line(project: Project) -> None:
    project.write("bad.yml", "who:\n  name: [ann\n")
    run = project.run("wf.dig", "-P", "bad.yml")
    assert run.exit_code == 2
    assert "bad.yml:3:" in run.stderr and "Traceback" not in run.stderr
    assert not (project.root / "out.txt").exists()


def test_start_reruns_a_task_and_what_follows_it_in_the_last_session(project: Project) -> None:
    assert project.run("wf.dig", "-P", "params.yml", "-t", "2026-01-01").exit_code == 0
    again = project.run("wf.dig", "-P", "params.yml", "-t", "last", "--start", "+b")
    assert again.exit_code == 0, again.explain()
    assert "session 2026-01-01T00:00:00+00:00" in again.stdout
    assert "skipped (succeeded before; --rerun runs them): +wf+a" in again.stdout
    assert project.lines("out.txt") == ["a hi", "b ann", "c", "b ann", "c"]
    missing = project.run("wf.dig", "-t", "last", "--start", "+nope")
    assert missing.exit_code == 2 and "--start: no task '+nope' in this workflow" in missing.stderr


def test_a_dry_run_shows_the_tasks_and_their_params_and_runs_nothing(project: Project) -> None:
    run = project.run("wf.dig", "-dE", "-P", "params.yml", "-t", "2026-01-02")
    assert run.exit_code == 0, run.explain()
    lines = run.stdout.splitlines()
    assert lines[0] == "session 2026-01-02T00:00:00+00:00 (dry run: nothing runs)"
    assert '  +wf+b  sh>: "echo \\"b ${who.name}\\" >> out.txt"' in lines
    params = lines[lines.index('  +wf+b  sh>: "echo \\"b ${who.name}\\" >> out.txt"') + 1]
    assert '"who": {"name": "ann"}' in params and '"session_date": "2026-01-02"' in params
    assert not (project.root / "out.txt").exists()
    assert not (project.root / ".tickwork").exists()


def test_max_task_threads_one_runs_a_parallel_group_one_task_at_a_time(
    project: Project,
) -> None:
    project.write(
        "par.dig",
        """
        +both:
          _parallel: true
          +x:
            sh>: echo start >> seq.txt; sleep 0.5; echo end >> seq.txt
          +y:
            sh>: echo start >> seq.txt; sleep 0.5; echo end >> seq.txt
        """,
    )
    run = project.run("par.dig", "--max-task-threads", "1")
    assert run.exit_code == 0, run.explain()
    assert project.lines("seq.txt") == ["start", "end", "start", "end"]


def test_check_warns_of_an_option_nothing_reads_and_still_passes(project: Project) -> None:
    project.write("typo.dig", "+a:\n  echo>: hi\n  colour: red\n")
    checked = project.check("typo.dig")
    assert checked.exit_code == 0, checked.explain()
    assert "typo.dig:3: warning: 'echo>' does not read 'colour'" in checked.stderr
    ran = project.run("typo.dig")
    assert ran.exit_code == 0 and "warning: 'echo>' does not read 'colour'" in ran.stderr


def test_end_and_goal_run_part_of_a_workflow_and_say_what_they_left_out(
    project: Project,
) -> None:
    ended = project.run("wf.dig", "-P", "params.yml", "-t", "2026-01-03", "--end", "+b")
    assert ended.exit_code == 0, ended.explain()
    assert "not run (--goal/--end): +wf+b, +wf+c" in ended.stdout
    assert project.lines("out.txt") == ["a hi"]
    goal = project.run("wf.dig", "-P", "params.yml", "-t", "last", "--goal", "+b")
    assert goal.exit_code == 0, goal.explain()
    assert "skipped (succeeded before; --rerun runs them): +wf+a" in goal.stdout
    assert project.lines("out.txt") == ["a hi", "b ann"]
    refused = project.run("wf.dig", "--goal", "+b", "--end", "+c")
    assert refused.exit_code == 2 and "do not work together" in refused.stderr


def test_show_params_prints_the_params_each_task_ran_with(project: Project) -> None:
    run = project.run("wf.dig", "-E", "-P", "params.yml", "-t", "2026-01-04")
    assert run.exit_code == 0, run.explain()
    shown = [line for line in run.stdout.splitlines() if "+wf+b: params: {" in line]
    assert len(shown) == 1 and '"who": {"name": "ann"}' in shown[0]
    assert '"task_name": "+wf+b"' in shown[0]
