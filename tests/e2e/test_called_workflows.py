"""``call>`` of a file named by a param, and the folder a called workflow's commands run in,
with ``tickwork run`` and on a distributed cluster running a pushed project.

A called file's tasks run in that file's folder (``sub/``, then ``sub/subsub/`` for the file
it calls), and ``_workdir`` moves them relative to it, as in Digdag.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e._run import Project, tickwork_command
from tests.fault._cluster import Cluster
from tests.support.files import write_under
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.archive import pack_project, read_project_archive
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import sessions as session_store

pytestmark = [pytest.mark.e2e]

MAIN = "+c:\n  call>: ${child}\n"
CHILD = """\
+here:
  sh>: pwd {out}
+data:
  _workdir: data
  sh>: pwd {out}
+deeper:
  call>: subsub/grandchild.dig
"""
GRANDCHILD = "+there:\n  sh>: pwd {out}\n"


def write_project(root: Path, out: str = "") -> None:
    """The called project; each ``sh>`` prints its folder (and with ``out`` appends it there)."""
    files = {
        "main.dig": MAIN,
        "sub/child.dig": CHILD.format(out=out),
        "sub/data/.keep": "",
        "sub/subsub/grandchild.dig": GRANDCHILD.format(out=out),
    }
    for name, text in files.items():
        write_under(root, name, text)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.empty(tmp_path)


def test_a_run_calls_the_file_a_param_names_and_each_file_works_in_its_folder(
    project: Project,
) -> None:
    write_project(project.root)

    run = project.run("main.dig", "-p", "child=sub/child")

    assert run.exit_code == 0, run.explain()
    root = project.root.resolve()
    assert sorted(run.output()) == [
        ("+main+c^sub+data", str(root / "sub" / "data")),
        ("+main+c^sub+deeper^sub+there", str(root / "sub" / "subsub")),
        ("+main+c^sub+here", str(root / "sub")),
    ]


def test_a_run_whose_called_file_is_missing_fails_naming_it(project: Project) -> None:
    write_project(project.root)

    run = project.run("main.dig", "-p", "child=sub/nothing")

    assert run.exit_code == 1, run.explain()
    assert "'call>' target 'sub/nothing' does not exist (sub/nothing.dig)" in run.stdout


def check(*files: Path) -> subprocess.CompletedProcess[str]:
    """``tickwork check`` of ``files``."""
    command = [*tickwork_command(), "check", *map(str, files)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_check_accepts_an_expression_as_call_target(project: Project) -> None:
    write_project(project.root)

    checked = check(project.root / "main.dig")

    assert checked.returncode == 0, checked.stderr


def test_check_still_refuses_a_missing_literal_target_at_its_line(project: Project) -> None:
    path = project.write("wf.dig", "+a:\n  echo>: a\n+b:\n  call>: sub/none\n")

    checked = check(path)

    assert checked.returncode != 0
    assert "wf.dig:4: 'call>' target 'sub/none' does not exist (sub/none.dig)" in checked.stderr


@pytest.mark.timeout(120)
def test_an_agent_runs_a_dynamically_called_file_of_a_pushed_project_in_its_folder(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given a pushed project whose only copy is its archive in the store
    marker = tmp_path / "folders.txt"
    source = tmp_path / "source"
    write_project(source, f">> {marker}")
    archive = read_project_archive(pack_project(source))
    shutil.rmtree(source)
    now = utc_now()
    with cluster.engine.begin() as conn:
        pushed = project_store.push_revision(
            conn, project_name="called", revision_name="r1", archive=archive, now=now
        )
        definition_id = project_store.ensure_workflow_definition(
            conn, pushed.revision_id, archive.workflows["main"]
        )
        session_id = session_store.ensure_session(
            conn,
            project_id=pushed.project_id,
            workflow_name="main",
            session_time=now.replace(microsecond=0),
            now=now,
        )
        attempt_id = session_store.insert_attempt(
            conn,
            session_id=session_id,
            name="manual-1",
            workflow_definition_id=definition_id,
            timezone="UTC",
            params={"child": "sub/child"},
            now=now,
        )
    assert attempt_id is not None

    # When an executor and an agent run it
    cluster.start_executor()
    cluster.start_agent("agent-a")

    # Then the call found the file in the archive, and each task ran in its file's folder
    assert cluster.wait_for_attempt_end(attempt_id, 90) == "success", cluster.explain(attempt_id)
    unpacked = (cluster.root / "state" / "agent-a" / "projects" / archive.digest).resolve()
    assert sorted(marker.read_text().split()) == [
        str(unpacked / "sub"),
        str(unpacked / "sub" / "data"),
        str(unpacked / "sub" / "subsub"),
    ]
