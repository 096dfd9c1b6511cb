"""The parser checks operator tasks against the operator registry."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tickwork.shared.domain.operators import REGISTRY, UNSUPPORTED, CommandKind
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow

A_GOOD_COMMAND = {
    CommandKind.IGNORED: "",
    CommandKind.TEXT: "hello",
    CommandKind.TEXT_OR_DATA: "body.txt",
    CommandKind.PY_TARGET: "tasks.run",
    CommandKind.DURATION: "10s",
    CommandKind.WORKFLOW_FILE: "other.dig",
    CommandKind.CONTROL_VALUE: "${value}",
}
A_GOOD_OPTION = {"param_set": "  key: value\n", "param_get": "  key: destination\n"}


def problems(project: Path, text: str) -> list[str]:
    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registry_operator_parses_with_a_command_of_its_kind(
    tmp_path: Path, name: str
) -> None:
    (tmp_path / "other.dig").write_text("+a:\n  echo>: hi\n", encoding="utf-8")
    spec = REGISTRY[name]
    body = f"+t:\n  {spec.key}: {A_GOOD_COMMAND[spec.command]}\n"
    body += A_GOOD_OPTION.get(name, "")
    if spec.control is not None:
        body += "  _do:\n    +a:\n      echo>: hi\n"
    task = parse_workflow_text(body, "wf.dig", tmp_path).root.children[0]
    assert task.operator == name


def test_mail_takes_its_body_as_data_in_the_command(tmp_path: Path) -> None:
    text = "+t:\n  mail>:\n    data: Hello ${session_date}\n  subject: s\n  to: a@x.test\n"
    task = parse_workflow_text(text, "wf.dig", tmp_path).root.children[0]
    assert task.command == {"data": "Hello ${session_date}"}
    bad = "+t:\n  mail>:\n    text: Hello\n  subject: s\n"
    assert problems(tmp_path, bad) == [
        "wf.dig:2: 'mail>' needs a file name or {data: TEXT}, got a mapping"
    ]


def test_digdag_s_operators_that_do_not_run_here_are_refused_with_what_to_use(
    tmp_path: Path,
) -> None:
    text = "+a:\n  rb>: Test.task1\n+b:\n  _type: emr\n"
    found = problems(tmp_path, text)
    assert found[0].startswith("wf.dig:2: Digdag's operator 'rb>' is not supported: ")
    assert "sh>: ruby" in found[0]
    assert found[1].startswith("wf.dig:4: Digdag's operator 'emr>' is not supported: ")
    assert not set(UNSUPPORTED) & set(REGISTRY)


def test_a_control_directive_on_an_agent_operator_is_unknown(tmp_path: Path) -> None:
    assert problems(tmp_path, "+t:\n  sh>: ls\n  _do:\n    +a:\n      echo>: hi\n") == [
        "wf.dig:3: unknown directive '_do'"
    ]


def test_secrets_stand_only_in_the_params_the_registry_names(tmp_path: Path) -> None:
    text = """\
        +t:
          http>: https://example.com
          headers:
            Authorization: ${secret:token}
          content: ${secret:token}
          method: ${secret:token}
        """
    assert problems(tmp_path, text) == [
        "wf.dig:6: '${secret:token}': secrets may be used only in sh>, http>, http_call> "
        "commands, _env and http> headers, query, content; http_call> headers, query, content; "
        "mail> host, port, username, password, tls, ssl; "
        "pg> host, port, user, password, database, ssl, schema"
    ]


def test_else_do_is_refused_on_a_loop(tmp_path: Path) -> None:
    text = """\
        +t:
          loop>: 2
          _do:
            +a:
              echo>: hi
          _else_do:
            +b:
              echo>: no
        """
    assert problems(tmp_path, text) == ["wf.dig:6: '_else_do' is only valid on 'if>'"]


def test_parallel_is_refused_on_if(tmp_path: Path) -> None:
    text = """\
        +t:
          if>: true
          _parallel: true
          _do:
            +a:
              echo>: hi
        """
    assert problems(tmp_path, text) == ["wf.dig:3: '_parallel' is not valid on 'if>'"]


def warnings_of(project: Path, text: str) -> list[str]:
    definition = parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    return [str(warning) for warning in definition.warnings]


def test_a_key_no_operator_reads_is_a_warning_naming_the_option_it_may_mean(
    tmp_path: Path,
) -> None:
    text = """\
        +a:
          echo>: hi ${who}
          who: me
          colour: red
        +b:
          http>: https://example.com
          store_contnet: true
        """
    assert warnings_of(tmp_path, text) == [
        "wf.dig:4: 'echo>' does not read 'colour' and no ${...} of the task uses it "
        "(Digdag: parameter not used)",
        "wf.dig:7: 'http>' does not read 'store_contnet' (did you mean 'store_content'?) and "
        "no ${...} of the task uses it (Digdag: parameter not used)",
    ]


def test_keys_of_operators_that_read_params_of_their_own_are_not_warned_of(
    tmp_path: Path,
) -> None:
    text = """\
        +py:
          py>: tasks.load
          table: users
        +sh:
          sh>: echo "$table"
          table: users
        +mail:
          mail>: body.txt
          subject: s
          to: a@example.com
          anything: for the body template
        """
    assert warnings_of(tmp_path, text) == []


def test_an_option_value_of_the_wrong_kind_is_refused_at_its_line(tmp_path: Path) -> None:
    text = """\
        +a:
          http>: https://example.com
          retries: many
          retry: maybe
          headers: Accept
        +b:
          mail>: body.txt
          html: sometimes
          to: [a@example.com]
        +c:
          require>: other
          params: [1, 2]
        +d:
          http>: https://example.com
          retries: ${n}
        """
    assert problems(tmp_path, text) == [
        "wf.dig:3: 'http>' retries must be a number, got 'many'",
        "wf.dig:4: 'http>' retry must be true or false, got 'maybe'",
        "wf.dig:5: 'http>' headers must be a list or a mapping, got 'Accept'",
        "wf.dig:8: 'mail>' html must be true or false, got 'sometimes'",
        "wf.dig:12: 'require>' params must be a mapping, got a list",
    ]


def test_every_option_of_the_registry_is_documented() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "language"
    text = "\n".join(page.read_text(encoding="utf-8") for page in docs.glob("*.md"))
    missing = [
        f"{spec.key} {option}"
        for spec in REGISTRY.values()
        for option in spec.options
        if f"`{option}" not in text
    ]
    assert missing == []
