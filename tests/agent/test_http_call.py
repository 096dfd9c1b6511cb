"""``http_call>``'s pure parts: reading the answer's Content-Type and JSON body, and the
checks its task gets when the workflow calling it is parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwork.services.agent.operators.base import OperatorFailed
from tickwork.services.agent.operators.http_call import json_for_parser, media_type
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow

URL = "http://127.0.0.1:1/wf"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", "application/json"),
        ("application/json; charset=utf-8", "application/json"),
        ("Application/X-YAML", "application/x-yaml"),
        ("text/yaml", "text/yaml"),
    ],
)
def test_json_and_yaml_content_types_are_read_without_their_parameters(
    content_type: str, expected: str
) -> None:
    assert media_type(content_type, URL) == expected


@pytest.mark.parametrize(
    ("content_type", "words"),
    [("", "no Content-Type (set content_type_override)"), ("text/html", "'text/html'")],
)
def test_a_missing_or_other_content_type_is_refused_naming_the_url(
    content_type: str, words: str
) -> None:
    with pytest.raises(OperatorFailed) as caught:
        media_type(content_type, URL)
    assert URL in str(caught.value) and words in str(caught.value)


def test_json_indented_with_tabs_parses_as_a_workflow_with_its_lines_kept(
    tmp_path: Path,
) -> None:
    text = json_for_parser('{\n\t"+a": {"echo>": "tab\\there"},\n\t"+b": {"shh>": "x"}\n}', URL)

    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_text(text, "http_call.dig", tmp_path)

    assert [(p.line, p.message) for p in caught.value.problems] == [
        (3, "unknown operator 'shh>' (did you mean 'sh>'?)")
    ]


def test_a_body_that_is_not_json_is_refused_naming_the_url() -> None:
    with pytest.raises(OperatorFailed) as caught:
        json_for_parser("+a:\n  echo>: yaml\n", URL)
    assert str(caught.value).startswith(f"http_call> {URL} gave invalid JSON: ")


def test_secrets_may_stand_in_http_call_url_headers_query_and_content_only(
    tmp_path: Path,
) -> None:
    text = (
        "+fetch:\n"
        "  http_call>: https://example.com/wf?key=${secret:token}\n"
        "  headers:\n"
        "    Authorization: ${secret:token}\n"
        "  content: ${secret:token}\n"
        "  method: ${secret:token}\n"
    )
    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_text(text, "wf.dig", tmp_path)
    assert [p.line for p in caught.value.problems] == [6]
