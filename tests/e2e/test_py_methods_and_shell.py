"""``py>`` on a method of a class, ``py>`` failures, and ``sh>``'s ``shell:``, end to end.

As in Digdag, ``py>: tasks.Greeter.greet`` makes a new ``Greeter`` for the task (its
constructor gets the params it names) and calls ``greet`` with the params it names. A
failing function fails its task with ``Type: message`` and logs a traceback of the
project's frames only; a missing class or method fails with an error naming the target;
``shell: [bash, -c]`` runs the command with bash. The same projects run under
``tickwork run`` and on a cluster (an executor and an agent as OS processes).
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e._run import Project, Run
from tests.fault._cluster import Cluster
from tests.support.stored_logs import stored_runs

pytestmark = [pytest.mark.e2e]

FRAME = re.compile(r'^File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)$')

TASKS = """
class Greeter:
    def __init__(self, greeting):
        self.greeting = greeting
        self.calls = 0

    def greet(self, name):
        self.calls += 1
        note("%s %s, call %d" % (self.greeting, name, self.calls))
        return {"greeted": name}

    def again(self, greeted):
        self.calls += 1
        note("again %s, call %d" % (greeted, self.calls))


def note(text):
    with open("out.txt", "a") as out:
        out.write(text + "\\n")


def check(limit):
    validate(int(limit))


def validate(value):
    raise ValueError("limit %d is too high" % value)
"""

WORKING = """
_export:
  greeting: hello
  name: ann
+greet:
  py>: tasks.Greeter.greet
+again:
  py>: tasks.Greeter.again
+bash:
  sh>: if [[ "$name" == a* ]]; then echo "bash $name" >> out.txt; fi
  shell: [bash, -c]
"""

EXPECTED = ["hello ann, call 1", "again ann, call 1", "bash ann"]

RAISING = """
+check:
  py>: tasks.check
  limit: 7
"""

MISSING = """
+step1:
  py>: tasks.Greeter.step1
"""

BROKEN_IMPORT = """
+load:
  py>: broken.load
"""

BAD_SHELL = """
+hello:
  sh>: echo hi
  shell: bash
"""

BAD_SHELL_PROBLEM = "bad_shell.dig:4: 'sh>' shell must be a non-empty list of strings, got a string"

BROKEN = """
import json


def load():
    return {}

missing_name + 1
"""


def write_project(directory: Path) -> None:
    (directory / "tasks.py").write_text(textwrap.dedent(TASKS))
    (directory / "broken.py").write_text(textwrap.dedent(BROKEN))
    for name, text in [
        ("working", WORKING),
        ("raising", RAISING),
        ("missing", MISSING),
        ("broken_import", BROKEN_IMPORT),
        ("bad_shell", BAD_SHELL),
    ]:
        (directory / f"{name}.dig").write_text(textwrap.dedent(text))


def failure(run: Run, task: str) -> tuple[str, list[str]]:
    """The error ``tickwork run`` reported for ``task``, and the log lines shown under it."""
    lines = [line.strip() for line in run.stdout.splitlines()]
    marker = f"failed {task}: "
    start = next(i for i, line in enumerate(lines) if line.startswith(marker))
    shown = []
    for line in lines[start + 1 :]:
        if not line.startswith("| "):
            break
        shown.append(line[2:])
    return lines[start][len(marker) :], shown


def frames(shown: list[str]) -> list[str]:
    """The frames of a logged traceback, as ``file:line in function``."""
    found = (FRAME.match(line.strip()) for line in shown)
    return [f"{m['file']}:{m['line']} in {m['function']}" for m in found if m]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    made = Project.empty(tmp_path)
    write_project(made.root)
    return made


@pytest.mark.timeout(60)
def test_a_class_method_gets_a_new_instance_and_params_and_bash_runs_the_shell_option(
    project: Project,
) -> None:
    run = project.run("working.dig")

    assert run.exit_code == 0, run.explain()
    assert project.lines("out.txt") == EXPECTED


@pytest.mark.timeout(60)
def test_a_raising_function_fails_with_its_exception_and_a_traceback_of_its_own_frames(
    project: Project,
) -> None:
    run = project.run("raising.dig")

    assert run.exit_code != 0, run.explain()
    message, shown = failure(run, "+raising+check")
    assert message == "ValueError: limit 7 is too high"
    assert shown[0] == "Traceback (most recent call last):"
    assert shown[-1] == "ValueError: limit 7 is too high"
    assert frames(shown) == ["tasks.py:23 in check", "tasks.py:27 in validate"]


@pytest.mark.timeout(60)
def test_a_missing_method_fails_with_an_error_naming_the_target(project: Project) -> None:
    run = project.run("missing.dig")

    assert run.exit_code != 0, run.explain()
    message, _ = failure(run, "+missing+step1")
    assert message == ("py> tasks.Greeter.step1: class 'tasks.Greeter' has no method 'step1'")
    assert "Traceback" not in run.stdout


@pytest.mark.timeout(60)
def test_a_module_that_fails_to_import_is_named_with_its_file_and_line(project: Project) -> None:
    run = project.run("broken_import.dig")

    assert run.exit_code != 0, run.explain()
    message, shown = failure(run, "+broken_import+load")
    assert message == (
        "cannot import module 'broken' (broken.py, line 8): "
        "NameError: name 'missing_name' is not defined"
    )
    assert frames(shown) == ["broken.py:8 in <module>"]


@pytest.mark.timeout(60)
def test_tickwork_check_refuses_a_shell_that_is_not_a_list_with_file_and_line(
    project: Project,
) -> None:
    checked = project.check("bad_shell.dig")

    assert checked.exit_code == 2, checked
    assert checked.stderr.strip() == BAD_SHELL_PROBLEM


@pytest.mark.timeout(120)
def test_class_methods_failures_and_the_shell_option_on_a_cluster(cluster: Cluster) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    write_project(cluster.project_dir)

    def run(name: str) -> Run:
        path = cluster.project_dir / f"{name}.dig"
        done = cluster.tickwork("run", str(path), "--on-executor")
        return Run(done.returncode, done.stdout, done.stderr)

    working = run("working")
    assert working.exit_code == 0, f"{working.explain()}\n{cluster.explain()}"
    assert (cluster.project_dir / "out.txt").read_text().splitlines() == EXPECTED

    raising = run("raising")
    assert raising.exit_code != 0, raising.explain()
    message, _ = failure(raising, "+raising+check")
    assert message == "ValueError: limit 7 is too high"
    stored = stored_runs(cluster.database_url)
    logged = [line for run in stored for line in run.text.splitlines()]
    assert frames(logged) == ["tasks.py:23 in check", "tasks.py:27 in validate"], logged

    missing = run("missing")
    assert missing.exit_code != 0, missing.explain()
    message, _ = failure(missing, "+missing+step1")
    assert message == "py> tasks.Greeter.step1: class 'tasks.Greeter' has no method 'step1'"

    refused = run("bad_shell")
    assert refused.exit_code == 2, refused.explain()
    assert BAD_SHELL_PROBLEM in refused.stderr


@pytest.mark.timeout(60)
def test_the_python_option_runs_the_task_with_the_interpreter_it_names(
    project: Project,
) -> None:
    wrapper = project.root / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "wrapped" >> out.txt\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    project.write(
        "other_python.dig",
        """
        _export:
          greeting: hi
          name: bo
        +greet:
          py>: tasks.Greeter.greet
          python: [./bin/python, -X, utf8]
        """,
    )
    run = project.run("other_python.dig")

    assert run.exit_code == 0, run.explain()
    assert project.lines("out.txt") == ["wrapped", "hi bo, call 1"]
