"""Every ``tickwork`` command that README.md, deploy/README.md and docs/ show runs as written.

The commands of their shell blocks run, page after page, against one live standalone with
the examples pushed, in a working directory holding what the pages assume; each must end
with its documented exit status. Servers, cluster commands and the prose's templates
cannot run here: their words are checked against tickwork's command tree instead. A
failure names the command's ``file:line``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from werkzeug.exceptions import HTTPException

from services.api.app import create_app
from services.api.config import ApiConfig
from services.cli import main
from tests.e2e._run import tickwork_command
from tests.e2e._standalone import (
    COMMAND_TIMEOUT_SECONDS,
    StandaloneProcess,
    client_environment,
    running_standalone,
)
from tests.support.documented_commands import (
    REPO_ROOT,
    AttemptIds,
    DocumentedCommand,
    command_problems,
    documentation_files,
    documented_commands,
)
from tests.support.servers import find_free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The commands that are not run, each checked against its command's options instead.
NOT_RUN_SUBCOMMANDS = {
    "api": "a server: it runs until it is stopped",
    "scheduler": "a server: it runs until it is stopped",
    "executor": "a server: it runs until it is stopped",
    "agent": "a server: it runs until it is stopped",
    "standalone": "a server: it runs until it is stopped",
    "dev": "`make cluster`: every service on the local PostgreSQL and Redis until Ctrl-C",
    "db": "migrates or waits for an operator's PostgreSQL database",
}
NOT_RUN_OPTIONS = {
    "--on-executor": "hands the run to running executors and agents on PostgreSQL and Redis",
}

# What the pages' commands assume besides the examples: the workflow file `wf.dig` that
# README's "Running a workflow" runs, a secret's value in `pw.txt`, and a project `etl`.
WORKFLOW = """\
_export:
  table: events
  db:
    host: db.example.internal

+load:
  echo>: loading ${table} from ${db.host} for ${session_date}
"""
SECRET_KEY = "a passphrase for the documented commands"
CANNOT_REACH = "cannot reach the tickwork API"
ENDPOINT = re.compile(r"`(?P<method>GET|POST|PUT|PATCH|DELETE) (?P<path>/[^`\s]*)")
PLACEHOLDER = re.compile(r"\{\w+\}|[A-Z][A-Z_]*")


@dataclass(frozen=True)
class Docs:
    """A live standalone and the working directory the documented commands run in."""

    standalone: StandaloneProcess
    workdir: Path


def _every_command() -> list[DocumentedCommand]:
    return [command for path in documentation_files() for command in documented_commands(path)]


def not_run_because(command: DocumentedCommand) -> str | None:
    """Why a command is only checked against its options, or None when it runs."""
    if command.inline:
        return "prose: a template such as `tickwork log ID`"
    if command.subcommand in NOT_RUN_SUBCOMMANDS:
        return NOT_RUN_SUBCOMMANDS[command.subcommand]
    return next((why for option, why in NOT_RUN_OPTIONS.items() if option in command.args), None)


def _prepare_workdir(workdir: Path) -> None:
    shutil.copytree(
        REPO_ROOT / "examples", workdir / "examples", ignore=shutil.ignore_patterns(".tickwork")
    )
    (workdir / "wf.dig").write_text(WORKFLOW, encoding="utf-8")
    (workdir / "pw.txt").write_text("a database password\n", encoding="utf-8")


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docs]:
    """A standalone with the examples pushed (as `make run` does) and the project ``etl``."""
    root = tmp_path_factory.mktemp("documented")
    workdir = root / "work"
    _prepare_workdir(workdir)
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
    environ = {**command.environ, **client_environment(endpoint)}
    args = ids.translate(command.args)
    done = subprocess.run(
        [*tickwork_command(), *args],
        env=environ,
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


def test_every_documented_command_runs_as_written_against_a_live_standalone(docs: Docs) -> None:
    failures = []
    for path in documentation_files():
        ids = AttemptIds()
        for command in documented_commands(path):
            if not_run_because(command) is None:
                failures.append(_run(docs, command, ids))
    found = [failure for failure in failures if failure]
    assert not found, "documented commands that fail:\n" + "\n".join(found)


def test_every_command_that_cannot_run_names_commands_and_options_tickwork_has(
    docs: Docs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(docs.workdir)
    failures = []
    for command in _every_command():
        reason = not_run_because(command)
        if reason is None:
            continue
        for name in [name for name in os.environ if name.startswith("TICKWORK_")]:
            monkeypatch.delenv(name)
        for name, value in command.environ.items():
            monkeypatch.setenv(name, value)
        problems = command_problems(main, command)
        where = f"{command.where}: `{command.text}` (not run: {reason})"
        failures += [f"{where}: {problem}" for problem in problems]
    assert not failures, "documented commands tickwork does not know:\n" + "\n".join(failures)


def test_every_exception_is_still_used_by_a_documented_command() -> None:
    commands = _every_command()
    unused = [name for name in NOT_RUN_SUBCOMMANDS if all(c.subcommand != name for c in commands)]
    unused += [option for option in NOT_RUN_OPTIONS if all(option not in c.args for c in commands)]
    assert unused == [], "exceptions no page needs any more"


def test_every_documented_request_names_a_route_of_the_api() -> None:
    app = create_app(ApiConfig(database_url="sqlite://", auth_enabled=False))
    routes = app.url_map.bind("127.0.0.1")
    failures = []
    for where, method, target in _documented_requests():
        try:
            routes.match(target, method=method)
        except HTTPException as exc:
            failures.append(f"{where}: {method} {target}: {exc.name}")
    assert not failures, "documented requests the API has no route for:\n" + "\n".join(failures)


def _documented_requests() -> Iterator[tuple[str, str, str]]:
    """Each request the pages show, as a ``curl`` command or as `` `METHOD /path` ``:
    where, its method and its path (placeholders such as ``{id}`` or ``NAME`` filled)."""
    for path in documentation_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            where = f"{path.relative_to(REPO_ROOT)}:{number}"
            for match in ENDPOINT.finditer(line):
                yield where, match["method"], _filled(match["path"])
            if line.lstrip().startswith("curl "):
                method, url = _curl_request(lines, number)
                yield where, method, _filled(urlsplit(url).path)


def _curl_request(lines: list[str], number: int) -> tuple[str, str]:
    """The method and URL of the ``curl`` command at line ``number`` (continued by ``\\``)."""
    text = lines[number - 1]
    following = number
    while text.rstrip().endswith("\\") and following < len(lines):
        text = text.rstrip()[:-1] + " " + lines[following]
        following += 1
    words = shlex.split(text, comments=True)
    method = words[words.index("-X") + 1] if "-X" in words else "GET"
    return method, next(word for word in words if word.startswith("http"))


def _filled(path: str) -> str:
    """A documented path with each placeholder (``{id}``, ``NAME``) replaced by ``1``."""
    parts = path.split("?", 1)[0].split("/")
    return "/".join("1" if PLACEHOLDER.fullmatch(part) else part for part in parts)
