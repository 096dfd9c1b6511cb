"""Specification of ``wait>``'s options, checked as Digdag's wait operator checks them.

``blocking`` is true or false; ``poll_interval`` is a duration of at least a second and
only for a non-blocking wait. Literal values are checked when the file is read (naming
file and line); ``${...}`` values when the task runs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tickwork.shared.domain.control import BadControl, wait_seconds
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def problems(project: Path, text: str) -> list[str]:
    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize(
    "options",
    [
        "blocking: true",
        "blocking: false",
        "blocking: 'false'",
        "poll_interval: 5s",
        "poll_interval: '30'",
        "blocking: false\n  poll_interval: 1m",
        "blocking: ${fast}\n  poll_interval: 1m",
    ],
)
def test_good_wait_options_pass_the_check(tmp_path: Path, options: str) -> None:
    text = f"+w:\n  wait>: 10s\n  {options}\n"
    task = parse_workflow_text(text, "wf.dig", tmp_path).root.children[0]
    assert task.operator == "wait"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            "blocking: true\n  poll_interval: 5s",
            "wf.dig:4: 'wait>' poll_interval cannot be set with blocking: true",
        ),
        (
            "blocking: sometimes",
            "wf.dig:3: 'wait>' blocking must be true or false, got 'sometimes'",
        ),
        ("blocking: 1", "wf.dig:3: 'wait>' blocking must be true or false, got 1"),
        ("poll_interval: 0s", "wf.dig:3: 'wait>' poll_interval must be at least 1s, got '0s'"),
        (
            "poll_interval: often",
            "wf.dig:3: 'wait>' poll_interval expected a duration such as 30s, 10m or 1h30m,"
            " got 'often'",
        ),
    ],
)
def test_bad_wait_options_are_refused_at_their_line(
    tmp_path: Path, options: str, message: str
) -> None:
    assert problems(tmp_path, f"+w:\n  wait>: 10s\n  {options}\n") == [message]


@pytest.mark.parametrize(
    ("command", "params", "seconds"),
    [
        ("10s", {}, 10),
        ("10s", {"blocking": "true"}, 10),
        ("10s", {"poll_interval": "4s"}, 12),
        ("8s", {"blocking": False, "poll_interval": "4"}, 8),
        ("0s", {"poll_interval": "3s"}, 3),
    ],
)
def test_a_non_blocking_wait_ends_at_the_first_poll_after_its_duration(
    command: str, params: dict[str, Any], seconds: int
) -> None:
    assert wait_seconds(command, params) == seconds


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"blocking": "yes"}, "'wait>' blocking must be true or false, got 'yes'"),
        (
            {"blocking": "true", "poll_interval": "5s"},
            "'wait>' poll_interval cannot be set with blocking: true",
        ),
        ({"poll_interval": "-5"}, "'wait>' poll_interval expected a duration"),
    ],
)
def test_rendered_wait_options_are_checked_the_same_way(
    params: dict[str, Any], message: str
) -> None:
    with pytest.raises(BadControl, match=message.replace("(", r"\(")):
        wait_seconds("10s", params)
