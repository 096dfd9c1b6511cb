"""docs/digdag-compatibility.md says what the code does: each operator row against the
operator registry (an operator called supported is registered, one called not supported is
refused at check time, and a row names every option the registry declares for it), and
each CLI row against the commands' own options (every ``--option`` a row names is one that
``tickwork COMMAND --help`` lists, and one it calls not supported is not)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from tickwork.services.compose.commands import main
from tickwork.shared.domain.operators import REGISTRY, UNSUPPORTED

DOC = Path(__file__).resolve().parents[1] / "docs" / "digdag-compatibility.md"
SUPPORTED = ("same", "better")
NESTED_OPTIONS = {"http", "mail", "pg"}
"""Options that are a nested mapping of the operator's other options (Digdag's form)."""
OPTIONS_SHARED_WITH = {"http_call": "http"}
"""Operators whose row defers to another's options ("the options of ``http>``")."""


@dataclass(frozen=True)
class Row:
    section: str
    cells: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.cells[0]

    @property
    def status(self) -> str:
        return self.cells[1]

    @property
    def note(self) -> str:
        return self.cells[2] if len(self.cells) > 2 else ""


def rows(*sections: str) -> list[Row]:
    """The table rows of the named ``##`` sections, header and rule left out."""
    found: list[Row] = []
    section = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if section not in sections or not line.startswith("|") or line.startswith("|---"):
            continue
        cells = tuple(c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        if cells[1] in ("status", "outcome"):
            continue  # the header
        found.append(Row(section, cells))
    assert found, f"no rows under {sections}"
    return found


def operators_named(cell: str) -> list[str]:
    return re.findall(r"`([a-z0-9_]+)>`", cell)


def names_operators_only(row: Row) -> bool:
    """Whether the row's first cell is a list of operators (not a feature of one)."""
    return re.fullmatch(r"`[a-z0-9_]+>`(?:\s*(?:,|/)\s*`[a-z0-9_]+>`)*", row.name) is not None


OPERATOR_ROWS = rows("Core operators", "Cloud and vendor operators")


@pytest.mark.parametrize(
    "row", [row for row in OPERATOR_ROWS if names_operators_only(row)], ids=lambda row: row.name
)
def test_an_operator_row_s_status_is_what_the_registry_does(row: Row) -> None:
    for name in operators_named(row.name):
        if row.status in SUPPORTED:
            assert name in REGISTRY, f"{name}> is called {row.status} but is not registered"
        else:
            assert name in UNSUPPORTED, f"{name}> is not supported but check does not refuse it"


def test_every_refused_operator_has_a_row_saying_so() -> None:
    listed = {
        name
        for row in OPERATOR_ROWS
        if row.status not in SUPPORTED and names_operators_only(row)
        for name in operators_named(row.name)
    }
    assert sorted(set(UNSUPPORTED) - listed) == []


def rows_about(name: str) -> str:
    """What the rows whose first cell starts with ``name>`` say (``py>`` and ``py>``
    ``python:`` option)."""
    return " ".join(
        f"{row.name} {row.note}" for row in OPERATOR_ROWS if row.name.startswith(f"`{name}>`")
    )


@pytest.mark.parametrize(
    "row",
    [row for row in OPERATOR_ROWS if row.status in SUPPORTED and names_operators_only(row)],
    ids=lambda row: row.name,
)
def test_an_operator_row_names_every_option_the_registry_declares(row: Row) -> None:
    for name in operators_named(row.name):
        told = rows_about(name) + " " + rows_about(OPTIONS_SHARED_WITH.get(name, name))
        missing = [
            option
            for option in REGISTRY[name].options
            if option not in NESTED_OPTIONS and not re.search(rf"`{option}[`:]", told)
        ]
        assert missing == [], f"{row.name}'s rows do not name {missing}"


def test_options_an_operator_row_calls_unsupported_are_not_declared() -> None:
    """An option a row calls not supported is not one the registry declares; a dotted
    name (``proxy.tls``) is a value of a declared option that is refused when it runs."""
    checked = []
    for row in OPERATOR_ROWS:
        names = operators_named(row.name)
        if len(names) != 1 or "Not supported:" not in row.note:
            continue
        tokens = re.findall(r"`([a-z_][a-z_.]*)", row.note.split("Not supported:", 1)[1])
        for token in tokens:
            option, dot, _ = token.partition(".")
            declared = option in REGISTRY[names[0]].options
            assert declared == bool(dot), (row.name, token)
            checked.append(token)
    assert checked, "no operator row names an option it does not support"


# --- CLI -------------------------------------------------------------------------------


def command(path: str) -> click.Command | None:
    """``tickwork PATH`` (``schedules skip``), or None when there is no such command."""
    current: click.Command = main
    context = click.Context(main)
    for word in path.split():
        if not isinstance(current, click.Group):
            return None
        found = current.get_command(context, word)
        if found is None:
            return None
        current = found
    return current


def option_names(found: click.Command) -> set[str]:
    return {name for param in found.params for name in (*param.opts, *param.secondary_opts)}


def commands_of(row: Row) -> list[click.Command]:
    """The tickwork commands a CLI row speaks of: each ``tickwork X [Y]`` in it, and the
    Digdag names of its first cell that tickwork has under the same name."""
    found: list[click.Command] = [main] if "tickwork --" in row.note else []
    for match in re.finditer(r"tickwork ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", row.note):
        words = match.group(1)
        resolved = command(words) or command(words.split()[0])
        assert resolved is not None, f"{row.name}: no command `tickwork {words}`"
        found.append(resolved)
    for name in re.findall(r"`([a-z][a-z-]*)", row.name):
        resolved = command(name)
        if resolved is not None:
            found.append(resolved)
    return found


CLI_ROWS = rows("CLI")
TICKWORK_ONLY_COMMANDS = frozenset(
    {
        "dev",
        "db",
        "api",
        "executor",
        "agent",
        "tokens",
        "audit",
        "whoami",
        "notifications",
        "triggers",
        "pools",
    }
)
"""Commands Digdag has no counterpart of (servers, access, notifications, pools)."""


@pytest.mark.parametrize("row", CLI_ROWS, ids=lambda row: row.name)
def test_a_cli_row_names_commands_and_options_that_exist(row: Row) -> None:
    commands = commands_of(row)
    supported, _, unsupported = row.note.partition("Not supported:")
    if row.status in SUPPORTED:
        assert commands, f"{row.name}: names no tickwork command"
    offered = set().union(*(option_names(c) for c in commands)) if commands else set()
    for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", supported):
        assert option in offered, f"{row.name}: {option} is not an option of its commands"
    for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-[a-zA-Z])\b", unsupported):
        assert option not in offered, f"{row.name}: {option} is called not supported"


def test_every_command_digdag_names_alike_is_in_a_row() -> None:
    named = " ".join(row.name + " " + row.note for row in CLI_ROWS)
    context = click.Context(main)
    assert isinstance(main, click.Group)
    missing = [
        name
        for name in main.list_commands(context)
        if name not in TICKWORK_ONLY_COMMANDS
        and not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", named)
    ]
    assert missing == []
