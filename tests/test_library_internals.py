"""Specifications that the library internals tickwork relies on are still there, in the
shape each relying module was written against.

Where a library offers no public way to do what tickwork needs, one module of ours holds
the reliance, names the internals in its docstring and lists the versions it was checked
against (pinned in constraints.txt). When a library changes under it, these fail with a
message naming that module, so the module is read again before the new version is taken.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest


def parameters(function: Callable[..., Any]) -> list[str]:
    """The names of ``function``'s parameters, ``self`` and ``cls`` included."""
    return list(inspect.signature(inspect.unwrap(function)).parameters)


def changed(module: str, distribution: str, what: str) -> str:
    """The failure message: which module of ours to read again, and why."""
    return (
        f"{module} relies on {distribution} internals that changed in the installed "
        f"{distribution} {version(distribution)}: {what}. Read {module} again against this "
        "version, then update the versions it lists and constraints.txt."
    )


def require_version(module: str, distribution: str, checked: tuple[str, ...]) -> None:
    installed = version(distribution)
    if installed not in checked:
        pytest.fail(
            f"{module} was checked against {distribution} {', '.join(checked)}, "
            f"but {installed} is installed: read it again against {installed}, then add "
            "the version to its list and to constraints.txt."
        )


class TestKombu:
    MODULE = "shared/dispatch/kept_client.py"

    def test_the_installed_kombu_is_one_the_kept_client_channel_was_checked_against(
        self,
    ) -> None:
        from shared.dispatch.kept_client import CHECKED_KOMBU_VERSIONS

        require_version(self.MODULE, "kombu", CHECKED_KOMBU_VERSIONS)

    def test_the_redis_channel_still_has_the_methods_the_kept_client_channel_overrides(
        self,
    ) -> None:
        from kombu.transport import redis as kombu_redis

        channel = kombu_redis.Channel
        expected = {
            "conn_or_acquire": ["self", "client"],
            "_create_client": ["self", "asynchronous"],
            "_disconnect_pools": ["self"],
        }
        for name, names in expected.items():
            method = getattr(channel, name, None)
            assert method is not None, changed(self.MODULE, "kombu", f"Channel.{name} is gone")
            assert parameters(method) == names, changed(
                self.MODULE,
                "kombu",
                f"Channel.{name} takes {parameters(method)}, not {names}",
            )

    def test_kombu_still_sends_its_commands_through_conn_or_acquire(self) -> None:
        from kombu.transport import redis as kombu_redis

        source = inspect.getsource(kombu_redis)
        uses = source.count("conn_or_acquire(")
        assert uses >= 10, changed(
            self.MODULE,
            "kombu",
            f"the Redis transport calls conn_or_acquire only {uses} times",
        )
