"""Specification of the limits on one workflow file: its size and how many values it holds,
for a local file, an included one, and `tickwork check`."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e._run import tickwork_command
from tests.support.files import write_under
from tickwork.shared.dsl.parser import parse_workflow_file
from tickwork.shared.errors import InvalidWorkflow

STEP = "+step:\n  echo>: hi\n"
MAX_FILE_BYTES = 1024 * 1024
MAX_FILE_NODES = 100_000


def long_list(items: int) -> str:
    """A workflow whose ``_export`` holds a flow list of ``items`` numbers, on line 2."""
    return f"_export:\n  numbers: [{','.join(['1'] * items)}]\n{STEP}"


def problems(path: Path, project: Path) -> str:
    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_file(path, project)
    return str(caught.value)


class TestFileLimits:
    def test_a_workflow_file_over_1_mib_is_refused_before_it_is_parsed(
        self, tmp_path: Path
    ) -> None:
        # Given a 1.2 MB file holding a 600,000-item list
        path = write_under(tmp_path, "big.dig", long_list(600_000))
        assert path.stat().st_size > MAX_FILE_BYTES
        # When it is parsed
        started = time.process_time()
        message = problems(path, tmp_path)
        # Then it is refused at once, naming the file and the limit
        assert time.process_time() - started < 0.5
        assert message == (
            f"big.dig: the file is {path.stat().st_size} bytes,"
            f" over the limit of {MAX_FILE_BYTES} for a workflow file"
        )

    def test_an_included_file_over_1_mib_is_refused_at_its_include(self, tmp_path: Path) -> None:
        write_under(tmp_path, "lib/big.dig", long_list(600_000))
        path = write_under(tmp_path, "wf.dig", "_export:\n  !include : 'lib/big.dig'\n" + STEP)

        message = problems(path, tmp_path)

        assert "wf.dig:2: '!include' file lib/big.dig is " in message
        assert f"over the limit of {MAX_FILE_BYTES} for a workflow file" in message

    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_a_file_of_more_than_100000_values_is_refused_at_the_line_it_passes_them(
        self, tmp_path: Path
    ) -> None:
        # Given a file under 1 MiB holding 120,007 values: 7 before line 4, then 4 a line
        lines = [f"  v{i}: [1, 2]" for i in range(30_000)]
        path = write_under(tmp_path, "wide.dig", STEP + "_export:\n" + "\n".join(lines) + "\n")
        assert path.stat().st_size < MAX_FILE_BYTES
        # When it is parsed, then it is refused naming the line of the first value too many
        message = problems(path, tmp_path)
        assert message == (
            f"wide.dig:{4 + (MAX_FILE_NODES + 1 - 8) // 4}: invalid YAML:"
            f" the file holds more than {MAX_FILE_NODES} values"
        )

    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_a_file_just_under_both_limits_is_parsed(self, tmp_path: Path) -> None:
        path = write_under(tmp_path, "wf.dig", long_list(MAX_FILE_NODES - 10))
        assert parse_workflow_file(path, tmp_path).name == "wf"

    def test_tickwork_check_of_a_file_over_the_limit_says_so_in_one_line(
        self, tmp_path: Path
    ) -> None:
        path = write_under(tmp_path, "big.dig", long_list(600_000))
        checked = subprocess.run(
            [*tickwork_command(), "check", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

        assert checked.returncode != 0
        assert f"over the limit of {MAX_FILE_BYTES} for a workflow file" in checked.stderr
        assert "Traceback" not in checked.stderr
