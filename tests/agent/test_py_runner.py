"""The child side of ``py>`` (services/agent/operators/py_child.py), run as the agent runs
it: a Python process in the project directory, the request on stdin, the outcome in a file.

It finds ``module.function``, ``module.Class.method`` and ``module.Class`` (its ``run``)
as Digdag's runner does, passes each callable the params it names, and reports what it
cannot find or call with an error naming the target.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tickwork.services.agent.operators.base import OperatorFailed
from tickwork.services.agent.operators.py import CHILD_SCRIPT, python_command

TASKS = """
class Loader:
    def __init__(self, table, batch=10):
        self.table = table
        self.batch = batch

    def load(self, day):
        return {"loaded": "%s %s %s" % (self.table, self.batch, day)}

    def run(self):
        return {"ran": self.table}


class Plain:
    def step(self, **params):
        return {"keys": sorted(params)}


def needs(day, table):
    return {"got": [day, table]}


NOT_CALLABLE = 3
"""


def call(
    project: Path, target: str, params: dict[str, Any], python: Any = None
) -> tuple[int, dict[str, Any], str]:
    """Run the child for ``target`` (with the ``python`` option's interpreter, if given):
    its exit status, its outcome and what it wrote."""
    result = project / "result.json"
    request = {"function": target, "params": params, "result_path": str(result)}
    done = subprocess.run(
        python_command(python),
        cwd=project,
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, json.loads(result.read_text()), done.stdout + done.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "tasks.py").write_text(textwrap.dedent(TASKS))
    return tmp_path


def test_a_method_runs_on_an_instance_made_with_the_params_its_constructor_names(
    project: Path,
) -> None:
    code, outcome, _ = call(project, "tasks.Loader.load", {"table": "t", "day": "d", "x": 1})

    assert code == 0
    assert outcome["store"] == {"loaded": "t 10 d"}


def test_a_class_as_the_target_runs_its_run_method(project: Path) -> None:
    code, outcome, _ = call(project, "tasks.Loader", {"table": "t"})

    assert code == 0
    assert outcome["store"] == {"ran": "t"}


def test_a_class_without_a_constructor_and_a_method_taking_kwargs_gets_every_param(
    project: Path,
) -> None:
    code, outcome, _ = call(project, "tasks.Plain.step", {"a": 1, "b": 2})

    assert code == 0
    assert outcome["store"] == {"keys": ["a", "b"]}


@pytest.mark.parametrize(
    ("target", "params", "error"),
    [
        ("tasks.Loader.step1", {"table": "t"}, "class 'tasks.Loader' has no method 'step1'"),
        ("tasks.Missing.step1", {}, "module 'tasks' has no attribute 'Missing'"),
        ("nowhere.step1", {}, "no module named 'nowhere' in the project"),
        ("tasks.NOT_CALLABLE", {}, "'tasks.NOT_CALLABLE' is not callable"),
    ],
)
def test_a_target_that_names_no_callable_fails_with_an_error_naming_it(
    project: Path, target: str, params: dict[str, Any], error: str
) -> None:
    code, outcome, written = call(project, target, params)

    assert code == 3
    assert outcome["error"] == f"py> {target}: {error}"
    assert "Traceback" not in written


def test_a_required_parameter_that_is_not_set_is_named(project: Path) -> None:
    code, outcome, _ = call(project, "tasks.Loader.load", {"day": "d"})

    assert code == 3
    assert outcome["error"] == (
        "py> tasks.Loader.load: tasks.Loader requires parameter 'table', which is not set"
    )


def test_the_python_option_runs_another_interpreter_with_the_project_first(
    project: Path,
) -> None:
    (project / "probe.py").write_text(
        "import sys\ndef where():\n    return {'path': sys.path, 'exe': sys.executable}\n"
    )
    wrapper = project / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\necho wrapped > "$(dirname "$0")/used"\nexec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    code, outcome, output = call(project, "probe.where", {}, ["./bin/python", "-X", "utf8"])
    assert code == 0, output
    assert (project / "bin" / "used").read_text() == "wrapped\n"
    path = outcome["store"]["path"]
    assert path[0] == "." and str(CHILD_SCRIPT.parent) not in path


@pytest.mark.parametrize("given", [3, [], ["python", ""], {"path": "python"}])
def test_a_python_option_that_is_not_a_path_or_a_command_fails_naming_it(given: Any) -> None:
    with pytest.raises(OperatorFailed, match="'py>' python must be a path or a list"):
        python_command(given)
