"""``http_call>`` against a real HTTP server on a local port: the workflow definition it
fetches (YAML or JSON, by Content-Type, as Digdag's) runs as the task's subtasks, under
``tickwork run`` and on a cluster (an executor and an agent as OS processes)."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.e2e._run import Project
from tests.fault._cluster import Cluster
from tests.support.servers import serve_http

pytestmark = pytest.mark.e2e

YAML_DEFINITION = """\
+first:
  sh>: echo "first ${who} ${day}" >> out.txt
+second:
  sh>: echo second >> out.txt
"""
JSON_DEFINITION = """\
{
\t"_export": {"what": "json"},
\t"+one": {"sh>": "echo \\"${what} ${who}\\" >> out.txt"}
}
"""
INVALID_DEFINITION = """\
+first:
  sh>: echo first
+second:
  shh>: echo second
"""
MANY_TASKS = "".join(f"+t{i}:\n  echo>: {i}\n" for i in range(10))
# Path: (status, Content-Type, body)
ANSWERS: dict[str, tuple[int, str, str]] = {
    "/wf.yaml": (200, "application/x-yaml; charset=utf-8", YAML_DEFINITION),
    "/wf.json": (200, "application/json", JSON_DEFINITION),
    "/wf.txt": (200, "text/plain", YAML_DEFINITION),
    "/invalid.yaml": (200, "application/x-yaml", INVALID_DEFINITION),
    "/many.yaml": (200, "application/x-yaml", MANY_TASKS),
    "/broken": (500, "application/x-yaml", ""),
}


class _Definitions(http.server.BaseHTTPRequestHandler):
    """Answers each path of ANSWERS as written there, anything else with 404; records
    the path and ``X-Team`` header of every request."""

    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("X-Team")))
        path = self.path.split("?", 1)[0]
        status, content_type, body = ANSWERS.get(path, (404, "text/plain", "not found"))
        payload = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server of workflow definitions on a free local port; its base URL."""
    _Definitions.seen = []
    with serve_http(_Definitions) as url:
        yield url


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """An empty project with its own state directory."""
    return Project.empty(tmp_path)


def calling(url: str, *options: str) -> str:
    """A workflow whose ``+fetch`` task is ``http_call>: url`` with ``options``, then ``+after``."""
    lines = "".join(f"  {option}\n" for option in options)
    return (
        "_export:\n  who: world\n"
        f"+fetch:\n  http_call>: {url}\n{lines}"
        "+after:\n  sh>: echo after >> out.txt\n"
    )


class TestHttpCallRun:
    def test_a_yaml_definition_runs_as_the_tasks_subtasks_before_the_next_task(
        self, project: Project, server: str
    ) -> None:
        project.write(
            "wf.dig",
            calling(
                f"{server}/wf.yaml",
                'query: {day: "${session_date}"}',
                "headers: {X-Team: data}",
            ),
        )

        run = project.run("wf.dig", "-t", "2026-01-30", "-p", "day=d")

        assert run.exit_code == 0, run.explain()
        assert project.lines("out.txt") == ["first world d", "second", "after"]
        succeeded = [task for task, state in run.progress() if state == "success"]
        assert "+wf+fetch^sub+first" in succeeded, run.explain()
        assert _Definitions.seen == [("/wf.yaml?day=2026-01-30", "data")]

    def test_a_json_definition_runs_as_the_tasks_subtasks(
        self, project: Project, server: str
    ) -> None:
        project.write("wf.dig", calling(f"{server}/wf.json"))

        run = project.run("wf.dig")

        assert run.exit_code == 0, run.explain()
        assert project.lines("out.txt") == ["json world", "after"]

    def test_content_type_override_reads_a_body_its_server_mislabels(
        self, project: Project, server: str
    ) -> None:
        project.write(
            "wf.dig", calling(f"{server}/wf.txt", "content_type_override: application/x-yaml")
        )

        run = project.run("wf.dig", "-p", "day=d")

        assert run.exit_code == 0, run.explain()
        assert project.lines("out.txt") == ["first world d", "second", "after"]

    @pytest.mark.parametrize(
        ("path", "options", "error"),
        [
            (
                "/invalid.yaml",
                (),
                "http_call> {url} gave an invalid workflow: line 4: unknown operator 'shh>'",
            ),
            ("/missing", (), "GET {url} answered 404"),
            ("/broken", ("retries: 0",), "GET {url} answered 500"),
            ("/wf.txt", (), "http_call> {url}: unsupported Content-Type 'text/plain'"),
        ],
        ids=["invalid-definition", "not-found", "server-error", "unsupported-content-type"],
    )
    def test_a_bad_answer_fails_the_task_naming_the_url_and_the_problem(
        self, project: Project, server: str, path: str, options: tuple[str, ...], error: str
    ) -> None:
        url = f"{server}{path}"
        project.write("wf.dig", calling(url, *options))

        run = project.run("wf.dig")

        assert run.exit_code == 1, run.explain()
        assert f"failed +wf+fetch: {error.format(url=url)}" in run.summary, run.explain()
        assert "Traceback" not in run.stdout + run.stderr
        assert project.lines("out.txt") == []
        assert len(_Definitions.seen) == 1

    def test_the_fetched_tasks_count_against_the_attempts_task_limit(
        self, project: Project, server: str
    ) -> None:
        project.write("wf.dig", calling(f"{server}/many.yaml"))

        run = project.run("wf.dig", env={"TICKWORK_MAX_TASKS_PER_ATTEMPT": "8"})

        assert run.exit_code == 1, run.explain()
        assert "over the limit of 8 (TICKWORK_MAX_TASKS_PER_ATTEMPT)" in run.summary
        assert project.lines("out.txt") == []


@pytest.mark.timeout(90)
def test_a_fetched_definition_runs_as_subtasks_on_a_cluster(cluster: Cluster, server: str) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    path = cluster.project_dir / "wf.dig"
    path.write_text(calling(f"{server}/wf.yaml", "headers: {X-Team: data}"))

    done = cluster.tickwork("run", str(path), "--on-executor", "-q", "-p", "day=d")

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{cluster.explain()}"
    lines = (cluster.project_dir / "out.txt").read_text().splitlines()
    assert lines == ["first world d", "second", "after"]
    assert _Definitions.seen == [("/wf.yaml", "data")]
