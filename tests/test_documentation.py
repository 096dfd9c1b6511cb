"""What the documentation shows exists: each ``tickwork`` command a test cannot run parses
against tickwork's command tree, each request names a route of the API, and README's CLI
tour is what ``make readme-tour`` wrote. (The commands a test can run are run, against a
live standalone, by tests/e2e/test_documented_commands.py.)"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from werkzeug.exceptions import HTTPException

from tests.support.documented_commands import (
    NOT_RUN_OPTIONS,
    NOT_RUN_SUBCOMMANDS,
    REPO_ROOT,
    AttemptIds,
    DocumentedCommand,
    command_problems,
    documentation_files,
    documented_commands,
    every_documented_command,
    prepare_workdir,
)
from tests.support.readme_tour import BEGIN, END, TOUR, command_line
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.services.compose.commands import main

ENDPOINT = re.compile(r"`(?P<method>GET|POST|PUT|PATCH|DELETE) (?P<path>/[^`\s]*)")
PLACEHOLDER = re.compile(r"\{\w+\}|[A-Z][A-Z_]*")
README = REPO_ROOT / "README.md"


def test_every_command_a_test_cannot_run_names_commands_and_options_tickwork_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare_workdir(tmp_path)
    monkeypatch.chdir(tmp_path)
    failures = []
    for command in every_documented_command():
        reason = command.not_run_because()
        if reason is None:
            continue
        for name in [name for name in os.environ if name.startswith("TICKWORK_")]:
            monkeypatch.delenv(name)
        for name, value in command.environ.items():
            monkeypatch.setenv(name, value)
        where = f"{command.where}: `{command.text}` (not run: {reason})"
        failures += [f"{where}: {problem}" for problem in command_problems(main, command)]
    assert not failures, "documented commands tickwork does not know:\n" + "\n".join(failures)


def test_every_exception_is_still_used_by_a_documented_command() -> None:
    commands = every_documented_command()
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


def test_the_readme_tour_shows_the_commands_make_readme_tour_runs() -> None:
    """The tour's ids differ from run to run; everything else on a command line is TOUR's."""
    text = README.read_text(encoding="utf-8")
    first = text[: text.index(BEGIN)].count("\n") + 1
    last = text[: text.index(END)].count("\n") + 1
    shown = [line for line in text.splitlines()[first:last] if line.startswith("$ ")]
    expected = [command_line(f"tickwork {step.command}", step) for step in TOUR]
    assert [_without_ids(line) for line in shown] == [_without_ids(line) for line in expected], (
        "README's tour is out of date: run `make readme-tour`"
    )


def _without_ids(line: str) -> str:
    """A tour line with every number and ``{name}`` as ``N``, and single spaces."""
    return re.sub(r"\s+", " ", re.sub(r"\{\w+\}|\d+", "N", line))


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


# --- how documented commands are read -------------------------------------------------------


def _page(tmp_path: Path, text: str) -> list[DocumentedCommand]:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return documented_commands(page)


class TestReadingCommands:
    def test_a_console_command_carries_its_output_and_the_exit_status_its_comment_names(
        self, tmp_path: Path
    ) -> None:
        (command,) = _page(
            tmp_path,
            "```console\n$ tickwork start p w   # exit 4: it exists\nerror: exists\n```\n",
        )
        assert command.args == ("start", "p", "w")
        assert (command.exit_status, command.output) == (4, "error: exists\n")

    def test_a_shell_line_keeps_its_variables_and_drops_what_env_unsets(
        self, tmp_path: Path
    ) -> None:
        text = "```sh\nexport A=1 B=2\nenv -u A C=3 tickwork agent &\nmake run\n```\n"
        (command,) = _page(tmp_path, text)
        assert command.args == ("agent",)
        assert command.environ == {"B": "2", "C": "3"}

    def test_yaml_blocks_are_not_commands_and_prose_commands_are_templates(
        self, tmp_path: Path
    ) -> None:
        text = "```yaml\nx: tickwork run\n```\nRun `tickwork log ID` to see it.\n"
        (command,) = _page(tmp_path, text)
        assert (command.args, command.inline) == (("log", "ID"), True)
        assert command.not_run_because() is not None


class TestCheckingTemplates:
    @pytest.mark.parametrize(
        "template",
        [
            "tickwork schedules pause|resume PROJECT WORKFLOW",
            "tickwork secrets set | list | delete",
            "tickwork schedules skip --count N | --to TIME",
            "tickwork schedules [--json]",
            "tickwork retry ID --all | --resume | --from +TASK",
        ],
    )
    def test_a_template_of_commands_and_options_tickwork_has_passes(
        self, tmp_path: Path, template: str
    ) -> None:
        (command,) = _page(tmp_path, f"See `{template}`.\n")
        assert command_problems(main, command) == []

    @pytest.mark.parametrize(
        ("template", "problem"),
        [
            ("tickwork push DIRECTORY PROJECT", "takes 1 argument(s), given 2"),
            ("tickwork retry ID --goal +t", "has no option --goal"),
            ("tickwork schedules pause|halt P W", "has no command 'halt'"),
        ],
    )
    def test_a_template_naming_what_tickwork_lacks_is_reported(
        self, tmp_path: Path, template: str, problem: str
    ) -> None:
        (command,) = _page(tmp_path, f"See `{template}`.\n")
        assert any(problem in found for found in command_problems(main, command))


def test_attempt_ids_a_page_shows_are_replaced_by_those_a_run_got_but_option_values_stay() -> None:
    ids = AttemptIds()
    ids.learn("attempt 4 retries attempt 2 (from)\n", "attempt 9 retries attempt 7 (from)\n")
    assert ids.translate(("log", "2", "-f")) == ("log", "7", "-f")
    assert ids.translate(("sessions", "--limit", "4")) == ("sessions", "--limit", "4")
