"""``tickwork pools set|delete`` check their arguments before the API is asked: a bad name
or slots out of range (a negative number too) end the command with exit status 2 and one
usage line naming the argument, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.servers import find_free_port
from tickwork.services.cli.errors import ExitCode
from tickwork.services.compose.commands import main
from tickwork.shared.domain.pools import MAX_SLOTS


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """An endpoint where nothing listens: a command that asks the API fails with exit 5."""
    return {
        "TICKWORK_ENDPOINT": f"http://127.0.0.1:{find_free_port()}",
        "TICKWORK_CONFIG": str(tmp_path / "no-client.toml"),
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["set", "reports", "-1"], "Invalid value for 'SLOTS': -1 is not in the range"),
        (["set", "reports", str(MAX_SLOTS + 1)], "Invalid value for 'SLOTS'"),
        (["set", "reports", "many"], "Invalid value for 'SLOTS': 'many' is not a valid integer"),
        (["set", "bad name", "2"], "Invalid value for 'NAME': 'bad name' is not a pool name"),
        (["set", "--", "-reports", "2"], "Invalid value for 'NAME': '-reports' is not a pool"),
        (["delete", "r" * 65], "Invalid value for 'NAME'"),
        (["set", "reports"], "Missing argument 'SLOTS'"),
    ],
)
def test_a_bad_argument_is_a_usage_error_naming_it(
    environ: dict[str, str], args: list[str], words: str
) -> None:
    result = CliRunner().invoke(main, ["pools", *args], env=environ)

    assert result.exit_code == ExitCode.INVALID, result.output
    assert words in result.output
    assert "Traceback" not in result.output and "cannot reach" not in result.output


def test_good_arguments_go_on_to_ask_the_api(environ: dict[str, str]) -> None:
    for args in (["set", "reports.db-1", "0"], ["delete", "reports"], []):
        result = CliRunner().invoke(main, ["pools", *args], env=environ)
        assert result.exit_code == ExitCode.UNAVAILABLE, result.output
        assert "cannot reach the tickwork API" in result.output


def test_the_pools_commands_take_no_database_url(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["pools", "--database-url", f"sqlite:///{tmp_path}/x.db"])
    assert result.exit_code == ExitCode.INVALID, result.output
    assert "--database-url is gone from `tickwork pools`" in result.output
