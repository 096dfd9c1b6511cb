"""The server commands' options are their settings' declarations: each flag is a declared
setting's, its help shows the variable and the default, a bad flag is click's usage error
naming the flag, and a flag not given leaves the variable (else the default) to decide."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from tickwork.services.agent.config import AGENT_SETTINGS
from tickwork.services.compose.serve import agent_command, executor_command, scheduler_command
from tickwork.services.executor.config import EXECUTOR_SETTINGS
from tickwork.services.scheduler.config import SCHEDULER_SETTINGS
from tickwork.shared.config import Setting

SERVERS = [
    (scheduler_command, SCHEDULER_SETTINGS),
    (executor_command, EXECUTOR_SETTINGS),
    (agent_command, AGENT_SETTINGS),
]
NOT_A_SETTING_FLAG = {"--database-url", "--help"}  # the store's option, shared with `db`


def option_help(output: str, flag: str) -> str:
    """The help of ``flag`` in a command's ``--help``, its lines joined."""
    words = " ".join(output.split())
    start = words.index(f" {flag} ")
    end = words.find(" --", start + len(flag) + 2)
    return words[start : end if end > 0 else None]


def agent(work_dir: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(agent_command, ["--work-dir", str(work_dir), *args], env=env)


@pytest.mark.parametrize(("command", "settings"), SERVERS, ids=lambda c: getattr(c, "name", ""))
def test_every_flag_of_a_server_is_one_of_its_declared_settings(
    command: click.Command, settings: tuple[Setting, ...]
) -> None:
    flags = {opt for param in command.params for opt in param.opts} - NOT_A_SETTING_FLAG
    assert flags == {setting.flag for setting in settings if setting.flag}


@pytest.mark.parametrize(("command", "settings"), SERVERS, ids=lambda c: getattr(c, "name", ""))
def test_the_help_names_each_flags_variable_and_default(
    command: click.Command, settings: tuple[Setting, ...]
) -> None:
    shown = CliRunner().invoke(command, ["--help"])
    assert shown.exit_code == 0, shown.output
    for setting in settings:
        if setting.flag:
            entry = option_help(shown.output, setting.flag)
            assert f"(env {setting.name})" in entry
            default = setting.shown_default or setting.default
            if default:
                assert f"[default: {default}]" in entry


def test_a_bad_flag_is_a_usage_error_naming_the_flag(tmp_path: Path) -> None:
    done = agent(tmp_path, "--queues", "a b")
    assert done.exit_code == 2
    assert "Invalid value for '--queues': 'a b' is not a queue name" in done.output


def test_a_bad_variable_is_refused_naming_the_variable(tmp_path: Path) -> None:
    done = agent(tmp_path, env={"TICKWORK_REDIS_URL": "localhost:6379"})
    assert done.exit_code == 2
    assert "error: TICKWORK_REDIS_URL: expected a redis://, rediss:// or unix:// URL" in (
        done.output
    )


def test_a_flag_not_given_leaves_its_variable_to_decide(tmp_path: Path) -> None:
    # Given a lease of 5 s from the environment and a heartbeat of 10 s on the command line
    done = agent(tmp_path, "--heartbeat", "10", env={"TICKWORK_LEASE_TTL_SECONDS": "5"})

    # Then the one check of the two, which reads both, refuses them
    assert done.exit_code == 2
    assert "10s must be shorter than TICKWORK_LEASE_TTL_SECONDS (5s)" in done.output


def test_a_flag_given_wins_over_its_variable(tmp_path: Path) -> None:
    env = {"TICKWORK_HEARTBEAT_SECONDS": "60"}
    done = agent(tmp_path, "--heartbeat", "45", "--lease-ttl", "40", env=env)
    assert done.exit_code == 2
    assert "45s must be shorter than TICKWORK_LEASE_TTL_SECONDS (40s)" in done.output


def test_a_work_dir_that_is_a_file_is_refused_naming_the_flag(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("", encoding="utf-8")
    done = agent(a_file)
    assert done.exit_code == 2
    assert "Invalid value for '--work-dir'" in done.output and "not a directory" in done.output
