"""The client commands against a live ``tickwork standalone``, as someone used to Digdag
meets them: a typo in a name, a wrong endpoint or a malformed id is told apart from an
empty answer, ``-e``, ``--session daily``, ``push DIR``, ``delete PROJECT``, and times
shown one way, a zone as it was written."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.e2e._standalone import StandaloneProcess, running_standalone
from tests.support.files import write_under
from tests.support.servers import find_free_port, serve_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEMO = {
    "hello.dig": """\
        +greet:
          echo>: hello
    """,
    "daily.dig": """\
        schedule:
          daily>: 07:00:00
        +report:
          echo>: report of ${session_date}
    """,
}

TOKYO = {
    "report.dig": """\
        timezone: +09:00
        schedule:
          daily>: 07:00:00
        +report:
          echo>: report of ${session_date}
    """,
    "weekly.dig": """\
        timezone: +09:00
        +summary:
          echo>: summary of ${session_date}
    """,
}


def _write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_under(directory, name, textwrap.dedent(text))
    return directory


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone with project ``demo`` and project ``tokyo`` (in +09:00), each pushed
    by ``tickwork push DIR``, which names the project after its directory."""
    root = tmp_path_factory.mktemp("habits")
    with running_standalone(root / "state") as standalone:
        for name, files in (("demo", DEMO), ("tokyo", TOKYO)):
            pushed = standalone.tickwork("push", str(_write(root / name, files)))
            assert pushed.exit_code == 0, pushed.explain()
        yield standalone


class _HtmlPages(BaseHTTPRequestHandler):
    """Some other web server: an HTML page for every request."""

    def _page(self) -> None:
        body = b"<!DOCTYPE html><html><body><h1>Not Found</h1></body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def html_server() -> Iterator[str]:
    """The URL of a server that answers every request with an HTML page."""
    with serve_http(_HtmlPages) as url:
        yield url


class TestTypos:
    @pytest.mark.parametrize(
        ("args", "hint"),
        [
            (["sessions", "demmo"], "no project 'demmo' (did you mean 'demo'?)"),
            (["attempts", "demmo"], "no project 'demmo' (did you mean 'demo'?)"),
            (["workflows", "demmo"], "no project 'demmo' (did you mean 'demo'?)"),
            (["start", "demmo", "hello"], "no project 'demmo' (did you mean 'demo'?)"),
            (
                ["sessions", "demo", "helo"],
                "no workflow 'helo' in project 'demo' (did you mean 'hello'?)",
            ),
            (
                ["start", "demo", "helo", "--session", "daily"],
                "no workflow 'helo' in project 'demo' (did you mean 'hello'?)",
            ),
            (
                ["schedules", "missed", "demmo", "daily"],
                "no project 'demmo' (did you mean 'demo'?)",
            ),
            (["secrets", "list", "demmo"], "no project 'demmo' (did you mean 'demo'?)"),
        ],
        ids=[
            "sessions",
            "attempts",
            "workflows",
            "start",
            "sessions-workflow",
            "start-workflow",
            "missed",
            "secrets",
        ],
    )
    def test_an_unknown_name_is_exit_3_with_the_closest_existing_one(
        self, api: StandaloneProcess, args: list[str], hint: str
    ) -> None:
        command = api.tickwork(*args)
        assert command.exit_code == 3, command.explain()
        assert command.stderr.splitlines() == [f"error: {hint}"], command.explain()

    def test_a_known_project_without_sessions_is_an_empty_listing(
        self, api: StandaloneProcess
    ) -> None:
        listed = api.tickwork("sessions", "demo", "daily", "--json")
        assert listed.exit_code == 0, listed.explain()


class TestEndpoints:
    def test_e_is_short_for_endpoint(self, api: StandaloneProcess) -> None:
        dead = f"http://127.0.0.1:{find_free_port()}"
        listed = api.tickwork("workflows", "-e", api.endpoint, "--json", endpoint=dead)
        assert listed.exit_code == 0, listed.explain()

    def test_an_endpoint_ending_in_api_is_refused_with_the_one_to_use(
        self, api: StandaloneProcess
    ) -> None:
        listed = api.tickwork("sessions", "-e", f"{api.endpoint}/api/")
        assert listed.exit_code == 2, listed.explain()
        assert listed.stderr.splitlines() == [
            f"error: the endpoint {api.endpoint}/api/ should not end in /api: "
            f"the commands add it; use {api.endpoint}"
        ]

    def test_a_path_the_api_does_not_have_names_the_url_that_answered(
        self, api: StandaloneProcess
    ) -> None:
        shown = api.tickwork("attempt", "1", "-e", f"{api.endpoint}/tickwork")
        assert shown.exit_code == 3, shown.explain()
        assert shown.stderr.startswith(
            f"error: {api.endpoint}/tickwork/api/attempts/1 answered 404 (no such resource); "
            "is --endpoint"
        ), shown.explain()

    def test_an_html_page_from_another_server_is_named_not_printed(
        self, api: StandaloneProcess, html_server: str
    ) -> None:
        listed = api.tickwork("start", "demo", "hello", "-e", html_server)
        assert listed.exit_code == 5, listed.explain()
        assert listed.stderr.startswith(
            f"error: the server at {html_server}/api/attempts answered with an HTML page, "
            "not the tickwork API"
        ), listed.explain()
        assert "<" not in listed.stderr

    @pytest.mark.parametrize(
        "args", [["attempt"], ["tasks"], ["log"], ["retry"], ["kill"]], ids=lambda a: a[0]
    )
    def test_an_attempt_id_that_is_not_a_number_is_exit_2_naming_the_argument(
        self, api: StandaloneProcess, args: list[str]
    ) -> None:
        command = api.tickwork(*args, "abc")
        assert command.exit_code == 2, command.explain()
        assert (
            "Invalid value for 'ID': 'abc' is not an attempt id (a positive whole number)"
            in command.stderr
        ), command.explain()


class TestDigdagHabits:
    def test_session_daily_starts_todays_session_in_the_workflows_zone(
        self, api: StandaloneProcess
    ) -> None:
        started = api.tickwork("start", "tokyo", "report", "--session", "daily", "--json")
        assert started.exit_code == 0, started.explain()
        assert started.json()["session_time"].endswith("T00:00:00+09:00"), started.explain()

    def test_session_last_names_the_workflows_latest_session(self, api: StandaloneProcess) -> None:
        # Given a session of tokyo/weekly
        first = api.tickwork("start", "tokyo", "weekly", "--session", "2026-01-05", "--json")
        assert first.exit_code == 0, first.explain()
        # When its latest session is started again
        again = api.tickwork("start", "tokyo", "weekly", "--session", "last")
        # Then that is the same session: a conflict naming the attempt
        assert again.exit_code == 4, again.explain()
        assert f"attempt {first.json()['id']}" in again.stderr

    def test_push_without_arguments_pushes_the_current_directory_under_its_name(
        self, api: StandaloneProcess, tmp_path: Path
    ) -> None:
        project_dir = _write(tmp_path / "nightly", {"hello.dig": DEMO["hello.dig"]})
        pushed = api.tickwork("push", cwd=project_dir)
        assert pushed.exit_code == 0, pushed.explain()
        assert pushed.stdout.startswith("project nightly: revision "), pushed.explain()

    def test_delete_needs_force_without_a_terminal_then_deletes_the_project(
        self, api: StandaloneProcess, tmp_path: Path
    ) -> None:
        # Given a pushed project with a schedule
        pushed = api.tickwork("push", str(_write(tmp_path / "doomed", DEMO)))
        assert pushed.exit_code == 0, pushed.explain()
        # When it is deleted without a terminal to confirm on, it is refused
        refused = api.tickwork("delete", "doomed")
        assert refused.exit_code == 2, refused.explain()
        assert "--force" in refused.stderr
        assert api.get("/api/projects/doomed")["name"] == "doomed"
        # And with --force it is deleted, and its schedule with it
        deleted = api.tickwork("delete", "doomed", "--force")
        assert deleted.exit_code == 0, deleted.explain()
        assert "project doomed deleted" in deleted.stdout
        assert api.tickwork("workflows", "doomed").exit_code == 3
        schedules = api.tickwork("schedules", "--json").json_lines()
        assert "doomed" not in {s["project"] for s in schedules}

    def test_missed_says_so_when_nothing_was_missed(self, api: StandaloneProcess) -> None:
        missed = api.tickwork("schedules", "missed", "demo", "daily")
        assert missed.exit_code == 0, missed.explain()
        assert missed.stdout.strip() == "demo/daily: no missed session times"

    def test_schedule_is_not_a_command_schedules_is(self, api: StandaloneProcess) -> None:
        assert api.tickwork("schedule", "--json").exit_code == 2
        assert api.tickwork("schedules", "--json").exit_code == 0


class TestTimes:
    def test_times_are_shown_to_the_second_utc_with_z(self, api: StandaloneProcess) -> None:
        started = api.tickwork("start", "demo", "hello", "--session", "2026-02-03", "--json")
        assert started.exit_code == 0, started.explain()
        shown = api.tickwork("attempt", str(started.json()["id"]))
        assert shown.exit_code == 0, shown.explain()
        created = re.search(r"^created_at:\s+(\S+)$", shown.stdout, re.MULTILINE)
        assert created is not None, shown.stdout
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created.group(1)), shown.stdout

    def test_a_session_time_keeps_the_offset_of_its_zone(self, api: StandaloneProcess) -> None:
        started = api.tickwork("start", "tokyo", "report", "--session", "2026-01-02")
        assert started.exit_code == 0, started.explain()
        listed = api.tickwork("sessions", "tokyo", "report")
        assert "2026-01-02T00:00:00+09:00" in listed.stdout, listed.explain()

    def test_an_offset_zone_is_shown_as_written(self, api: StandaloneProcess) -> None:
        schedules = api.tickwork("schedules", "--json").json_lines()
        (tokyo,) = [s for s in schedules if s["project"] == "tokyo"]
        assert tokyo["timezone"] == "+09:00"
        assert tokyo["next_session_time"].endswith("+09:00")

    def test_an_error_names_the_flag_not_the_apis_field(self, api: StandaloneProcess) -> None:
        skipped = api.tickwork("schedules", "skip", "demo", "daily", "--to", "someday")
        assert skipped.exit_code == 2, skipped.explain()
        assert skipped.stderr.startswith("error: --to: "), skipped.explain()
        started = api.tickwork("start", "demo", "hello", "--idempotency-key", "k" * 300)
        assert started.exit_code == 2, started.explain()
        assert started.stderr.splitlines() == [
            "error: --idempotency-key: expected at most 255 characters"
        ]
