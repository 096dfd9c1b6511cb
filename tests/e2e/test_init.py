"""``tickwork init DIR``: a new project named after its directory that runs as it is, and
that never overwrites a file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e._run import Project, tickwork_command
from tickwork.shared.exits import ExitCode

pytestmark = pytest.mark.e2e


def init(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*tickwork_command(), "init", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_new_project_has_a_workflow_named_after_it_that_runs(tmp_path: Path) -> None:
    made = init(tmp_path, "nightly")
    assert made.returncode == 0, made.stderr
    root = tmp_path / "nightly"
    assert sorted(p.name for p in root.iterdir()) == [".gitignore", "README.md", "nightly.dig"]
    assert ".tickwork/" in (root / ".gitignore").read_text()
    assert "tickwork run nightly.dig" in (root / "README.md").read_text()
    run = Project(root, tmp_path / "state").run("nightly.dig")
    assert run.exit_code == 0, run.explain()
    assert "success: 2" in run.stdout


def test_init_never_overwrites_a_file(tmp_path: Path) -> None:
    root = tmp_path / "etl"
    root.mkdir()
    (root / "README.md").write_text("mine\n")
    refused = init(tmp_path, "etl")
    assert refused.returncode == ExitCode.INVALID
    assert "README.md exists already: nothing was written" in refused.stderr
    assert (root / "README.md").read_text() == "mine\n"
    assert not (root / "etl.dig").exists()


def test_a_directory_whose_name_cannot_name_a_project_is_refused(tmp_path: Path) -> None:
    refused = init(tmp_path, "two words")
    assert refused.returncode == ExitCode.INVALID
    assert "'two words' cannot name a project" in refused.stderr
    assert not (tmp_path / "two words").exists()
