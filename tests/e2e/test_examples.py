"""The workflows in examples/ do what their comments say, run by ``tickwork run`` in a copy.

Every task of the examples notes its name in ``.tickwork/out/<example>.log``; these notes
tell which tasks ran, in which order and how many times.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e._examples_database import SECRET_KEY, pg_secrets
from tests.e2e._run import (
    EXAMPLES_DIR,
    RUN_TIMEOUT_SECONDS,
    Project,
    Run,
    max_running_at_once,
    tickwork_command,
)
from tests.e2e._standalone import serving_local_store
from tests.e2e._status_service import StatusService, serve_status
from tests.support.servers import libpq_conninfo, throwaway_postgres_database
from tests.support.stored_logs import sqlite_url, stored_runs

pytestmark = pytest.mark.e2e

SESSION = "2026-01-30"


RunExample = Callable[[str], tuple[Project, Run]]


@pytest.fixture
def examples(tmp_path: Path) -> Project:
    """A fresh copy of examples/ with its own state directory; the repository stays clean."""
    return Project.copy_of_examples(tmp_path)


@pytest.fixture(scope="module")
def run_example(tmp_path_factory: pytest.TempPathFactory) -> RunExample:
    """Runs an example once, in its own fresh copy, for all the tests that read the result."""
    done: dict[str, tuple[Project, Run]] = {}

    def run(workflow: str) -> tuple[Project, Run]:
        if workflow not in done:
            project = Project.copy_of_examples(tmp_path_factory.mktemp(Path(workflow).stem))
            done[workflow] = (project, project.run(workflow, "-t", SESSION))
        return done[workflow]

    return run


class TestHello:
    def test_hello_runs_every_step_of_the_tour_once_in_order(self, run_example: RunExample) -> None:
        # When the tour runs
        examples, run = run_example("hello.dig")

        # Then it succeeds: the workspace first, the three fetches in any order, then the
        # py> task and the report that uses the value it stored
        assert run.exit_code == 0, run.explain()
        notes = examples.notes("hello")
        assert notes[0] == "prepare_workspace"
        assert sorted(notes[1:4]) == ["fetch_customers", "fetch_orders", "fetch_payments"]
        assert notes[4:] == ["count_rows", "report"]
        assert "session 2026-01-30T00:00:00+00:00  attempt 1: success" in run.summary
        assert "success: 7" in run.summary

    def test_hello_shows_greetings_and_the_stored_row_count(self, run_example: RunExample) -> None:
        _, run = run_example("hello.dig")

        output = dict(run.output())
        assert output["+hello+welcome"] == (
            "Hello from tickwork! This is the 2026-01-30 session of the data platform team."
        )
        assert output["+hello+report"] == "loaded 360 rows, see you soon!"


def test_sequence_runs_tasks_and_nested_groups_in_written_order(run_example: RunExample) -> None:
    examples, run = run_example("sequence.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("sequence") == ["extract", "clean", "enrich", "load"]
    assert "success: 4" in run.summary


class TestParallelLimit:
    def test_partitions_never_run_more_than_two_at_once(self, run_example: RunExample) -> None:
        examples, run = run_example("parallel_limit.dig")

        assert run.exit_code == 0, run.explain()
        notes = examples.notes("parallel_limit")
        assert max_running_at_once(notes) == 2, notes

    def test_every_partition_runs_once_before_publish(self, run_example: RunExample) -> None:
        examples, run = run_example("parallel_limit.dig")

        assert run.exit_code == 0, run.explain()
        notes = examples.notes("parallel_limit")
        days = [f"day_{n}" for n in range(1, 6)]
        assert sorted(n for n in notes if n.startswith("start")) == [f"start {d}" for d in days]
        assert sorted(n for n in notes if n.startswith("end")) == [f"end {d}" for d in days]
        assert notes[-1] == "publish"
        assert "success: 6" in run.summary


class TestPools:
    def test_pools_example_runs_two_loads_at_most_urgent_first_backfills_last(
        self, examples: Project
    ) -> None:
        run = examples.run("pools.dig", "-t", SESSION, "--pool", "warehouse=2")

        assert run.exit_code == 0, run.explain()
        notes = examples.notes("pools")
        assert max_running_at_once(notes) == 2, notes
        starts = [n.removeprefix("start ") for n in notes if n.startswith("start")]
        assert sorted(starts[:2]) == ["daily", "urgent_fix"], notes
        assert sorted(starts[2:]) == ["backfill_1", "backfill_2"], notes
        assert notes[-1] == "publish"

    def test_without_the_pool_the_run_says_which_to_give_and_runs_nothing(
        self, examples: Project
    ) -> None:
        run = examples.run("pools.dig", "-t", SESSION)

        assert run.exit_code == 2, run.explain()
        assert "give --pool warehouse=SLOTS" in run.stderr
        assert examples.notes("pools") == []


class TestLoops:
    def test_loops_example_runs_each_region_loop_index_and_the_true_branch_once(
        self, run_example: RunExample
    ) -> None:
        examples, run = run_example("loops.dig")

        assert run.exit_code == 0, run.explain()
        notes = examples.notes("loops")
        assert sorted(notes[:3]) == ["load ap", "load eu", "load us"]
        assert notes[3:] == ["poll 0", "poll 1", "publish"]


class TestRetryBackoff:
    def test_retry_example_runs_the_flaky_task_three_times(self, run_example: RunExample) -> None:
        examples, run = run_example("retry_backoff.dig")

        assert run.exit_code == 0, run.explain()
        assert examples.notes("retry_backoff") == [
            "download attempt 1",
            "download attempt 2",
            "download attempt 3",
            "load",
        ]
        assert "success: 3" in run.summary
        assert ("+retry_backoff+download", "source not ready yet (attempt 1)") in run.output()

    def test_retry_waits_grow_exponentially(self, run_example: RunExample) -> None:
        # Given waits of 0.5 s then 1 s (a constant interval would wait 0.5 s twice)
        examples, run = run_example("retry_backoff.dig")

        # Then the three runs were handed out at least that far apart
        assert run.exit_code == 0, run.explain()
        runs = stored_runs(sqlite_url(examples.state_dir), run.attempt_id)
        written = [r.dispatched_at.timestamp() for r in runs if "download" in r.task]
        assert len(written) == 3, runs
        assert written[1] - written[0] >= 0.5
        assert written[2] - written[1] >= 1.0


def test_error_handler_example_fails_on_purpose_and_alerts(run_example: RunExample) -> None:
    # When the workflow runs and +load fails
    examples, run = run_example("error_handler.dig")

    # Then the _error task saw the message, +publish never ran, and the failure stands
    assert run.exit_code == 1, run.explain()
    assert examples.notes("error_handler") == [
        "extract",
        "alert: warehouse is read-only for maintenance",
    ]
    assert "attempt 1: error" in run.summary
    assert "failed +error_handler+load: warehouse is read-only for maintenance" in run.summary


def test_call_and_py_share_stored_values_with_the_called_workflow(run_example: RunExample) -> None:
    examples, run = run_example("call_and_py.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("call_and_py") == [
        "extract_orders shop_db",
        "validate 3 orders",
        "archive_orders orders-2026-01-30.csv.gz",
        "report 3 orders in orders-2026-01-30.csv.gz",
    ]
    assert "success: 5" in run.summary


class TestCheck:
    def test_check_runs_after_its_task_and_before_the_next(self, run_example: RunExample) -> None:
        examples, run = run_example("check.dig")

        assert run.exit_code == 0, run.explain()
        assert examples.notes("check") == ["export_orders", "check_rows 3", "publish"]
        assert "success: 3" in run.summary

    def test_a_failing_check_fails_the_workflow(self, examples: Project) -> None:
        # Given the check expects more rows than the export writes (as its comment suggests)
        workflow = examples.root / "check.dig"
        text = workflow.read_text()
        assert "min_rows: 3" in text
        workflow.write_text(text.replace("min_rows: 3", "min_rows: 10"))

        # When it runs
        run = examples.run("check.dig", "-t", SESSION)

        # Then the task fails and +publish never runs
        assert run.exit_code == 1, run.explain()
        assert examples.notes("check") == ["export_orders", "check_rows 3"]
        assert "attempt 1: error" in run.summary


def test_background_task_runs_alongside_the_one_before_and_load_waits(
    run_example: RunExample,
) -> None:
    examples, run = run_example("background.dig")

    assert run.exit_code == 0, run.explain()
    notes = examples.notes("background")
    assert sorted(notes[:2]) == ["start extract_orders", "start warm_dashboard_cache"], notes
    assert sorted(notes[2:4]) == ["end extract_orders", "end warm_dashboard_cache"], notes
    assert notes[4:] == ["load"]
    assert "success: 3" in run.summary


def test_delay_starts_publish_a_second_after_export_and_report_does_not_wait(
    run_example: RunExample,
) -> None:
    examples, run = run_example("delay.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("delay") == ["export", "publish", "report"]
    assert ("+delay+publish", "delayed") in run.progress()
    assert "+delay+publish delayed until " in run.stdout
    assert ("+delay+report", "delayed") not in run.progress()
    # +publish ran at least a second after +export
    runs = stored_runs(sqlite_url(examples.state_dir), run.attempt_id)
    export, publish = (
        max(r.dispatched_at.timestamp() for r in runs if r.task.endswith(name))
        for name in ("+export", "+publish")
    )
    assert publish - export >= 1.0


class TestTheExamplesDirectory:
    def test_every_example_passes_tickwork_check(self) -> None:
        workflows = sorted(str(p) for p in EXAMPLES_DIR.glob("*.dig"))
        checked = subprocess.run(
            [*tickwork_command(), "check", *workflows],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_SECONDS,
            check=False,
        )

        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.count(".dig: ok (") == len(workflows)
        assert "notifications.yml: ok (1 notification rule)" in checked.stdout

    def test_every_example_is_listed_in_the_readme(self) -> None:
        readme = (EXAMPLES_DIR / "README.md").read_text(encoding="utf-8")

        for workflow in EXAMPLES_DIR.glob("*.dig"):
            assert f"`{workflow.name}`" in readme

    def test_every_example_has_a_test_here(self) -> None:
        tests = Path(__file__).read_text(encoding="utf-8")

        for workflow in EXAMPLES_DIR.glob("*.dig"):
            assert f'"{workflow.name}"' in tests


def test_scheduled_runs_its_current_session_and_notes_the_tick(run_example: RunExample) -> None:
    examples, run = run_example("scheduled.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("scheduled") == ["tick"]
    assert "success: 2" in run.summary


class TestDailyEtl:
    def test_each_step_works_on_the_sessions_day_and_docs_refresh_in_the_background(
        self, run_example: RunExample
    ) -> None:
        examples, run = run_example("daily_etl.dig")

        assert run.exit_code == 0, run.explain()
        notes = examples.notes("daily_etl")
        # The background task runs beside extract, transform and load; they keep their order
        steps = [n for n in notes if not n.startswith("refresh_docs")]
        assert steps == [
            "extract events_20260130",
            "transform events_20260130",
            "load events partition 2026-01-30",
        ]
        assert notes.count("refresh_docs events") == 1
        assert examples.read(".tickwork/out/stage/events_20260130.clicks").strip() == "1"
        assert ("+daily_etl+done", "loaded events for 2026-01-30") in run.output()
        assert "success: 5" in run.summary


def test_retry_notify_runs_the_call_three_times_then_notifies_and_fails(
    run_example: RunExample,
) -> None:
    # When the call fails on every run
    examples, run = run_example("retry_notify.dig")

    # Then it ran once and was retried twice, the _error task notified, +publish never ran
    assert run.exit_code == 1, run.explain()
    assert examples.notes("retry_notify") == [
        "call_partner_api run 0",
        "call_partner_api run 1",
        "call_partner_api run 2",
        "notify: command exited with status 1",
    ]
    assert "attempt 1: error" in run.summary
    assert "failed +retry_notify+call_partner_api" in run.summary


def test_report_after_etl_runs_by_hand_with_its_own_session_time(
    run_example: RunExample,
) -> None:
    # When the triggered workflow is run by hand (no ${trigger} then)
    _, run = run_example("report_after_etl.dig")

    # Then it reports on its own session time
    assert run.exit_code == 0, run.explain()
    assert any(line.startswith("report for ") for _, line in run.output())


class TestFanOut:
    def test_every_table_and_day_is_exported_once_at_most_three_at_once(
        self, run_example: RunExample
    ) -> None:
        examples, run = run_example("fan_out.dig")

        assert run.exit_code == 0, run.explain()
        notes = examples.notes("fan_out")
        exports = [f"{t}_{d}" for t in ("customers", "orders", "payments") for d in ("mon", "tue")]
        assert sorted(n for n in notes if n.startswith("start")) == [f"start {e}" for e in exports]
        assert sorted(n for n in notes if n.startswith("end")) == [f"end {e}" for e in exports]
        assert max_running_at_once(notes) == 3, notes
        assert notes[-1] == "summary"
        assert "success: 8" in run.summary


def test_branch_takes_do_on_a_stored_string_and_else_do_on_stored_numbers(
    run_example: RunExample,
) -> None:
    examples, run = run_example("branch.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("branch") == [
        "inspect",
        "full_refresh",
        "skip vacuum (2 of 10 changed)",
    ]


def test_shared_steps_calls_the_sub_workflow_once_per_dataset_in_order(
    run_example: RunExample,
) -> None:
    examples, run = run_example("shared_steps.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("shared_steps") == [
        "build",
        "snapshot orders",
        "announce orders",
        "snapshot customers",
        "announce customers",
    ]
    assert ("+shared_steps+publish_customers^sub+announce", "success") in run.progress()


class TestPollUntilReady:
    def test_the_loop_probes_three_times_waiting_between_probes_then_loads(
        self, run_example: RunExample
    ) -> None:
        examples, run = run_example("poll_until_ready.dig")

        assert run.exit_code == 0, run.explain()
        assert examples.notes("poll_until_ready") == ["probe 0", "probe 1", "probe 2", "load"]
        pauses = [f"+poll_until_ready+poll^sub+loop-{i}+pause" for i in range(3)]
        assert [(p, "delayed") for p in pauses] == [
            (t, s) for t, s in run.progress() if t in pauses and s == "delayed"
        ]

    def test_each_wait_holds_the_next_probe_back_a_second(self, run_example: RunExample) -> None:
        examples, run = run_example("poll_until_ready.dig")

        runs = stored_runs(sqlite_url(examples.state_dir), run.attempt_id)
        probes = [r.dispatched_at.timestamp() for r in runs if "probe" in r.task]
        assert len(probes) == 3, runs
        assert probes[1] - probes[0] >= 1.0
        assert probes[2] - probes[1] >= 1.0


@pytest.fixture
def status_service() -> Iterator[StatusService]:
    with serve_status() as service:
        yield service


def test_http_status_stores_the_answer_for_the_next_task(
    examples: Project, status_service: StatusService
) -> None:
    # When the workflow runs against a local status service
    run = examples.run("http_status.dig", "-t", SESSION, "-p", f"status_url={status_service.url}")

    # Then the service was asked once, with an idempotency key, and +report used the answer
    assert run.exit_code == 0, run.explain()
    ((method, path, key),) = status_service.seen
    assert (method, path) == ("GET", "/status")
    assert key
    assert examples.notes("http_status") == ["upstream ready with 42 rows"]


class TestBackfill:
    def test_a_session_loads_its_own_day_knowing_the_schedules_neighbours(
        self, run_example: RunExample
    ) -> None:
        examples, run = run_example("backfill.dig")

        assert run.exit_code == 0, run.explain()
        assert examples.notes("backfill") == [
            "load 2026-01-30 (previous 2026-01-29, next 2026-01-31)"
        ]

    def test_past_days_run_by_hand_each_load_only_their_day(self, examples: Project) -> None:
        # When two past days are run, the later first (as a re-run or backfill might)
        for day in ("2026-01-28", "2026-01-27"):
            run = examples.run("backfill.dig", "-t", day)
            assert run.exit_code == 0, run.explain()

        # Then each session loaded its own day once
        assert examples.notes("backfill") == [
            "load 2026-01-28 (previous 2026-01-27, next 2026-01-29)",
            "load 2026-01-27 (previous 2026-01-26, next 2026-01-28)",
        ]


def test_sh_output_passes_key_value_and_json_values_to_later_tasks(
    run_example: RunExample,
) -> None:
    examples, run = run_example("sh_output.dig")

    assert run.exit_code == 0, run.explain()
    assert examples.notes("sh_output") == [
        "count",
        "batch b-20260130 from shop_db: 42 rows in 2 tables, first orders",
    ]


class TestQualityGate:
    def test_the_gate_checks_what_load_stored_before_publish(self, run_example: RunExample) -> None:
        examples, run = run_example("quality_gate.dig")

        assert run.exit_code == 0, run.explain()
        assert examples.notes("quality_gate") == ["load", "check nulls 2%", "publish"]
        assert "success: 3" in run.summary

    def test_a_closed_gate_fails_load_and_publish_never_runs(self, examples: Project) -> None:
        # Given a stricter gate (as the example's comment suggests)
        workflow = examples.root / "quality_gate.dig"
        text = workflow.read_text()
        assert "max_null_percent: 5" in text
        workflow.write_text(text.replace("max_null_percent: 5", "max_null_percent: 1"))

        # When it runs
        run = examples.run("quality_gate.dig", "-t", SESSION)

        # Then +load fails through its check and +publish never runs
        assert run.exit_code == 1, run.explain()
        assert examples.notes("quality_gate") == ["load", "check nulls 2%"]
        assert "failed +quality_gate+load" in run.summary


@pytest.fixture
def orders_database(postgres_server_url: str) -> Iterator[str]:
    """A throwaway database for incremental_load.dig (the example's own is tickwork_examples)."""
    with throwaway_postgres_database(postgres_server_url) as url:
        yield url


def set_secrets(project: Project, secrets: dict[str, str]) -> None:
    """Set the secrets of the local project the examples run as (``tickwork secrets set
    --create-project``, through a ``tickwork standalone`` on its state directory)."""
    with serving_local_store(project.state_dir, SECRET_KEY) as server:
        for name, value in secrets.items():
            command = ["secrets", "set", "--create-project", project.root.name, name]
            done = server.tickwork(*command, "--value", value)
            assert done.exit_code == 0, done.explain()


def test_incremental_load_loads_only_what_came_since_the_session_before(
    examples: Project, orders_database: str
) -> None:
    # Given the example pointed at a database of its own through the project's secrets
    set_secrets(examples, pg_secrets(orders_database))

    # When two days' sessions run, one after the other
    runs = [
        examples.run("incremental_load.dig", "-t", day, env={"TICKWORK_SECRET_KEY": SECRET_KEY})
        for day in ("2026-01-30", "2026-01-31")
    ]

    # Then the second loaded only the orders after the day the first one stored
    for run in runs:
        assert run.exit_code == 0, run.explain()
    assert examples.notes("incremental_load") == [
        "load orders after the start, 3 new, 3 in all",
        "orders loaded until 2026-01-30",
        "load orders after 2026-01-30, 3 new, 6 in all",
        "orders loaded until 2026-01-31",
    ]
    assert ("+incremental_load+load^sub+copy", "success") in runs[1].progress()
    with psycopg.connect(libpq_conninfo(orders_database)) as conn:
        days = conn.execute("SELECT day::text, count(*) FROM orders GROUP BY 1 ORDER BY 1")
        assert days.fetchall() == [("2026-01-30", 3), ("2026-01-31", 3)]
