"""param_set> and param_get> options, checked when a workflow is parsed (push and check):
keys as Digdag's param server takes them, string-like values, param names to store into."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def parse(project: Path, text: str) -> list[str]:
    """The problems found in ``text`` (none if it parses)."""
    try:
        parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    except InvalidWorkflow as invalid:
        return [str(problem) for problem in invalid.problems]
    return []


def test_keys_with_string_number_boolean_and_expression_values_are_accepted(
    tmp_path: Path,
) -> None:
    text = """\
        +set:
          param_set>:
          last_id: 42
          ratio: 0.5
          full: true
          day: ${session_date}
          "key with spaces.and-dots": x
          skipped: null
        +get:
          param_get>:
          last_id: previous_id
          day: ${prefix}_day
        """
    assert parse(tmp_path, text) == []


def test_a_task_without_keys_is_refused(tmp_path: Path) -> None:
    text = "+set:\n  param_set>:\n+get:\n  param_get>:\n  _retry: 2\n"
    assert parse(tmp_path, text) == [
        "wf.dig:2: 'param_set>' in '+set' needs at least one key",
        "wf.dig:4: 'param_get>' in '+get' needs at least one key",
    ]


@pytest.mark.parametrize(
    ("key", "shown"),
    [('" "', "' '"), ('"a\\tb"', "'a\\tb'"), ("k" * 256, repr("k" * 256))],
)
def test_a_blank_long_or_control_character_key_is_refused_with_its_line(
    tmp_path: Path, key: str, shown: str
) -> None:
    text = f"+set:\n  param_set>:\n  ok: 1\n  {key}: v\n"
    assert parse(tmp_path, text) == [
        f"wf.dig:4: 'param_set>' key {shown} must be 1 to 255 characters, not blank, "
        "without control characters"
    ]


def test_a_mapping_or_list_value_is_refused(tmp_path: Path) -> None:
    text = "+set:\n  param_set>:\n  a: {x: 1}\n  b: [1, 2]\n"
    assert parse(tmp_path, text) == [
        "wf.dig:3: 'param_set>' value of 'a' must be a string, got a mapping",
        "wf.dig:4: 'param_set>' value of 'b' must be a string, got a list",
    ]


def test_param_get_needs_a_param_name_for_each_key(tmp_path: Path) -> None:
    text = "+get:\n  param_get>:\n  a: 3\n  b: ''\n"
    assert parse(tmp_path, text) == [
        "wf.dig:3: 'param_get>' needs a param name to store 'a' in, got 3",
        "wf.dig:4: 'param_get>' needs a param name to store 'b' in, got ''",
    ]
