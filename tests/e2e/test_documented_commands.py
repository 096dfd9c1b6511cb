"""Every ``tickwork`` command that README.md, deploy/README.md and docs/ show runs as written.

The commands of their shell blocks run, page after page, against one live standalone with
the examples pushed (as ``make run`` starts it), in a working directory holding what the
pages assume; each must end with its documented exit status. A failure names the
command's ``file:line``. The few commands a test cannot run (servers, ``make cluster``)
are parsed against the command tree instead, by tests/test_documentation.py.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e._run import tickwork_command
from tests.e2e._standalone import (
    COMMAND_TIMEOUT_SECONDS,
    StandaloneProcess,
    client_environment,
    running_standalone,
)
from tests.support.documented_commands import (
    AttemptIds,
    DocumentedCommand,
    documentation_files,
    documented_commands,
    prepare_workdir,
)
from tests.support.servers import find_free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SECRET_KEY = "a passphrase for the documented commands"
CANNOT_REACH = "cannot reach the tickwork API"
"""A documented output saying this shows a command run with no API listening."""


@dataclass(frozen=True)
class Docs:
    """A live standalone and the working directory the documented commands run in."""

    standalone: StandaloneProcess
    workdir: Path


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docs]:
    """A standalone with the examples pushed, and the project ``etl`` the pages name."""
    root = tmp_path_factory.mktemp("documented")
    workdir = root / "work"
    prepare_workdir(workdir)
    environ = {"TICKWORK_SECRET_KEY": SECRET_KEY}
    project = str(workdir / "examples")
    with running_standalone(root / "state", "--project", project, environ=environ) as server:
        pushed = server.tickwork("push", project, "--project", "etl")
        assert pushed.exit_code == 0, pushed.explain()
        yield Docs(server, workdir)


def _run(docs: Docs, command: DocumentedCommand, ids: AttemptIds) -> str | None:
    """Run one documented command; what went wrong, or None."""
    endpoint = docs.standalone.endpoint
    if CANNOT_REACH in command.output:
        endpoint = f"http://127.0.0.1:{find_free_port()}"
    args = ids.translate(command.args)
    done = subprocess.run(
        [*tickwork_command(), *args],
        env={**command.environ, **client_environment(endpoint)},
        cwd=docs.workdir,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    ids.learn(command.output, done.stdout + done.stderr)
    if done.returncode == command.exit_status:
        return None
    printed = (done.stderr or done.stdout).strip().splitlines()
    last = printed[-1] if printed else "(nothing printed)"
    ran = shlex.join(["tickwork", *args])
    return f"{command.where}: `{ran}` exited {done.returncode}, not {command.exit_status}: {last}"


# Some sixty commands one after another: minutes on a busy machine, not the suite's 120 s.
@pytest.mark.timeout(900)
def test_every_documented_command_runs_as_written_against_a_live_standalone(docs: Docs) -> None:
    failures = []
    for path in documentation_files():
        ids = AttemptIds()
        for command in documented_commands(path):
            if command.not_run_because() is None:
                failures.append(_run(docs, command, ids))
    found = [failure for failure in failures if failure]
    assert not found, "documented commands that fail:\n" + "\n".join(found)
