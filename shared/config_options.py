"""Command-line options derived from declared settings (shared/config.py), so that a
flag's name, type, bounds, default and help are never written a second time.

A server's options (:func:`setting_options`) default to ``None``: a flag the user did
not give is not passed on, so the settings' own reading (its variable, else its declared
default) and its one parser decide, as on every other path. A bad flag is click's usage
error naming the flag."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from tickwork.shared.config import Setting
from tickwork.shared.errors import InvalidConfig

F = TypeVar("F", bound=Callable[..., Any])


class SettingType(click.ParamType[Any]):
    """A flag's text read by its setting's declared parser."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        self.name = setting.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.setting.parse_text(value)
        except InvalidConfig as exc:
            # The parser names the variable; click names the flag instead.
            self.fail(str(exc).removeprefix(f"{self.setting.name}: "), param, ctx)


def setting_option(setting: Setting) -> Callable[[F], F]:
    """The option ``setting.flag``, passed to the command as ``setting.key``."""
    shown = setting.shown_default or setting.default
    default = f"  [default: {shown}]" if shown else ""
    return click.option(
        setting.flag,
        setting.key,
        type=SettingType(setting),
        default=None,
        help=f"{setting.help or _sentence(setting.doc)} (env {setting.name}).{default}",
    )


def passed_on_option(setting: Setting) -> Callable[[F], F]:
    """The option ``setting.flag`` of a command that passes the value on to the processes
    it starts (``tickwork dev``): click reads the variable, else the declared default, and
    the declared parser checks it before any process starts."""
    return click.option(
        setting.flag,
        setting.key,
        envvar=setting.name,
        type=SettingType(setting),
        default=setting.default,
        show_default=True,
        help=f"{setting.help or _sentence(setting.doc)} (env {setting.name}).",
    )


def setting_options(settings: Iterable[Setting]) -> Callable[[F], F]:
    """The options of every setting of ``settings`` that has a flag, in their order."""
    flagged = [setting for setting in settings if setting.flag]

    def decorate(command: F) -> F:
        for setting in reversed(flagged):
            command = setting_option(setting)(command)
        return command

    return decorate


def _sentence(doc: str) -> str:
    return doc[:1].upper() + doc[1:]
