"""``tickwork run`` as a user meets it: a real subprocess on a throwaway project and store."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.e2e._run import PROBLEM_LINE, PROGRESS_LINE, Project, tickwork_command
from tests.fault._cluster import is_running
from tests.support.stored_logs import sqlite_url, stored_runs
from tickwork.services.compose.progress import LIVE_ROWS
from tickwork.shared.config import EMBEDDED_SETTINGS

pytestmark = pytest.mark.e2e

SESSION = "2026-01-30T07:00:00+09:00"

# The second task fails until a flag file exists; the first counts its runs in a file.
FLAGGED_WORKFLOW = """
    +extract:
      sh>: echo ran >> extract.runs
    +load:
      sh>: test -f ready.flag && echo ran >> load.runs
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """An empty project with its own state directory."""
    return Project.empty(tmp_path)


class TestInvalidInput:
    def test_an_invalid_workflow_exits_2_with_one_file_line_message_per_problem(
        self, project: Project
    ) -> None:
        # Given a workflow with two mistakes
        project.write(
            "broken.dig",
            """
            +extract:
              shh>: echo extracting
            +load:
              sh>: echo loading
              _retry: lots
            """,
        )

        # When it is run
        run = project.run("broken.dig")

        # Then each mistake is one `file:line: message` line on stderr, and nothing ran
        assert run.exit_code == 2, run.explain()
        problems = [PROBLEM_LINE.match(line) for line in run.stderr.splitlines()]
        assert all(problems), run.stderr
        assert [(p["file"], p["line"]) for p in problems if p] == [
            ("broken.dig", "2"),
            ("broken.dig", "5"),
        ]
        assert "shh>" in run.stderr and "_retry" in run.stderr
        assert run.stdout == ""

    def test_an_invalid_workflow_writes_nothing_to_the_store(self, project: Project) -> None:
        # Given a store that already holds one run
        project.write("good.dig", "+extract:\n  echo>: extracting\n")
        assert project.run("good.dig").exit_code == 0
        assert (project.count_rows("sessions"), project.count_rows("attempts")) == (1, 1)

        # When an invalid workflow is run against it
        project.write("broken.dig", "+load:\n  _parallel: sometimes\n  +a:\n    echo>: a\n")
        run = project.run("broken.dig")

        # Then no session or attempt was added
        assert run.exit_code == 2, run.explain()
        assert (project.count_rows("sessions"), project.count_rows("attempts")) == (1, 1)

    def test_an_invalid_workflow_on_a_new_project_creates_no_store(self, project: Project) -> None:
        project.write("broken.dig", "+load:\n  nope>: x\n")

        run = project.run("broken.dig")

        assert run.exit_code == 2, run.explain()
        assert project.count_rows("sessions") == 0
        assert project.count_rows("attempts") == 0

    @pytest.mark.parametrize(
        ("option", "value", "named"),
        [("-p", "region", "'--param'"), ("-t", "yesterday", "'--session-time'")],
    )
    def test_a_bad_option_value_exits_2_naming_the_option(
        self, project: Project, option: str, value: str, named: str
    ) -> None:
        project.write("good.dig", "+extract:\n  echo>: extracting\n")

        run = project.run("good.dig", option, value)

        assert run.exit_code == 2, run.explain()
        assert named in run.stderr
        assert f"'{value}'" in run.stderr
        assert project.count_rows("sessions") == 0

    def test_a_missing_workflow_file_exits_2(self, project: Project) -> None:
        run = project.run("nowhere.dig")

        assert run.exit_code == 2, run.explain()
        assert "nowhere.dig" in run.stderr
        assert run.stdout == ""

    def test_a_problem_in_a_called_file_names_that_file(self, project: Project) -> None:
        project.write("main.dig", "+load:\n  call>: lib/steps.dig\n")
        project.write("lib/steps.dig", "+validate:\n  echo>: ok\n+archive:\n  _retry: -1\n")

        run = project.run("main.dig")

        assert run.exit_code == 2, run.explain()
        assert run.stderr.startswith("lib/steps.dig:4: '_retry'"), run.stderr

    def test_a_bad_setting_exits_2_naming_the_variable(self, project: Project) -> None:
        project.write("good.dig", "+extract:\n  echo>: extracting\n")

        run = project.run("good.dig", env={"TICKWORK_MAX_TASK_THREADS": "none"})

        assert run.exit_code == 2, run.explain()
        assert "TICKWORK_MAX_TASK_THREADS" in run.stderr


class TestResume:
    def test_running_the_same_session_again_skips_tasks_that_succeeded(
        self, project: Project
    ) -> None:
        # Given a session whose second task failed because its flag file was missing
        project.write("flagged.dig", FLAGGED_WORKFLOW)
        first = project.run("flagged.dig", "-t", SESSION)
        assert first.exit_code == 1, first.explain()
        assert "failed +flagged+load" in first.summary
        assert project.lines("extract.runs") == ["ran"]

        # When the flag exists and the same session runs again
        (project.root / "ready.flag").touch()
        second = project.run("flagged.dig", "-t", SESSION)

        # Then only the failed task ran again, and the summary says what was skipped
        assert second.exit_code == 0, second.explain()
        assert project.lines("extract.runs") == ["ran"]
        assert project.lines("load.runs") == ["ran"]
        assert f"session {SESSION}  attempt 2: success" in second.summary
        assert "skipped (succeeded before; --rerun runs them): +flagged+extract" in second.summary

    def test_rerun_runs_every_task_again(self, project: Project) -> None:
        # Given a session that succeeded
        project.write("flagged.dig", FLAGGED_WORKFLOW)
        (project.root / "ready.flag").touch()
        assert project.run("flagged.dig", "-t", SESSION).exit_code == 0

        # When it runs again with --rerun
        run = project.run("flagged.dig", "-t", SESSION, "--rerun")

        # Then both tasks ran once more
        assert run.exit_code == 0, run.explain()
        assert project.lines("extract.runs") == ["ran", "ran"]
        assert project.lines("load.runs") == ["ran", "ran"]
        assert "skipped" not in run.summary
        assert (project.count_rows("sessions"), project.count_rows("attempts")) == (1, 2)

    def test_a_different_session_time_is_a_new_session(self, project: Project) -> None:
        project.write("flagged.dig", FLAGGED_WORKFLOW)
        (project.root / "ready.flag").touch()

        assert project.run("flagged.dig", "-t", "2026-01-30").exit_code == 0
        assert project.run("flagged.dig", "-t", "2026-01-31").exit_code == 0

        assert project.lines("extract.runs") == ["ran", "ran"]
        assert project.count_rows("sessions") == 2

    def test_a_session_that_succeeded_runs_nothing_again(self, project: Project) -> None:
        project.write("flagged.dig", FLAGGED_WORKFLOW)
        (project.root / "ready.flag").touch()
        assert project.run("flagged.dig", "-t", SESSION).exit_code == 0

        run = project.run("flagged.dig", "-t", SESSION)

        assert run.exit_code == 0, run.explain()
        assert project.lines("extract.runs") == ["ran"]
        assert project.lines("load.runs") == ["ran"]

    def test_a_session_that_succeeded_says_its_tasks_were_skipped(self, project: Project) -> None:
        # Given a session that succeeded
        project.write("flagged.dig", FLAGGED_WORKFLOW)
        (project.root / "ready.flag").touch()
        assert project.run("flagged.dig", "-t", SESSION).exit_code == 0

        # When it runs again
        run = project.run("flagged.dig", "-t", SESSION)

        # Then the summary tells why nothing ran, and has no empty line
        assert all(line.strip() for line in run.summary.splitlines()), run.summary
        assert "skipped" in run.summary

    def test_an_interrupted_run_resumes_where_it_stopped(self, project: Project) -> None:
        # Given a run interrupted (Ctrl-C) while its second task sleeps
        project.write(
            "slow.dig",
            """
            +extract:
              sh>: echo ran >> extract.runs
            +transform:
              sh>: echo started >> transform.runs && sleep 1.5 && echo finished >> transform.runs
            +load:
              sh>: echo ran >> load.runs
            """,
        )
        running = project.start("slow.dig", "-t", SESSION)
        try:
            project.wait_for_line("transform.runs", "started", timeout_seconds=30)
            running.send_signal(signal.SIGINT)
            _, stderr = running.communicate(timeout=30)
        finally:
            running.kill()
        assert running.returncode == 130
        assert f"interrupted: to resume, run it again with -t {SESSION}" in stderr

        # When the same command runs again
        run = project.run("slow.dig", "-t", SESSION)

        # Then the interrupted task was stopped, and ran again from the start; the first
        # task did not
        assert run.exit_code == 0, run.explain()
        assert project.lines("extract.runs") == ["ran"]
        assert project.lines("transform.runs") == ["started", "started", "finished"]
        assert project.lines("load.runs") == ["ran"]

    def test_a_resume_that_skips_a_whole_group_says_so(self, project: Project) -> None:
        # Given a session that failed after a group of tasks succeeded
        project.write(
            "grouped.dig",
            """
            +prepare:
              +extract:
                sh>: echo ran >> extract.runs
              +clean:
                sh>: echo ran >> clean.runs
            +load:
              sh>: test -f ready.flag
            """,
        )
        assert project.run("grouped.dig", "-t", SESSION).exit_code == 1

        # When it resumes
        (project.root / "ready.flag").touch()
        run = project.run("grouped.dig", "-t", SESSION)

        # Then the group was skipped, and the summary says tasks were skipped
        assert run.exit_code == 0, run.explain()
        assert project.lines("extract.runs") == ["ran"]
        # (the group stands for its children: they are not listed one by one)
        assert "skipped (succeeded before; --rerun runs them): +grouped+prepare\n" in run.summary


class TestParams:
    def test_session_variables_reach_sh_as_environment_variables(self, project: Project) -> None:
        # Given a workflow in Tokyo time printing its session variables from the environment
        project.write(
            "daily.dig",
            """
            timezone: Asia/Tokyo
            +show:
              sh>: echo "$session_time $session_date $session_date_compact $session_unixtime $timezone" > vars.txt
            """,  # noqa: E501
        )

        # When it runs for 07:00 in Tokyo (22:00 UTC the day before)
        run = project.run("daily.dig", "-t", SESSION)

        # Then the dates are Tokyo's and the unix time is the instant's
        assert run.exit_code == 0, run.explain()
        unixtime = int(datetime.fromisoformat(SESSION).timestamp())
        assert unixtime == 1769724000
        assert project.read("vars.txt").split() == [
            SESSION,
            "2026-01-30",
            "20260130",
            str(unixtime),
            "Asia/Tokyo",
        ]

    def test_a_naive_session_time_is_read_in_the_workflow_time_zone(self, project: Project) -> None:
        project.write(
            "daily.dig",
            """
            timezone: Asia/Tokyo
            +show:
              echo>: ${session_time} ${session_date}
            """,
        )

        run = project.run("daily.dig", "-t", "2026-01-30 07:00:00")

        assert run.exit_code == 0, run.explain()
        assert ("+daily+show", f"{SESSION} 2026-01-30") in run.output()
        assert f"session {SESSION}" in run.summary

    def test_a_dotted_param_sets_a_nested_value(self, project: Project) -> None:
        project.write("nested.dig", "+show:\n  sh>: echo '${a.b}' > nested.txt\n")

        run = project.run("nested.dig", "-p", "a.b=1")

        assert run.exit_code == 0, run.explain()
        assert project.read("nested.txt").strip() == "1"

    def test_an_export_in_the_workflow_beats_a_param_from_the_command_line(
        self, project: Project
    ) -> None:
        # Given a workflow exporting `region` (as in Digdag, -p does not override _export)
        project.write(
            "regional.dig",
            """
            _export:
              region: eu-west
            +show:
              sh>: echo "$region ${region} $bucket" > region.txt
            """,
        )

        # When both are given on the command line
        run = project.run("regional.dig", "-p", "region=us-east", "-p", "bucket=raw")

        # Then the exported value wins, and a param the workflow does not export gets through
        assert run.exit_code == 0, run.explain()
        assert project.read("region.txt").split() == ["eu-west", "eu-west", "raw"]

    def test_values_stored_by_py_reach_later_tasks_but_not_parallel_siblings(
        self, project: Project
    ) -> None:
        # Given a py> task storing a value, beside a sibling that waits until it is stored
        project.write(
            "tasks_lib.py",
            """
            def store_value():
                return {"shared_value": "from_py", "nested": {"key": "deep"}}
            """,
        )
        project.write(
            "store.dig",
            """
            +compute:
              _parallel: true
              +store_it:
                py>: tasks_lib.store_value
              +sibling:
                sh>: sleep 1 && echo "[$shared_value]" > sibling.txt
            +later:
              sh>: echo "[$shared_value] [${shared_value}] [${nested.key}]" > later.txt
            """,
        )

        # When it runs
        run = project.run("store.dig")

        # Then the task after the group sees the value; the parallel sibling does not
        assert run.exit_code == 0, run.explain()
        assert project.read("later.txt").strip() == "[from_py] [from_py] [deep]"
        assert project.read("sibling.txt").strip() == "[]"

    def test_stored_values_survive_a_resume(self, project: Project) -> None:
        # Given a py> task that stored a value in a session that failed after it
        project.write("tasks_lib.py", "def store_value():\n    return {'batch': 'b-42'}\n")
        project.write(
            "store.dig",
            """
            +prepare:
              py>: tasks_lib.store_value
            +load:
              sh>: test -f ready.flag && echo "${batch}" > batch.txt
            """,
        )
        assert project.run("store.dig", "-t", SESSION).exit_code == 1

        # When the session resumes and skips the py> task
        (project.root / "ready.flag").touch()
        run = project.run("store.dig", "-t", SESSION)

        # Then the task after it still sees the stored value
        assert run.exit_code == 0, run.explain()
        assert project.read("batch.txt").strip() == "b-42"


# An echo> and a sh> task, each printing one line.
GREET_WORKFLOW = """
    +greet:
      echo>: hello from the warehouse
    +count:
      sh>: echo "42 rows"
"""


class TestOutput:
    def test_piped_output_shows_plain_progress_lines_and_echo_output(
        self, project: Project
    ) -> None:
        project.write("greet.dig", GREET_WORKFLOW)

        run = project.run("greet.dig")

        assert run.exit_code == 0, run.explain()
        progress = run.progress()
        assert ("+greet+greet", "success") in progress
        assert ("+greet+count", "success") in progress
        assert ("+greet", "success") in progress
        assert run.output() == [
            ("+greet+greet", "hello from the warehouse"),
            ("+greet+count", "42 rows"),
        ]
        assert "\x1b[" not in run.stdout  # no terminal control codes when piped
        # every line before the summary is a progress line or an output line
        before_summary = run.stdout[: run.stdout.index(run.summary)].splitlines()
        assert len(before_summary) == len(progress) + len(run.output())

    def test_quiet_prints_only_the_summary(self, project: Project) -> None:
        project.write("greet.dig", "+greet:\n  echo>: hello from the warehouse\n")

        run = project.run("greet.dig", "-q")

        assert run.exit_code == 0, run.explain()
        assert run.stdout == run.summary + "\n"

    def test_each_task_logs_into_the_store_of_the_state_dir_and_no_file(
        self, project: Project
    ) -> None:
        project.write("greet.dig", GREET_WORKFLOW)

        run = project.run("greet.dig")

        assert run.exit_code == 0, run.explain()
        assert f"logs: in {project.state_dir / 'tickwork.db'}" in run.summary
        texts = sorted(r.text for r in stored_runs(sqlite_url(project.state_dir), run.attempt_id))
        assert texts == ["42 rows\n", "hello from the warehouse\n"]
        assert not list(project.state_dir.rglob("*.log"))

    def test_a_failed_run_names_the_failed_task_and_its_error(self, project: Project) -> None:
        project.write("broken.dig", "+load:\n  fail>: warehouse is read-only\n")

        run = project.run("broken.dig", "-t", SESSION)

        assert run.exit_code == 1, run.explain()
        assert f"session {SESSION}  attempt 1: error" in run.summary
        assert "failed +broken+load: warehouse is read-only" in run.summary


# Counts its runs in a file and fails the first two.
FLAKY_TASK = """
    +flaky:
      _retry: 2
      sh>: n=$(cat runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > runs; test $n -ge 3
"""

ANSI_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class TestProgressOrder:
    def test_piped_output_lists_each_tasks_states_in_the_order_they_happened(
        self, project: Project
    ) -> None:
        # Given a task, then a group of two
        project.write(
            "order.dig",
            """
            +first:
              sh>: echo one
            +group:
              +a:
                sh>: echo a
              +b:
                sh>: echo b
            """,
        )

        # When it is run piped
        run = project.run("order.dig")

        # Then each operator task was queued, ran and succeeded, in that order; each group
        # started before its children and ended after them, and the second step after the first
        assert run.exit_code == 0, run.explain()
        progress = run.progress()

        def states(task: str) -> list[str]:
            return [state for name, state in progress if name == task]

        for task in ("+order+first", "+order+group+a", "+order+group+b"):
            assert states(task) == ["queued", "running", "success"], run.stdout
        for group in ("+order", "+order+group"):
            assert states(group) == ["planned", "success"], run.stdout
        assert progress[0] == ("+order", "planned")
        assert progress[-1] == ("+order", "success")
        at = progress.index
        assert at(("+order+first", "success")) < at(("+order+group", "planned"))
        assert at(("+order+group", "planned")) < at(("+order+group+a", "queued"))
        assert at(("+order+group+a", "success")) < at(("+order+group+b", "queued"))
        assert at(("+order+group+b", "success")) < at(("+order+group", "success"))

    def test_output_lines_come_between_a_tasks_start_and_its_end(self, project: Project) -> None:
        project.write("say.dig", "+say:\n  sh>: echo hello\n")

        run = project.run("say.dig")

        assert run.exit_code == 0, run.explain()
        lines = [line.split(" ", 1)[1] for line in run.stdout.splitlines()[:5]]
        assert lines == [
            "+say planned",
            "+say+say queued",
            "+say+say running",
            "+say+say: hello",
            "+say+say success",
        ]

    def test_piped_output_shows_each_retry_of_a_task_that_fails_twice_then_succeeds(
        self, project: Project
    ) -> None:
        # Given a task with two retries that fails twice
        project.write("wf.dig", FLAKY_TASK)

        # When it is run piped
        run = project.run("wf.dig")

        # Then both failed runs are shown, each followed by the next run
        assert run.exit_code == 0, run.explain()
        assert [state for task, state in run.progress() if task == "+wf+flaky"] == [
            "queued",
            "running",
            "error",
            "queued",
            "running",
            "error",
            "queued",
            "running",
            "success",
        ]
        retries = [m for m in map(PROGRESS_LINE.match, run.stdout.splitlines()) if m and m["run"]]
        assert [(m["run"], m["runs"], m["wait"]) for m in retries] == [
            ("1", "3", "0s"),
            ("2", "3", "0s"),
        ]
        assert {m["why"] for m in retries} == {"command exited with status 1"}
        # and the summary says the task needed two retries
        assert "retried: +wf+flaky (2 retries)" in run.summary

    def test_a_run_on_a_terminal_ends_with_a_table_of_every_task(self, project: Project) -> None:
        # Given a workflow of more tasks than the live table shows
        names = [f"step{i:02d}" for i in range(LIVE_ROWS + 5)]
        project.write("many.dig", "".join(f"+{name}:\n  echo>: {name}\n" for name in names))

        # When it is run on a terminal shorter than the table
        run = project.run_on_terminal("many.dig", lines=10)

        # Then the last table drawn before the summary names every task
        assert run.exit_code == 0, run.explain()
        before_summary = run.stdout[: run.stdout.rindex("session ")]
        last_frame = ANSI_CONTROL.sub("", before_summary.split("\x1b[2K")[-1])
        shown = re.findall(r"│ (\+many\S*)\s+│ (\w+)", last_frame)
        tasks = ["+many", *(f"+many+{name}" for name in names)]
        assert shown == [(task, "success") for task in tasks], last_frame

    def test_a_failed_runs_summary_shows_the_end_of_the_tasks_log(self, project: Project) -> None:
        # Given a task that prints twelve lines, then fails
        project.write(
            "noisy.dig",
            """
            +load:
              sh>: for i in $(seq 1 12); do echo "row $i"; done; exit 3
            """,
        )

        # When it is run
        run = project.run("noisy.dig")

        # Then the summary names the task and its error, then its log's last ten lines
        assert run.exit_code == 1, run.explain()
        lines = run.summary.splitlines()
        failed = lines.index("  failed +noisy+load: command exited with status 3")
        assert lines[failed + 1 : failed + 11] == [f"    | row {i}" for i in range(3, 13)]
        assert not lines[failed + 11].startswith("    | ")


def test_a_run_on_postgresql_succeeds_and_resumes(project: Project, postgres_url: str) -> None:
    # Given TICKWORK_DATABASE_URL naming an empty PostgreSQL database
    env = {"TICKWORK_DATABASE_URL": postgres_url}
    project.write("flagged.dig", FLAGGED_WORKFLOW)

    # When a session fails, then resumes once its flag exists
    first = project.run("flagged.dig", "-t", SESSION, env=env)
    (project.root / "ready.flag").touch()
    second = project.run("flagged.dig", "-t", SESSION, env=env)

    # Then it behaves as on SQLite, and the runs are recorded in PostgreSQL, not SQLite
    assert first.exit_code == 1, first.explain()
    assert second.exit_code == 0, second.explain()
    assert project.lines("extract.runs") == ["ran"]
    assert project.lines("load.runs") == ["ran"]
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            sessions = conn.execute(sa.text("SELECT count(*) FROM sessions")).scalar_one()
            states = conn.execute(sa.text("SELECT state FROM attempts ORDER BY id")).scalars()
            assert (sessions, list(states)) == (1, ["error", "success"])
    finally:
        engine.dispose()
    assert not project.database_path.exists()


class TestLimits:
    def test_a_command_past_its_time_limit_is_killed_with_its_whole_process_group(
        self, project: Project
    ) -> None:
        # Given a command that starts a background child and then sleeps past the limit
        project.write(
            "slow.dig",
            """
            +stuck:
              sh>: sleep 60 & echo $! > child.pid; sleep 60
            """,
        )

        # When it runs with a 1 s time limit
        run = project.run("slow.dig", env={"TICKWORK_TASK_TIMEOUT_SECONDS": "1"})

        # Then the task fails naming the limit, and the background child is gone too
        assert run.exit_code == 1, run.explain()
        assert "failed +slow+stuck: timed out after 1s" in run.summary
        child = int(project.read("child.pid"))
        assert _gone_within(child, seconds=10)

    def test_a_child_that_ignores_sigterm_is_killed_too_when_the_limit_passes(
        self, project: Project
    ) -> None:
        # Given a background child deaf to SIGTERM, and a shell that exits on it
        project.write(
            "deaf.dig",
            """
            +stuck:
              sh>: sh -c 'trap "" TERM; exec sleep 60' & echo $! > child.pid; sleep 60
            """,
        )

        # When the time limit passes
        run = project.run("deaf.dig", env={"TICKWORK_TASK_TIMEOUT_SECONDS": "1"})

        # Then the task fails, and the deaf child is gone as well
        assert run.exit_code == 1, run.explain()
        assert _gone_within(int(project.read("child.pid")), seconds=10)

    def test_a_command_over_its_memory_limit_fails(self, project: Project) -> None:
        # Given a command that allocates 300 MiB
        project.write(
            "hog.dig",
            """
            +hog:
              sh>: python3 -c "x = bytearray(300 * 1024 * 1024); print('allocated')"
            """,
        )

        # When it runs under a 100 MiB limit, and then without one
        limited = project.run("hog.dig", "-t", SESSION, env={"TICKWORK_TASK_MAX_MEMORY_MB": "100"})
        unlimited = project.run("hog.dig", "-t", "2026-01-31")

        # Then only the limited run fails
        assert limited.exit_code == 1, limited.explain()
        assert unlimited.exit_code == 0, unlimited.explain()


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").exists() and " Z " in Path(f"/proc/{pid}/stat").read_text():
            return True  # a zombie waiting for its reaper is dead
        time.sleep(0.05)
    return False


def test_a_second_run_of_the_same_session_cancels_the_first(project: Project) -> None:
    # Given a run whose task takes a while the first time it runs (long enough for the
    # second run to start however slow the machine) and none after that
    project.write(
        "slow.dig",
        """
        +work:
          sh>: >
            runs=$$(cat work.runs 2>/dev/null | wc -l); echo started >> work.runs;
            if [ "$$runs" -eq 0 ]; then sleep 60; fi; echo finished >> work.runs
        """,
    )
    first = project.start("slow.dig", "-t", SESSION)
    try:
        project.wait_for_line("work.runs", "started", timeout_seconds=30)

        # When the same session is run again meanwhile
        second = project.run("slow.dig", "-t", SESSION)
        stdout, _ = first.communicate(timeout=30)  # well before its sleep 60 would end
    finally:
        first.kill()

    # Then the first run ends canceled (it does not hang), and the second one succeeds
    assert first.returncode == 1
    assert "attempt 1: canceled" in stdout
    assert second.exit_code == 0, second.explain()
    assert f"session {SESSION}  attempt 2: success" in second.summary


class TestUnusableSurroundings:
    @pytest.mark.parametrize(
        ("url", "expected", "status"),
        [
            ("postgresql://nobody@127.0.0.1:1/x", "error: cannot use database", 5),
            ("foo://", "error: unsupported database 'foo'", 2),
            ("not a url", "error: cannot read database URL 'not a url'", 2),
            ("sqlite:////nonexistent/dir/x.db", "error: cannot use database", 5),
        ],
    )
    def test_a_database_that_cannot_be_used_is_one_line_and_status_2_or_5_if_out_of_reach(
        self, project: Project, url: str, expected: str, status: int
    ) -> None:
        project.write("wf.dig", "+a:\n  echo>: hi\n")
        run = project.run("wf.dig", env={"TICKWORK_DATABASE_URL": url})
        assert run.exit_code == status, run.explain()
        assert run.stderr.startswith(expected)
        assert len(run.stderr.strip().splitlines()) == 1
        assert "Traceback" not in run.stderr

    def test_a_database_password_is_not_shown(self, project: Project) -> None:
        project.write("wf.dig", "+a:\n  echo>: hi\n")
        url = "postgresql://nobody:hunter2@127.0.0.1:1/x"
        run = project.run("wf.dig", env={"TICKWORK_DATABASE_URL": url})
        assert run.exit_code == 5  # a server out of reach
        assert "hunter2" not in run.stderr

    def test_a_missing_project_directory_is_refused(self, project: Project) -> None:
        project.write("wf.dig", "+a:\n  echo>: hi\n")
        run = project.run("wf.dig", "--project", str(project.root / "nowhere"))
        assert run.exit_code == 2
        assert "'--project'" in run.stderr
        assert not (project.root / "nowhere").exists()

    def test_a_state_directory_that_is_a_file_is_one_line_and_status_2(
        self, project: Project
    ) -> None:
        project.write("wf.dig", "+a:\n  echo>: hi\n")
        blocker = project.write("state-file", "not a directory\n")
        run = project.run("wf.dig", env={"TICKWORK_STATE_DIR": str(blocker)})
        assert run.exit_code == 2
        assert run.stderr.startswith("error: cannot use state directory")


class TestTaskProcesses:
    def test_py_finds_the_projects_own_packages_even_named_like_tickworks(
        self, project: Project
    ) -> None:
        project.write("services/__init__.py", "")
        project.write("services/etl.py", "def count(rows):\n    return {'n': int(rows) * 2}\n")
        project.write(
            "wf.dig",
            """
            +count:
              py>: services.etl.count
              rows: 21
            +show:
              sh>: echo "n=${n}" > n.txt
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        assert project.lines("n.txt") == ["n=42"]

    def test_a_commands_background_processes_end_with_its_task(self, project: Project) -> None:
        project.write(
            "wf.dig",
            """
            +start:
              sh>: sleep 60 & echo $! > child.pid
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        assert _gone_within(int(project.read("child.pid")), seconds=10)

    def test_tasks_get_their_identity_but_no_tickwork_settings_in_their_environment(
        self, project: Project
    ) -> None:
        project.write("wf.dig", "+env:\n  sh>: env > env.txt\n")
        run = project.run("wf.dig", env={"TICKWORK_MAX_TASK_THREADS": "3"})
        assert run.exit_code == 0, run.explain()
        names = sorted(
            line.partition("=")[0]
            for line in project.lines("env.txt")
            if line.startswith("TICKWORK_")
        )
        assert names == [
            "TICKWORK_ATTEMPT_ID",
            "TICKWORK_LEASE_TOKEN",
            "TICKWORK_OUTPUT",
            "TICKWORK_TASK_ID",
        ]

    def test_a_param_with_a_dollar_sign_reaches_the_command_unchanged(
        self, project: Project
    ) -> None:
        project.write("wf.dig", '+show:\n  sh>: printf "%s" "$pw" > pw.txt\n')
        run = project.run("wf.dig", "-p", "pw=a$$b${c}")
        assert run.exit_code == 0, run.explain()
        assert project.read("pw.txt") == "a$$b${c}"

    def test_tasks_whose_names_look_alike_keep_separate_logs(self, project: Project) -> None:
        project.write(
            "wf.dig",
            """
            _parallel: true
            +タスク:
              echo>: first
            +データ:
              echo>: second
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        logs = sorted(r.text for r in stored_runs(sqlite_url(project.state_dir)))
        assert logs == ["first\n", "second\n"]


def test_run_help_lists_every_setting_it_reads() -> None:
    completed = subprocess.run(
        [*tickwork_command(), "run", "--help"], capture_output=True, text=True, timeout=30
    )
    assert completed.returncode == 0
    for setting in EMBEDDED_SETTINGS:
        assert f"{setting.name}: {setting.doc}" in completed.stdout


class TestShellOutput:
    def test_a_shell_command_stores_key_value_lines_for_later_tasks(self, project: Project) -> None:
        project.write(
            "wf.dig",
            """
            +produce:
              sh>: echo "greeting=hello world" >> "$TICKWORK_OUTPUT"
            +consume:
              sh>: echo "${greeting}" > got.txt
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        assert project.read("got.txt") == "hello world\n"

    def test_a_shell_command_stores_a_json_object(self, project: Project) -> None:
        project.write(
            "wf.dig",
            """
            +produce:
              sh>: 'echo "{\\"count\\": 3, \\"names\\": [\\"a\\"]}" > "$TICKWORK_OUTPUT"'
            +consume:
              sh>: echo "${count + 1} ${names[0]}" > got.txt
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        assert project.read("got.txt") == "4 a\n"

    def test_an_output_line_that_is_not_key_value_fails_the_task_naming_the_line(
        self, project: Project
    ) -> None:
        project.write(
            "wf.dig",
            """
            +produce:
              sh>: printf 'a=1\\nnot a pair\\n' > "$TICKWORK_OUTPUT"
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 1
        assert "$TICKWORK_OUTPUT line 2: expected key=value, got 'not a pair'" in run.stdout

    def test_nop_succeeds_without_being_dispatched_to_an_agent(self, project: Project) -> None:
        project.write("wf.dig", "+nothing:\n  nop>:\n+after:\n  sh>: touch ran\n")
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        assert (project.root / "ran").exists()
        assert [state for task, state in run.progress() if task == "+wf+nothing"] == ["success"]


class TestTaskTimeout:
    def test_a_task_timeout_stops_the_command_and_fails_the_task(self, project: Project) -> None:
        project.write("wf.dig", "+slow:\n  _timeout: 1s\n  sh>: sleep 30 & echo $$! > pid; wait\n")
        started = time.monotonic()
        run = project.run("wf.dig")
        assert run.exit_code == 1, run.explain()
        assert "failed +wf+slow: timed out after 1s" in run.summary
        assert time.monotonic() - started < 20  # not the 30 s the command would take
        assert not is_running(int(project.read("pid")))

    def test_a_bad_timeout_is_reported_at_its_line(self, project: Project) -> None:
        project.write("wf.dig", "+slow:\n  _timeout: forever\n  sh>: sleep 30\n")
        run = project.run("wf.dig")
        assert run.exit_code == 2
        assert run.stderr.startswith("wf.dig:2: '_timeout' expected a duration")


class TestTaskEnvironment:
    def test_env_of_a_group_reaches_its_tasks_rendered_and_a_tasks_own_env_wins(
        self, project: Project
    ) -> None:
        project.write(
            "wf.dig",
            """
            _export:
              region: eu
            +load:
              _env:
                TARGET: db-${region}
                MODE: batch
              +plain:
                sh>: echo "$TARGET $MODE" > plain.txt
              +own:
                _env:
                  MODE: stream
                sh>: echo "$TARGET $MODE" > own.txt
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        assert project.read("plain.txt") == "db-eu batch\n"
        assert project.read("own.txt") == "db-eu stream\n"

    def test_an_env_name_that_is_not_a_variable_or_is_tickworks_is_reported(
        self, project: Project
    ) -> None:
        project.write(
            "wf.dig",
            "+t:\n  _env:\n    not-a-name: x\n    TICKWORK_TASK_ID: 1\n  sh>: env\n",
        )
        run = project.run("wf.dig")
        assert run.exit_code == 2
        assert run.stderr.splitlines() == [
            "wf.dig:3: '_env' name 'not-a-name' is not a variable name",
            "wf.dig:4: '_env' name 'TICKWORK_TASK_ID': TICKWORK_ names are tickwork's",
        ]


class TestBuiltInVariables:
    def test_a_scheduled_workflow_sees_the_slots_around_its_session_as_digdag_does(
        self, project: Project
    ) -> None:
        # Digdag's acceptance/built_in_variables: daily, -t "2016-01-02 03:04:05", UTC
        project.write(
            "wf.dig",
            """
            schedule:
              daily>: 00:00:00
            +show:
              _export:
                times: ${last_session_time} ${next_session_date_compact}
                seconds: ${session_unixtime} ${last_session_unixtime}
              sh>: echo "${times} ${seconds}" > vars.txt
            """,
        )
        run = project.run("wf.dig", "-t", "2016-01-02 03:04:05")
        assert run.exit_code == 0, run.explain()
        assert project.read("vars.txt").split() == [
            "2016-01-02T00:00:00+00:00",
            "20160103",
            "1451703845",
            "1451692800",
        ]

    def test_last_executed_session_time_is_the_session_that_ran_before_or_empty(
        self, project: Project
    ) -> None:
        project.write(
            "wf.dig",
            '+show:\n  sh>: echo "[${last_executed_session_time}]" >> seen.txt\n',
        )
        assert project.run("wf.dig", "-t", "2026-01-01").exit_code == 0
        assert project.run("wf.dig", "-t", "2026-01-03").exit_code == 0
        assert project.lines("seen.txt") == ["[]", "[2026-01-01T00:00:00+00:00]"]
