"""param_set> and param_get> end to end: a value set in one session of a project is read in
a later session of that project, embedded (`tickwork run` twice on one state directory)
and distributed (an executor and an agent on PostgreSQL and Redis); another project does
not see it; setting a key again replaces it; a key never set reads as an empty string, as
in Digdag; a bad key is refused by `tickwork check` with file:line."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.e2e._run import PROBLEM_LINE, Project
from tests.fault._cluster import Cluster
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.parser import parse_workflow_text

pytestmark = pytest.mark.e2e

SET = """
    +set:
      param_set>:
      last_day: day-${session_date}
      count: 3
"""
GET = """
    +get:
      param_get>:
      last_day: previous_day
      count: previous_count
      never_set: missing
    +show:
      sh>: echo "${previous_day} ${previous_count} [${missing}]" > got.txt
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A project with the two workflows and its own state directory."""
    project = Project.empty(tmp_path)
    project.write("set.dig", SET)
    project.write("get.dig", GET)
    return project


class TestEmbedded:
    def test_a_value_set_in_one_session_is_read_in_a_later_one(self, project: Project) -> None:
        assert project.run("set.dig", "-t", "2026-01-30").exit_code == 0

        run = project.run("get.dig", "-t", "2026-01-31")

        assert run.exit_code == 0, run.explain()
        assert project.lines("got.txt") == ["day-2026-01-30 3 []"]

    def test_setting_a_key_again_replaces_its_value(self, project: Project) -> None:
        assert project.run("set.dig", "-t", "2026-01-30").exit_code == 0
        assert project.run("set.dig", "-t", "2026-02-01").exit_code == 0

        assert project.run("get.dig", "-t", "2026-02-02").exit_code == 0

        assert project.lines("got.txt") == ["day-2026-02-01 3 []"]

    def test_another_project_reads_empty_strings(self, project: Project, tmp_path: Path) -> None:
        assert project.run("set.dig", "-t", "2026-01-30").exit_code == 0
        other = Project(tmp_path / "other", project.state_dir)
        other.write("get.dig", GET)

        run = other.run("get.dig", "-t", "2026-01-31")

        assert run.exit_code == 0, run.explain()
        assert other.lines("got.txt") == ["  []"]

    def test_an_expression_giving_a_mapping_stores_its_json(self, project: Project) -> None:
        project.write(
            "json.dig",
            """
            _export:
              config: {rows: 10, tables: [a]}
            +set:
              param_set>:
              limits: ${config}
            +get:
              param_get>:
              limits: stored
            +show:
              sh>: printf '%s' "$stored" > got.txt
            """,
        )

        run = project.run("json.dig", "-t", "2026-01-31")

        assert run.exit_code == 0, run.explain()
        assert project.read("got.txt") == '{"rows":10,"tables":["a"]}'

    def test_a_destination_that_renders_empty_fails_the_task_naming_the_key(
        self, project: Project
    ) -> None:
        project.write("empty.dig", '_export:\n  to: ""\n+get:\n  param_get>:\n  k: ${to}\n')

        run = project.run("empty.dig", "-t", "2026-01-31")

        assert run.exit_code != 0
        assert "failed +empty+get: param_get> needs a param name to store 'k' in, got ''" in (
            run.summary
        ), run.explain()
        assert "Traceback" not in run.stdout + run.stderr

    def test_check_refuses_a_bad_key_with_file_and_line(self, project: Project) -> None:
        project.write("bad.dig", '+set:\n  param_set>:\n  "": v\n')

        checked = project.check("bad.dig")

        assert checked.exit_code == 2, checked.stderr
        problems = [PROBLEM_LINE.match(line) for line in checked.stderr.splitlines()]
        assert [(m["file"], m["line"]) for m in problems if m] == [("bad.dig", "3")]
        assert "Traceback" not in checked.stderr


def _run(cluster: Cluster, directory: Path, name: str, text: str, day: int) -> None:
    """Run workflow ``name`` of the local project in ``directory`` for a session of
    January ``day``, to its end, which must be a success."""
    directory.mkdir(exist_ok=True)
    definition = parse_workflow_text(textwrap.dedent(text).lstrip(), f"{name}.dig", directory)
    request = RunRequest(
        definition=definition,
        project_dir=directory,
        state_dir=cluster.root / "state",
        database_url=cluster.database_url,
        params={},
        session_time=datetime(2026, 1, day, tzinfo=UTC),
    )
    with cluster.engine.begin() as conn:
        attempt = create_run_attempt(conn, request, utc_now()).attempt_id
    assert cluster.wait_for_attempt_end(attempt, 30) == "success", cluster.explain(attempt)


@pytest.mark.timeout(90)
def test_distributed_sessions_of_a_project_share_values_and_other_projects_do_not(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    home, other = cluster.project_dir, cluster.root / "other"

    _run(cluster, home, "set", SET, 29)
    _run(cluster, home, "set", SET.replace("day-", "again-"), 30)
    _run(cluster, home, "get", GET, 31)
    _run(cluster, other, "get", GET, 31)

    assert (home / "got.txt").read_text().splitlines() == ["again-2026-01-30 3 []"]
    assert (other / "got.txt").read_text().splitlines() == ["  []"]
