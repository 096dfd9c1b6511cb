"""``tickwork run`` and ``tickwork check`` on values as Digdag projects write them: quoted
numbers, ``typeof`` defaults and ``wait>`` options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._run import Project

pytestmark = pytest.mark.e2e


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """An empty project with its own state directory."""
    return Project.empty(tmp_path)


def test_a_quoted_retry_count_retries_that_many_times(project: Project) -> None:
    # Given a task that fails twice, with `_retry: "2"` quoted as YAML authors often do
    project.write(
        "wf.dig",
        """
        +flaky:
          _retry: "2"
          sh>: n=$(cat runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > runs; test $n -ge 3
        """,
    )

    # When it is run
    run = project.run("wf.dig")

    # Then it ran three times: the first and two retries
    assert run.exit_code == 0, run.explain()
    assert project.read("runs").strip() == "3"
    assert "retried: +wf+flaky (2 retries)" in run.summary


def test_typeof_gives_a_param_its_default_when_it_is_not_set(project: Project) -> None:
    # Given a task that defaults `region` the way Digdag projects do
    project.write(
        "wf.dig",
        """
        +say:
          echo>: "region=${typeof region === 'undefined' ? 'us' : region}"
        """,
    )

    # When it is run without the param, then with it
    without = project.run("wf.dig", "-t", "2026-01-01")
    with_param = project.run("wf.dig", "-t", "2026-01-02", "-p", "region=eu")

    # Then the default stands in only when the param is missing
    assert without.exit_code == 0, without.explain()
    assert with_param.exit_code == 0, with_param.explain()
    assert ("+wf+say", "region=us") in without.output()
    assert ("+wf+say", "region=eu") in with_param.output()


def test_check_refuses_a_poll_interval_on_a_blocking_wait_naming_file_and_line(
    project: Project,
) -> None:
    # Given a wait> with an option combination Digdag refuses
    project.write("wf.dig", "+pause:\n  wait>: 10s\n  blocking: true\n  poll_interval: 5s\n")

    # When it is checked
    checked = project.check("wf.dig")

    # Then it is refused with the file and the option's line
    assert checked.exit_code == 2, checked.stderr
    assert checked.stderr.strip() == (
        "wf.dig:4: 'wait>' poll_interval cannot be set with blocking: true"
    )
