"""The admin commands (kill, schedules, backfill, secrets) have one back end, the API:
``--database-url``, which once made them work on the store, ends them saying what to use
instead, and ``TICKWORK_DATABASE_URL`` (the servers' store) is not read."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.servers import find_free_port
from tickwork.services.cli.errors import ExitCode
from tickwork.services.compose.commands import main

ADMIN_COMMANDS = [
    ["kill", "5"],
    ["schedules"],
    ["schedules", "list"],
    ["schedules", "pause", "proj", "etl"],
    ["schedules", "resume", "proj", "etl"],
    ["schedules", "skip", "proj", "etl", "--count", "1"],
    ["schedules", "missed", "proj", "etl"],
    ["backfill", "proj", "etl", "--from", "2026-01-01", "--to", "2026-01-02"],
    ["secrets", "set", "proj", "token", "--value", "v"],
    ["secrets", "list", "proj"],
    ["secrets", "delete", "proj", "token"],
]


def command_name(args: list[str]) -> str:
    """``tickwork`` and the command's words (its arguments left out)."""
    if args[0] in ("schedules", "secrets") and len(args) > 1:
        return f"tickwork {args[0]} {args[1]}"
    return f"tickwork {args[0]}"


IDS = [command_name(args).removeprefix("tickwork ").replace(" ", "-") for args in ADMIN_COMMANDS]


@pytest.mark.parametrize("args", ADMIN_COMMANDS, ids=IDS)
def test_database_url_ends_the_command_naming_the_api_to_use_instead(
    args: list[str], tmp_path: Path
) -> None:
    store = tmp_path / "tickwork.db"

    result = CliRunner().invoke(main, [*args, "--database-url", f"sqlite:///{store}"])

    assert result.exit_code == ExitCode.INVALID, result.output
    assert f"--database-url is gone from `{command_name(args)}`" in result.output
    assert "--endpoint/TICKWORK_ENDPOINT" in result.output
    assert "`tickwork api`" in result.output and "`tickwork standalone`" in result.output
    assert "No such option" not in result.output
    assert not store.exists()


@pytest.mark.parametrize("args", ADMIN_COMMANDS, ids=IDS)
def test_the_help_no_longer_offers_database_url(args: list[str]) -> None:
    words = command_name(args).split()[1:]

    result = CliRunner().invoke(main, [*words, "--help"])

    assert result.exit_code == 0, result.output
    assert "--database-url is gone" in result.output  # the epilog says so
    assert "--database-url TEXT" not in result.output
    assert "TICKWORK_DATABASE_URL)" not in result.output


@pytest.mark.parametrize("args", ADMIN_COMMANDS, ids=IDS)
def test_the_servers_database_variable_is_not_read_the_api_is_asked(
    args: list[str], tmp_path: Path
) -> None:
    store = tmp_path / "tickwork.db"
    nobody = f"http://127.0.0.1:{find_free_port()}"
    environ = {
        "TICKWORK_DATABASE_URL": f"sqlite:///{store}",
        "TICKWORK_ENDPOINT": nobody,
        "TICKWORK_CONFIG": str(tmp_path / "no-client.toml"),
    }

    result = CliRunner().invoke(main, args, env=environ)

    assert result.exit_code == ExitCode.UNAVAILABLE, result.output
    assert f"cannot reach the tickwork API at {nobody}" in result.output
    assert not store.exists()
