"""Digdag's own ``examples/*.dig``, run unchanged with ``tickwork run``, each ending as the
table below says: success, the failure the example is written to show, or a refusal at
check time naming the operator tickwork does not run.

Digdag's files are not part of this repository: set ``TICKWORK_DIGDAG_EXAMPLES`` to the
``examples`` folder of a Digdag checkout (``git clone
https://github.com/treasure-data/digdag``) to run these; without it they are skipped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.e2e._run import Project
from tickwork.shared.exits import ExitCode

pytestmark = [pytest.mark.e2e]

EXAMPLES_VARIABLE = "TICKWORK_DIGDAG_EXAMPLES"
SUCCEEDS = (
    "basic",
    "call",
    "check_task",
    "conditions",
    "export_params",
    "include",
    "js_vars",
    "params",
    "params_child",
    "python_generate_subtasks",
    "schedule_daily",
    "schedule_hourly",
    "schedule_weekly",
    "shell_envvar",
)
FAILS_AS_WRITTEN = {
    "error_task": "+error_task+test fails on purpose, and its _error task runs",
    "python_args": "Digdag's example calls tasks.python_args.exported_arguments, which its "
    "tasks/python_args.py does not define: +e fails in Digdag too",
}
REFUSED = {
    "emr": "emr>",
    "ruby_args": "rb>",
    "ruby_generate_subtasks": "rb>",
    "td_for_each": "td_for_each>",
    "treasuredata": "td_ddl>",
}
NOT_RUN_HERE = {
    "http_for_each": "fetches https://jsonplaceholder.typicode.com: needs the internet",
    "mail": "sends through smtp.gmail.com with a password: needs that account",
    "sla": "sleeps 3 minutes to miss its SLA",
    "sla_duration": "sleeps 3 minutes to miss its SLA",
}
"""Examples that run (check passes) but need what a test machine has not, or long."""


def examples_folder() -> Path:
    given = os.environ.get(EXAMPLES_VARIABLE, "")
    if not given or not (Path(given) / "basic.dig").is_file():
        pytest.skip(f"{EXAMPLES_VARIABLE} names no Digdag examples folder")
    return Path(given)


@pytest.fixture
def examples(tmp_path: Path) -> Project:
    """A copy of Digdag's examples folder, as a project of its own."""
    root = tmp_path / "examples"
    shutil.copytree(examples_folder(), root, ignore=shutil.ignore_patterns(".digdag"))
    return Project(root, tmp_path / "state")


def test_the_table_names_every_example(examples: Project) -> None:
    named = {*SUCCEEDS, *FAILS_AS_WRITTEN, *REFUSED, *NOT_RUN_HERE}
    assert {path.stem for path in examples.root.glob("*.dig")} == named


@pytest.mark.parametrize("name", SUCCEEDS)
def test_an_example_runs_unchanged_and_succeeds(examples: Project, name: str) -> None:
    run = examples.run(f"{name}.dig")
    assert run.exit_code == ExitCode.OK, run.explain()


@pytest.mark.parametrize("name", sorted(FAILS_AS_WRITTEN))
def test_an_example_written_to_fail_fails(examples: Project, name: str) -> None:
    run = examples.run(f"{name}.dig")
    assert run.exit_code == ExitCode.FAILED, run.explain()


@pytest.mark.parametrize(("name", "operator"), sorted(REFUSED.items()))
def test_an_example_of_an_operator_not_run_here_is_refused_naming_it(
    examples: Project, name: str, operator: str
) -> None:
    run = examples.run(f"{name}.dig")
    assert run.exit_code == ExitCode.INVALID, run.explain()
    assert f"Digdag's operator '{operator}' is not supported: " in run.stderr


@pytest.mark.parametrize("name", sorted(NOT_RUN_HERE))
def test_an_example_that_needs_the_outside_world_passes_its_check(
    examples: Project, name: str
) -> None:
    checked = examples.run(f"{name}.dig", "--dry-run")
    assert checked.exit_code == ExitCode.OK, checked.explain()
