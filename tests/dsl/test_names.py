"""Names and text a workflow project may hold: every name check matches the whole name
(a trailing newline is not a name character), a workflow file's name must be text that can
be shown, and no string in a workflow file holds NUL or a lone surrogate, nor any number
one the store cannot hold (.nan, .inf, integers past 64 bits)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tickwork.shared.domain.workflow import QUEUE_NAME
from tickwork.shared.dsl.names import shown, workflow_name_problem
from tickwork.shared.dsl.parser import ENV_NAME, PY_TARGET, load_project, parse_workflow_text
from tickwork.shared.errors import InvalidInput, InvalidWorkflow
from tickwork.shared.secrets import SECRET_NAME, check_secret_name
from tickwork.shared.store.projects import PROJECT_NAME, check_project_name

NAME_PATTERNS = {
    "project": (PROJECT_NAME, "demo"),
    "secret": (SECRET_NAME, "db.password"),
    "queue": (QUEUE_NAME, "gpu"),
    "env": (ENV_NAME, "HOME"),
    "py target": (PY_TARGET, "tasks.module.run"),
}


class TestWholeNameMatches:
    @pytest.mark.parametrize("kind", sorted(NAME_PATTERNS))
    def test_a_trailing_newline_is_not_part_of_a_name(self, kind: str) -> None:
        pattern, valid = NAME_PATTERNS[kind]
        assert pattern.fullmatch(valid)
        for tail in ("\n", "\r\n", " "):
            # whichever way a caller matches, the name with a tail is refused
            assert pattern.match(valid + tail) is None
            assert pattern.fullmatch(valid + tail) is None

    @pytest.mark.parametrize("check", [check_project_name, check_secret_name])
    def test_a_name_ending_in_a_newline_is_refused(self, check: Callable[[str], None]) -> None:
        with pytest.raises(InvalidInput):
            check("demo\n")

    def test_no_validation_pattern_in_the_code_anchors_with_a_dollar(self) -> None:
        # `$` also matches before a final newline: anchors are \\A and \\Z (or fullmatch).
        root = Path(__file__).resolve().parents[2]
        anchored = re.compile(r"""re\.compile\(\s*r?["']{1,3}\^""")
        found = [
            f"{path.relative_to(root)}"
            for folder in ("shared", "services")
            for path in sorted((root / folder).rglob("*.py"))
            if anchored.search(path.read_text(encoding="utf-8"))
        ]
        assert found == []


class TestWorkflowFileNames:
    @pytest.mark.parametrize(
        ("name", "reason"),
        [
            ("a+b", "'+'"),
            ("a^b", "'^'"),
            ("a\x01b", "control character"),
            ("a\nb", "control character"),
            ("a\x7fb", "control character"),
            ("a\udcffb", "invalid UTF-8"),
            ("x" * 256, "1-255 characters"),
            ("a\u202eb", "format character (\\u202e)"),  # bidi override: reorders what follows
            ("a\u200b", "format character (\\u200b)"),  # zero width space
            ("a\ufeff", "format character (\\ufeff)"),  # byte order mark
            ("a\u2028b", "line separator (\\u2028)"),
            (" ", "whitespace"),
            ("\u3000", "whitespace"),  # ideographic space alone
            ("a ", "whitespace"),
            (" a", "whitespace"),
            ("a\u00a0", "whitespace"),
        ],
    )
    def test_a_name_that_cannot_be_shown_or_joined_is_refused(self, name: str, reason: str) -> None:
        problem = workflow_name_problem(name)
        assert problem is not None and reason in problem

    @pytest.mark.parametrize("name", ["daily", "load-v2.1", "nightly_report", "毎日", "a b", "x"])
    def test_ordinary_names_are_accepted(self, name: str) -> None:
        assert workflow_name_problem(name) is None

    def test_a_refused_name_is_shown_with_one_escape_in_the_problem(self, tmp_path: Path) -> None:
        (tmp_path / "a\u2028.dig").write_text("+t:\n  echo>: hi\n", encoding="utf-8")
        with pytest.raises(InvalidWorkflow) as caught:
            load_project(tmp_path)
        [problem] = caught.value.problems
        assert problem.message.endswith(": 'a\\u2028'")
        assert "\\\\" not in problem.message

    def test_a_bad_name_is_shown_safely(self) -> None:
        assert shown("a\udcff\x01b") == "a\ufffd\\x01b"

    def test_a_project_file_with_a_bad_name_is_refused_naming_it(self, tmp_path: Path) -> None:
        (tmp_path / "a+b.dig").write_text("+t:\n  echo>: hi\n", encoding="utf-8")
        (tmp_path / "good.dig").write_text("+t:\n  echo>: hi\n", encoding="utf-8")
        with pytest.raises(InvalidWorkflow) as caught:
            load_project(tmp_path)
        assert [str(p) for p in caught.value.problems] == [
            "a+b.dig: a workflow name cannot contain '+': 'a+b'"
        ]


class TestTextInWorkflowFiles:
    @pytest.mark.parametrize(
        "value", [r'"a\0b"', r'"a\x00b"', r'"a\u0000b"', r'"a\ud800b"', r'"a\udcffb"']
    )
    def test_a_string_holding_nul_or_a_lone_surrogate_is_refused_with_its_line(
        self, tmp_path: Path, value: str
    ) -> None:
        text = f"timezone: UTC\n+t:\n  echo>: {value}\n"
        with pytest.raises(InvalidWorkflow) as caught:
            parse_workflow_text(text, "wf.dig", tmp_path)
        [problem] = caught.value.problems
        assert (problem.file, problem.line) == ("wf.dig", 3)
        assert "must not contain" in problem.message

    def test_a_key_holding_nul_is_refused_too(self, tmp_path: Path) -> None:
        text = 'timezone: UTC\n+t:\n  echo>: hi\n  _export:\n    "a\\0": 1\n'
        with pytest.raises(InvalidWorkflow) as caught:
            parse_workflow_text(text, "wf.dig", tmp_path)
        assert [(p.line, "NUL" in p.message) for p in caught.value.problems] == [(5, True)]

    @pytest.mark.parametrize(
        "number", [".nan", ".NaN", ".inf", "-.Inf", "1.0e+400", "9223372036854775808", "9" * 300]
    )
    def test_a_number_the_store_cannot_hold_is_refused_with_its_line(
        self, tmp_path: Path, number: str
    ) -> None:
        text = f"timezone: UTC\n_export:\n  x: {number}\n+t:\n  echo>: hi\n"
        with pytest.raises(InvalidWorkflow) as caught:
            parse_workflow_text(text, "wf.dig", tmp_path)
        assert [(p.line, "cannot be stored" in p.message) for p in caught.value.problems] == [
            (3, True)
        ]

    def test_numbers_in_range_are_kept(self, tmp_path: Path) -> None:
        text = (
            "timezone: UTC\n_export:\n  a: 9223372036854775807\n  b: 1.5e+300\n+t:\n  echo>: hi\n"
        )
        definition = parse_workflow_text(text, "wf.dig", tmp_path)
        assert definition.root.export == {"a": 9223372036854775807, "b": 1.5e300}
