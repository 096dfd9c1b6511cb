"""``py>`` adding subtasks and exporting params, and ``_disable``, end to end.

The same workflow runs under ``tickwork run`` and on a cluster (an executor and an agent
as OS processes): the subtasks run in the order they were added, under Digdag's names
(``+wf+plan^sub+subtask0`` ...), they see what the function exported, later tasks see what
it stored, and a disabled group runs nothing.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.e2e._run import Project
from tests.fault._cluster import Cluster

pytestmark = [pytest.mark.e2e]

WORKFLOW = """
_export:
  n: 2
+plan:
  py>: tasks.plan
+after:
  sh>: echo "after ${stored} ${typeof_table}" >> out.txt
+skipped:
  _disable: true
  +never:
    sh>: echo never >> out.txt
+last:
  sh>: echo last >> out.txt
"""

TASKS = """
import digdag


def plan(n):
    digdag.env.store({"stored": "s1", "typeof_table": "hidden"})
    digdag.env.export({"table": "events"})
    for i in range(int(n)):
        digdag.env.add_subtask({"sh>": "echo sub%d ${table} >> out.txt" % i})
    digdag.env.add_subtask(step, part=9)


def step(part, table):
    with open("out.txt", "a") as out:
        out.write("step %s %s\\n" % (part, table))
"""

EXPECTED = ["sub0 events", "sub1 events", "step 9 events", "after s1 hidden", "last"]


def write_project(directory: Path) -> Path:
    (directory / "tasks.py").write_text(textwrap.dedent(TASKS))
    path = directory / "wf.dig"
    path.write_text(textwrap.dedent(WORKFLOW))
    return path


@pytest.mark.timeout(90)
def test_py_subtasks_run_in_order_with_exports_under_tickwork_run(tmp_path: Path) -> None:
    project = Project.empty(tmp_path)
    write_project(project.root)

    run = project.run("wf.dig")

    assert run.exit_code == 0, run.explain()
    assert project.lines("out.txt") == EXPECTED
    succeeded = [task for task, state in run.progress() if state == "success"]
    for name in ("+wf+plan^sub+subtask0", "+wf+plan^sub+subtask1", "+wf+plan^sub+subtask2"):
        assert name in succeeded, run.explain()
    assert "+wf+skipped+never" not in {task for task, _ in run.progress()}


@pytest.mark.timeout(90)
def test_py_subtasks_run_on_a_cluster(cluster: Cluster) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    path = write_project(cluster.project_dir)

    done = cluster.tickwork("run", str(path), "--on-executor", "-q")

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{cluster.explain()}"
    lines = (cluster.project_dir / "out.txt").read_text().splitlines()
    assert lines == EXPECTED
