"""A click group whose subcommands are imported only when one is invoked or its help shown.

Each entry names a command as ``"module:attribute"`` with its short help, so that
``tickwork --help`` lists every command without importing any of them (click's
documented LazyGroup pattern, with the short help kept beside the import path).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (``"module:attribute"``) and the first paragraph of its help
    (tests/test_cli_imports.py checks that the two agree)."""

    import_path: str
    short_help: str


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when that subcommand is needed."""

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, LazyCommand] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands:
            return self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help``, from the short helps: nothing is imported."""
        rows: list[tuple[str, str]] = []
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        for name in self.list_commands(ctx):
            lazy = self.lazy_commands.get(name)
            if lazy is not None:
                rows.append((name, _shorten(lazy.short_help, limit)))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def _load(self, cmd_name: str) -> click.Command:
        module_name, _, attribute = self.lazy_commands[cmd_name].import_path.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        return command


def _shorten(text: str, limit: int) -> str:
    """``text`` cut as click cuts a command's help to its short help: at a word, with ``...``."""
    return click.Command(None, help=text).get_short_help_str(limit)


def lazy_commands(entries: Sequence[tuple[str, str, str]]) -> dict[str, LazyCommand]:
    """``{name: LazyCommand}`` from ``(name, "module:attribute", short help)`` rows."""
    return {name: LazyCommand(path, short_help) for name, path, short_help in entries}
