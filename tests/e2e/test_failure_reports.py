"""What a person on call sees through the ``tickwork`` client when an attempt fails: the
failed task, its error and the end of its log from ``start --wait``, ``retry --wait`` and
``attempt``; and ``tasks`` as a tree with durations, retries and only current errors."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator

import pytest

from tests.e2e._standalone import StandaloneProcess, running_standalone, wait_for_attempt
from tests.support.files import write_under
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT = {
    "fails.dig": """\
        +prepare:
          echo>: preparing
        +load:
          sh>: for i in $(seq 1 15); do echo "load line $i"; done; exit 3
        +never:
          echo>: not reached
    """,
    "flaky.dig": """\
        +outer:
          +flaky:
            _retry: 1
            sh>: test ${retry} -ge 1 || { echo "first try fails"; exit 1; }
          +after:
            echo>: after the retry
    """,
    "nap.dig": """\
        +nap:
          sh>: sleep 300
    """,
}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone with project ``oncall`` pushed through the client."""
    root = tmp_path_factory.mktemp("failures")
    project = root / "oncall"
    for name, text in PROJECT.items():
        write_under(project, name, textwrap.dedent(text))
    with running_standalone(root / "state") as standalone:
        pushed = standalone.tickwork("push", str(project), "--project", "oncall")
        assert pushed.exit_code == 0, pushed.explain()
        yield standalone


@pytest.fixture(scope="module")
def failed_attempt(api: StandaloneProcess) -> str:
    """An attempt of ``fails`` that ended in error at ``+fails+load``."""
    started = api.tickwork("start", "oncall", "fails", "--session", "2026-02-01", "--json")
    assert started.exit_code == 0, started.explain()
    attempt_id = str(started.json()["id"])
    assert wait_for_attempt(api, attempt_id)["state"] == "error"
    return attempt_id


def _report(stdout: str) -> list[str]:
    """The lines from the ``failed`` line on."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("failed ")]
    assert starts, stdout
    return lines[starts[0] :]


class TestWhyAnAttemptFailed:
    def test_start_wait_prints_the_failed_task_its_error_and_its_log_tail(
        self, api: StandaloneProcess
    ) -> None:
        # When a session whose task exits 3 is started and waited for
        started = api.tickwork("start", "oncall", "fails", "--session", "2026-02-02", "--wait")
        # Then it exits 1 naming the task that failed and why
        assert started.exit_code == 1, started.explain()
        report = _report(started.stdout)
        assert re.fullmatch(r"failed \+fails\+load: .*3.*", report[0]), report
        # And the last ten lines of its log follow, each after "  | "
        assert report[1:] == [f"  | load line {i}" for i in range(6, 16)], report
        # And no task that did not fail is named
        assert "+fails+prepare" not in started.stdout
        assert "failed +fails:" not in started.stdout

    def test_start_wait_json_carries_the_failures(self, api: StandaloneProcess) -> None:
        started = api.tickwork(
            "start", "oncall", "fails", "--session", "2026-02-03", "--wait", "--json"
        )
        assert started.exit_code == 1, started.explain()
        attempt = started.json()
        assert attempt["state"] == "error"
        [failure] = attempt["failures"]
        assert failure["task"] == "+fails+load"
        assert failure["log_tail"][-1] == "load line 15"

    def test_attempt_of_a_failed_attempt_names_the_failed_task_and_its_error(
        self, api: StandaloneProcess, failed_attempt: str
    ) -> None:
        shown = api.tickwork("attempt", failed_attempt)
        assert shown.exit_code == 0, shown.explain()
        report = _report(shown.stdout)
        assert report[0].startswith("failed +fails+load: "), report
        assert report[-1] == "  | load line 15"
        as_json = api.tickwork("attempt", failed_attempt, "--json").json()
        assert [f["task"] for f in as_json["failures"]] == ["+fails+load"]

    def test_retry_wait_prints_what_failed_again(
        self, api: StandaloneProcess, failed_attempt: str
    ) -> None:
        retried = api.tickwork("retry", failed_attempt, "--wait")
        assert retried.exit_code == 1, retried.explain()
        report = _report(retried.stdout)
        assert report[0].startswith("failed +fails+load: "), report
        assert report[-1] == "  | load line 15"

    def test_a_success_has_no_failures(self, api: StandaloneProcess) -> None:
        started = api.tickwork(
            "start", "oncall", "flaky", "--session", "2026-02-04", "--wait", "--json"
        )
        assert started.exit_code == 0, started.explain()
        assert started.json()["failures"] == []

    def test_attempt_of_a_running_attempt_names_its_running_tasks(
        self, api: StandaloneProcess
    ) -> None:
        # Given an attempt whose task sleeps
        started = api.tickwork("start", "oncall", "nap", "--json")
        attempt_id = str(started.json()["id"])

        def sleeping() -> bool:
            items = api.get(f"/api/attempts/{attempt_id}/tasks")["items"]
            return any(t["full_name"] == "+nap+nap" and t["state"] == "running" for t in items)

        wait_until("the sleep task runs", sleeping, 30.0, poll=0.1)
        # When the attempt is shown, the running task is named with its start
        shown = api.tickwork("attempt", attempt_id)
        api.tickwork("kill", attempt_id)
        assert shown.exit_code == 0, shown.explain()
        assert re.search(r"^running \+nap\+nap \(since \S+\)$", shown.stdout, re.M), shown.stdout


class TestTaskTree:
    def test_children_are_shown_indented_under_their_parent(
        self, api: StandaloneProcess, failed_attempt: str
    ) -> None:
        shown = api.tickwork("tasks", failed_attempt)
        assert shown.exit_code == 0, shown.explain()
        names = [_cells(line)[1] for line in _rows(shown.stdout)]
        assert names == ["+fails", "  +prepare", "  +load", "  +never"], shown.stdout

    def test_a_task_that_succeeded_on_a_retry_shows_its_retry_and_no_error(
        self, api: StandaloneProcess
    ) -> None:
        # Given a task that failed once and succeeded on its retry
        started = api.tickwork("start", "oncall", "flaky", "--session", "2026-02-05", "--json")
        attempt_id = str(started.json()["id"])
        assert wait_for_attempt(api, attempt_id)["state"] == "success"
        items = {t["full_name"]: t for t in api.get(f"/api/attempts/{attempt_id}/tasks")["items"]}
        flaky = items["+flaky+outer+flaky"]
        # When its tree is shown
        shown = api.tickwork("tasks", attempt_id)
        assert shown.exit_code == 0, shown.explain()
        rows = {_cells(line)[1]: _cells(line) for line in _rows(shown.stdout)}
        # Then the tree nests +outer's children two levels deep
        assert list(rows) == ["+flaky", "  +outer", "    +flaky", "    +after"], shown.stdout
        _id, _name, state, started_at, duration, retries, error = rows["    +flaky"]
        # And the task shows one retry, its duration, its start to the second, and no error
        assert (state, retries, error) == ("success", "1", "-")
        assert re.fullmatch(r"[0-9.]+s", duration), duration
        assert started_at.startswith(flaky["started_at"][:19]), started_at
        assert "first try fails" not in shown.stdout

    def test_json_is_one_object_per_task_with_name_and_duration(
        self, api: StandaloneProcess, failed_attempt: str
    ) -> None:
        listed = api.tickwork("tasks", failed_attempt, "--json").json_lines()
        by_name = {t["full_name"]: t for t in listed}
        load = by_name["+fails+load"]
        assert load["name"] == "+load"
        assert load["parent_id"] == by_name["+fails"]["id"]
        assert load["retry_count"] == 0
        assert load["duration_seconds"] >= 0


def _rows(stdout: str) -> list[str]:
    """The body lines of a rich table."""
    return [line for line in stdout.splitlines() if line.startswith("│")]


def _cells(row: str) -> list[str]:
    """The cells of a table line, trailing spaces removed (leading ones kept)."""
    return [cell[1:].rstrip() for cell in row.strip("│").split("│")]
