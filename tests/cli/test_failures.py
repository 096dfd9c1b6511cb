"""How the client shows why an attempt failed, from the API's JSON (services/cli/failures.py)."""

from __future__ import annotations

from tickwork.services.cli.failures import failure_lines
from tickwork.shared.log_tail import last_lines


class TestFailureLines:
    def test_a_failure_is_its_name_and_message_then_its_log_lines(self) -> None:
        lines = failure_lines("+wf+load", "exit 3", ["a", "b"])
        assert lines == ["failed +wf+load: exit 3", "  | a", "  | b"]

    def test_a_failure_without_a_log_is_one_line(self) -> None:
        assert failure_lines("+wf+load", "exit 3", []) == ["failed +wf+load: exit 3"]

    def test_further_lines_of_a_message_are_indented_before_the_log(self) -> None:
        lines = failure_lines("+wf+py", "Traceback:\nValueError: x", ["log"])
        assert lines == ["failed +wf+py: Traceback:", "  ValueError: x", "  | log"]


class TestLastLines:
    def test_at_most_the_last_ten_lines_are_kept_without_trailing_blank_lines(self) -> None:
        data = "".join(f"line {i}\n" for i in range(20)).encode() + b"\n\n"
        assert last_lines(data, cut=False) == [f"line {i}" for i in range(10, 20)]

    def test_a_tail_read_from_inside_a_line_leaves_that_line_out(self) -> None:
        assert last_lines(b"ne 1\nline 2\n", cut=True) == ["line 2"]

    def test_the_end_of_one_long_line_is_kept(self) -> None:
        assert last_lines(b"...the end of a long line\n", cut=True) == ["...the end of a long line"]

    def test_bytes_that_are_not_utf8_are_replaced(self) -> None:
        assert last_lines(b"bad \xff byte\n", cut=False) == ["bad \ufffd byte"]
