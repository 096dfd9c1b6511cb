"""How ``sh>`` runs its command: ``/bin/sh -c`` unless ``shell:`` names another program."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tickwork.services.agent.operators.base import OperatorFailed
from tickwork.services.agent.operators.sh import shell_argv


def test_without_a_shell_option_the_command_runs_with_sh_c(tmp_path: Path) -> None:
    assert shell_argv({}, "echo hi", tmp_path) == ["/bin/sh", "-c", "echo hi"]


def test_a_shell_ending_in_dash_c_gets_the_command_as_its_last_argument(tmp_path: Path) -> None:
    argv = shell_argv({"shell": ["/bin/zsh", "-c"]}, "echo hi", tmp_path)

    assert argv == ["/bin/zsh", "-c", "echo hi"]


def test_any_other_shell_gets_a_script_file_holding_the_command(tmp_path: Path) -> None:
    argv = shell_argv({"shell": ["bash"]}, "echo hi", tmp_path)

    assert argv[0] == "bash"
    assert Path(argv[1]).read_text() == "echo hi"


def test_a_shell_exported_under_sh_applies(tmp_path: Path) -> None:
    argv = shell_argv({"sh": {"shell": ["bash", "-c"]}}, "echo hi", tmp_path)

    assert argv == ["bash", "-c", "echo hi"]


@pytest.mark.parametrize("shell", ["bash", [], ["bash", 1]])
def test_an_exported_shell_that_is_not_a_list_of_strings_fails_the_task(
    tmp_path: Path, shell: Any
) -> None:
    with pytest.raises(OperatorFailed, match="shell must be a non-empty list of strings"):
        shell_argv({"shell": shell}, "echo hi", tmp_path)
