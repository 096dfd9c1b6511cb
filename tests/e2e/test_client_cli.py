"""The ``tickwork`` API client against a live ``tickwork standalone``: push, start, follow,
retry, kill, and an exit status and one line for every kind of failure."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._standalone import (
    StandaloneProcess,
    client_environment,
    run_tickwork,
    running_standalone,
    wait_for_attempt,
)
from tests.support.files import write_under
from tests.support.servers import find_free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT = {
    "hello.dig": """\
        _export:
          name: world
        +greet:
          echo>: hello ${name}
        +done:
          sh>: echo done at ${session_time}
    """,
    "greet.dig": """\
        +greet:
          echo>: hello ${name}
    """,
    "nap.dig": """\
        +nap:
          sh>: sleep 300
    """,
    "daily.dig": """\
        schedule:
          daily>: 07:00:00
        +report:
          echo>: report of ${session_date}
    """,
}

INVALID = {
    "hello.dig": PROJECT["hello.dig"],
    "bad_cron.dig": """\
        schedule:
          cron>: "99 * * * *"
        +a:
          echo>: hi
    """,
    "bad_timezone.dig": """\
        timezone: Mars/Olympus
        +a:
          echo>: hi
    """,
}


def _write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_under(directory, name, textwrap.dedent(text))
    return directory


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone with project ``demo`` pushed through the client."""
    root = tmp_path_factory.mktemp("client")
    secret_key = {"TICKWORK_SECRET_KEY": "a passphrase for the client specs"}
    with running_standalone(root / "state", environ=secret_key) as standalone:
        pushed = standalone.tickwork(
            "push", str(_write(root / "demo", PROJECT)), "--project", "demo"
        )
        assert pushed.exit_code == 0, pushed.explain()
        yield standalone


def _start(api: StandaloneProcess, *args: str) -> str:
    started = api.tickwork("start", "demo", *args, "--json")
    assert started.exit_code == 0, started.explain()
    return str(started.json()["id"])


class TestPush:
    def test_a_push_prints_the_revision_and_its_workflows(
        self, api: StandaloneProcess, tmp_path: Path
    ) -> None:
        pushed = api.tickwork(
            "push", str(_write(tmp_path / "p", PROJECT)), "--project", "other", "--revision", "v1"
        )
        assert pushed.exit_code == 0, pushed.explain()
        assert "project other: revision v1 (a new revision)" in pushed.stdout
        assert "workflows: daily, greet, hello, nap" in pushed.stdout

    def test_an_invalid_project_is_refused_with_every_error_and_changes_nothing(
        self, api: StandaloneProcess, tmp_path: Path
    ) -> None:
        # Given the revisions project demo has
        before = api.get("/api/projects/demo/revisions")["items"]
        # When a project with two invalid workflows is pushed over it
        pushed = api.tickwork("push", str(_write(tmp_path / "bad", INVALID)), "--project", "demo")
        # Then it is refused with both errors, each naming its file and line
        assert pushed.exit_code == 2, pushed.explain()
        errors = pushed.stderr.splitlines()
        assert any(line.startswith("error: bad_cron.dig:2: ") for line in errors), errors
        assert any(line.startswith("error: bad_timezone.dig:1: ") for line in errors), errors
        assert "Traceback" not in pushed.stderr
        # And nothing changed
        assert api.get("/api/projects/demo/revisions")["items"] == before


class TestRunning:
    def test_workflows_lists_the_pushed_workflows(self, api: StandaloneProcess) -> None:
        listed = api.tickwork("workflows", "demo", "--json")
        assert listed.exit_code == 0, listed.explain()
        assert {w["name"] for w in listed.json_lines()} == {"daily", "greet", "hello", "nap"}

    def test_a_started_session_succeeds_with_its_tasks_and_log(
        self, api: StandaloneProcess
    ) -> None:
        # When a session is started by hand with a parameter
        attempt_id = _start(api, "greet", "--session", "2026-01-02", "-p", "name=tickwork")
        # Then it succeeds
        wait_for_attempt(api, attempt_id)
        shown = api.tickwork("attempt", attempt_id)
        assert shown.exit_code == 0, shown.explain()
        assert "state:" in shown.stdout and "success" in shown.stdout
        # And its tasks, its session and its log can be seen
        tasks = api.tickwork("tasks", attempt_id, "--json").json_lines()
        assert {t["full_name"]: t["state"] for t in tasks}["+greet+greet"] == "success"
        sessions = api.tickwork("sessions", "demo", "greet", "--json").json_lines()
        assert attempt_id in [s["last_attempt"]["id"] for s in sessions]
        log = api.tickwork("log", attempt_id, "+greet+greet")
        assert log.exit_code == 0, log.explain()
        assert "hello tickwork" in log.stdout

    def test_log_follow_prints_until_the_attempt_ends(self, api: StandaloneProcess) -> None:
        attempt_id = _start(api, "hello", "--session", "2026-01-03")
        followed = api.tickwork("log", attempt_id, "-f")
        assert followed.exit_code == 0, followed.explain()
        assert "hello world" in followed.stdout
        assert "done at 2026-01-03" in followed.stdout

    def test_start_wait_exits_0_when_the_session_succeeds(self, api: StandaloneProcess) -> None:
        started = api.tickwork("start", "demo", "hello", "--session", "2026-01-04", "--wait")
        assert started.exit_code == 0, started.explain()
        assert started.stdout.strip().endswith("success")

    def test_retry_all_runs_the_session_again(self, api: StandaloneProcess) -> None:
        first = _start(api, "hello", "--session", "2026-01-05")
        wait_for_attempt(api, first)
        retried = api.tickwork("retry", first, "--all", "--json")
        assert retried.exit_code == 0, retried.explain()
        second = retried.json()
        assert second["id"] != first
        assert second["session_id"] == api.get(f"/api/attempts/{first}")["session_id"]
        assert wait_for_attempt(api, second["id"])["state"] == "success"

    def test_kill_stops_a_running_sleep(self, api: StandaloneProcess) -> None:
        # Given a session whose task sleeps
        attempt_id = _start(api, "nap")

        def sleeping() -> bool:
            items = api.get(f"/api/attempts/{attempt_id}/tasks")["items"]
            return any(t["full_name"] == "+nap+nap" and t["state"] == "running" for t in items)

        wait_until("the sleep task runs", sleeping, 30.0, poll=0.1)
        # When it is killed through the API
        killed = api.tickwork("kill", attempt_id)
        # Then the attempt ends killed, well before the sleep would have
        assert killed.exit_code == 0, killed.explain()
        # (the executor, woken by the kill, may have ended it before the answer was read)
        said = killed.stdout.strip()
        assert said in (f"attempt {attempt_id}: killing", f"attempt {attempt_id}: killed")
        assert wait_for_attempt(api, attempt_id, 20.0)["state"] == "killed"


class TestSecrets:
    def test_a_secret_is_set_listed_and_deleted_through_the_api_and_never_shown(
        self, api: StandaloneProcess, tmp_path: Path
    ) -> None:
        value_file = tmp_path / "token"
        value_file.write_text("s3cr3t-value")
        stored = api.tickwork(
            "secrets", "set", "demo", "api.token", "--value-file", str(value_file)
        )
        assert stored.exit_code == 0, stored.explain()
        listed = api.tickwork("secrets", "list", "demo")
        assert listed.exit_code == 0, listed.explain()
        assert "api.token" in listed.stdout
        assert "s3cr3t-value" not in listed.stdout + stored.stdout
        deleted = api.tickwork("secrets", "delete", "demo", "api.token")
        assert deleted.exit_code == 0, deleted.explain()
        assert "api.token" not in api.tickwork("secrets", "list", "demo").stdout


class TestSchedules:
    def test_schedules_are_listed_paused_and_resumed_through_the_api(
        self, api: StandaloneProcess
    ) -> None:
        def daily() -> dict[str, object]:
            listed = api.tickwork("schedules", "--json")
            assert listed.exit_code == 0, listed.explain()
            (found,) = [s for s in listed.json_lines() if s["project"] == "demo"]
            return dict(found)

        assert daily()["workflow"] == "daily"
        assert api.tickwork("schedules", "pause", "demo", "daily").exit_code == 0
        assert daily()["paused"] is True
        resumed = api.tickwork("schedules", "resume", "demo", "daily")
        assert resumed.exit_code == 0, resumed.explain()
        assert resumed.stdout.strip() == "demo/daily: resumed"
        assert daily()["paused"] is False

    def test_a_backfill_creates_the_missing_sessions_once(self, api: StandaloneProcess) -> None:
        window = ("--from", "2025-06-01", "--to", "2025-06-03")
        first = api.tickwork("backfill", "demo", "daily", *window)
        assert first.exit_code == 0, first.explain()
        assert first.stdout.splitlines()[-1] == "created 3 session(s), one after another; 0 existed"
        again = api.tickwork("backfill", "demo", "daily", *window, "--dry-run")
        assert again.stdout.splitlines()[-1] == (
            "would create 0 session(s), one after another; 3 existed"
        )

    def test_skipped_times_are_listed_as_missed_through_the_api(
        self, api: StandaloneProcess
    ) -> None:
        skipped = api.tickwork("schedules", "skip", "demo", "daily", "--count", "2")
        assert skipped.exit_code == 0, skipped.explain()
        missed = api.tickwork("schedules", "missed", "demo", "daily")
        assert missed.exit_code == 0, missed.explain()
        assert missed.stdout.splitlines()[0].endswith("2 time(s)  skipped"), missed.stdout

    def test_a_schedule_of_an_unknown_workflow_is_exit_3(self, api: StandaloneProcess) -> None:
        paused = api.tickwork("schedules", "pause", "demo", "nosuch")
        assert paused.exit_code == 3, paused.explain()


class TestFailures:
    def test_an_unreachable_api_is_exit_5_with_one_line(self, api: StandaloneProcess) -> None:
        endpoint = f"http://127.0.0.1:{find_free_port()}"
        listed = api.tickwork("sessions", endpoint=endpoint)
        assert listed.exit_code == 5, listed.explain()
        assert listed.stderr.splitlines() == [
            f"error: cannot reach the tickwork API at {endpoint}: connection refused; "
            "is `tickwork api` or `tickwork standalone` running?"
        ]

    def test_an_unknown_attempt_is_exit_3(self, api: StandaloneProcess) -> None:
        shown = api.tickwork("attempt", "999999")
        assert shown.exit_code == 3, shown.explain()
        assert len(shown.stderr.splitlines()) == 1

    def test_starting_the_same_session_twice_is_exit_4_naming_the_attempt(
        self, api: StandaloneProcess
    ) -> None:
        attempt_id = _start(api, "hello", "--session", "2026-02-01")
        again = api.tickwork("start", "demo", "hello", "--session", "2026-02-01")
        assert again.exit_code == 4, again.explain()
        assert f"attempt {attempt_id}" in again.stderr

    def test_a_bad_param_is_exit_2(self, api: StandaloneProcess) -> None:
        started = api.tickwork("start", "demo", "hello", "-p", "no-equals-sign")
        assert started.exit_code == 2, started.explain()
        assert "Traceback" not in started.stderr

    def test_json_output_parses(self, api: StandaloneProcess) -> None:
        _start(api, "hello", "--session", "2026-02-02")  # something to list, whatever ran before
        for args in (("sessions", "--json"), ("attempts", "--json"), ("workflows", "--json")):
            listed = api.tickwork(*args)
            assert listed.exit_code == 0, listed.explain()
            assert listed.json_lines(), args


def test_the_endpoint_and_token_come_from_the_client_config_file(tmp_path: Path) -> None:
    environ = {"TICKWORK_API_TOKENS": "read:reader-token-1234"}
    with running_standalone(tmp_path / "state", environ=environ) as standalone:
        config = tmp_path / "client.toml"
        config.write_text(
            f'endpoint = "{standalone.endpoint}"\ntoken = "reader-token-1234"\n', encoding="utf-8"
        )
        env = client_environment(standalone.endpoint)
        del env["TICKWORK_ENDPOINT"]
        env["TICKWORK_CONFIG"] = str(config)
        listed = run_tickwork("sessions", "--json", env=env)
        assert listed.exit_code == 0, listed.stderr


def test_a_wrong_token_is_exit_6(tmp_path: Path) -> None:
    environ = {"TICKWORK_API_TOKENS": "admin:right-token-1234"}
    with running_standalone(tmp_path / "state", environ=environ) as standalone:
        assert standalone.tickwork("attempts").exit_code == 0
        refused = standalone.tickwork("attempts", token="wrong-token-1234")
        assert refused.exit_code == 6, refused.explain()
        assert len(refused.stderr.splitlines()) == 1
