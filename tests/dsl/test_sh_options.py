"""``sh>``'s ``shell:`` option is checked when a workflow is read, with file and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidWorkflow


def problems(project: Path, text: str) -> list[str]:
    with pytest.raises(InvalidWorkflow) as caught:
        parse_workflow_text(textwrap.dedent(text), "wf.dig", project)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize("shell", ["[bash, -c]", '["/bin/zsh", "-c"]', "[bash]"])
def test_a_shell_given_as_a_list_of_strings_is_kept_as_a_param(tmp_path: Path, shell: str) -> None:
    text = f"+hello:\n  sh>: echo hi\n  shell: {shell}\n"

    definition = parse_workflow_text(text, "wf.dig", tmp_path)

    task = definition.root.children[0]
    assert isinstance(task.params["shell"], list)
    assert all(isinstance(item, str) for item in task.params["shell"])


@pytest.mark.parametrize("shell", ["bash", "[]", "[bash, 1]", '[""]', "{bash: -c}"])
def test_a_shell_that_is_not_a_list_of_strings_is_refused_with_file_and_line(
    tmp_path: Path, shell: str
) -> None:
    text = f"""
    +hello:
      sh>: echo hi
      shell: {shell}
    """

    found = problems(tmp_path, text)

    assert len(found) == 1
    assert found[0].startswith("wf.dig:4: 'sh>' shell must be a non-empty list of strings")
