"""Specifications of the folder a task's commands run in: its ``_workdir`` inside the
project directory, never outside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.shared.dispatch.messages import TaskMessage


def context_in(project: Path, workdir: str, log: Path) -> OperatorContext:
    message = TaskMessage(
        task_id=1,
        attempt_id=1,
        lease_token=1,
        full_name="+wf+task",
        operator="sh",
        command="pwd",
        params={},
        project_dir=str(project),
        workdir=workdir,
    )
    return OperatorContext(message, log.open("w"), log)


def test_a_task_works_in_its_workdir_inside_the_project(tmp_path: Path) -> None:
    (tmp_path / "project" / "sub" / "data").mkdir(parents=True)
    context = context_in(tmp_path / "project", "sub/data", tmp_path / "task.log")
    assert context.working_dir == (tmp_path / "project" / "sub" / "data").resolve()
    context.log_file.close()


def test_without_a_workdir_a_task_works_in_the_project_directory(tmp_path: Path) -> None:
    context = context_in(tmp_path, "", tmp_path / "task.log")
    assert context.working_dir == tmp_path.resolve()
    context.log_file.close()


@pytest.mark.parametrize(
    ("workdir", "message"),
    [
        ("..", "_workdir '..' is outside the project"),
        ("/etc", "_workdir '/etc' is outside the project"),
        ("missing", "_workdir 'missing' is not a folder"),
    ],
)
def test_a_workdir_outside_the_project_or_missing_fails_the_task(
    tmp_path: Path, workdir: str, message: str
) -> None:
    (tmp_path / "project").mkdir()
    context = context_in(tmp_path / "project", workdir, tmp_path / "task.log")
    with pytest.raises(OperatorFailed, match=message):
        _ = context.working_dir
    context.log_file.close()
