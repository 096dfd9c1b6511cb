"""Specification of ``!include`` and ``_disable`` in workflow files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.files import write_under
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.dsl.parser import parse_generated_tasks, parse_workflow_file
from tickwork.shared.errors import InvalidWorkflow


def write(project: Path, **files: str) -> None:
    for name, text in files.items():
        write_under(project, name.replace("__", "/"), textwrap.dedent(text))


def parse(project: Path, text: str, **files: str) -> WorkflowDefinition:
    write(project, **{"wf.dig": text, **files})
    return parse_workflow_file(project / "wf.dig", project)


def problems(project: Path, text: str, **files: str) -> list[str]:
    with pytest.raises(InvalidWorkflow) as caught:
        parse(project, text, **files)
    return [str(problem) for problem in caught.value.problems]


def names(spec: TaskSpec) -> list[str]:
    return [child.name for child in spec.children]


class TestInclude:
    def test_a_whole_workflow_file_included_into_a_group_keeps_the_including_workflow_s_keys(
        self, tmp_path: Path
    ) -> None:
        definition = parse(
            tmp_path,
            """
            timezone: Asia/Tokyo
            +basic:
              !include : basic.dig
            """,
            **{
                "basic.dig": (
                    "timezone: UTC\nschedule:\n  daily>: 07:00:00\n"
                    "sla:\n  time: 08:00\n  +late:\n    echo>: late\n"
                    "+step:\n  echo>: one\n"
                )
            },
        )
        assert definition.timezone == "Asia/Tokyo" and definition.schedule is None
        assert definition.sla is None
        (group,) = definition.root.children
        assert names(group) == ["+step"]

    def test_a_group_s_workflow_keys_are_checked_at_their_lines(self, tmp_path: Path) -> None:
        assert problems(
            tmp_path,
            """
            +group:
              timezone: Mars/Olympus
              +a:
                echo>: a
            """,
        ) == ["wf.dig:3: unknown timezone 'Mars/Olympus'"]

    def test_an_include_key_merges_the_included_tasks_in_place(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            """
            +first:
              echo>: one
            !include : 'steps.dig'
            +last:
              echo>: three
            """,
            **{"steps.dig": "+second:\n  echo>: two\n+third:\n  echo>: two and a half\n"},
        )
        assert names(definition.root) == ["+first", "+second", "+third", "+last"]

    def test_an_include_value_becomes_the_task_body(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            "+load: !include 'tasks/load.dig'\n",
            **{"tasks__load.dig": "+a:\n  echo>: a\n+b:\n  echo>: b\n"},
        )
        (load,) = definition.root.children
        assert names(load) == ["+a", "+b"]

    def test_paths_are_relative_to_the_including_file(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            "!include : 'lib/outer.dig'\n",
            **{
                "lib__outer.dig": "!include : 'inner.dig'\n",
                "lib__inner.dig": "+deep:\n  echo>: found\n",
            },
        )
        assert names(definition.root) == ["+deep"]

    def test_an_include_can_hold_export_values(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            "_export: !include 'config.yml'\n+a:\n  echo>: ${db}\n",
            **{"config.yml": "db: prod\n"},
        )
        assert definition.root.export == {"db": "prod"}

    def test_leaving_the_project_is_refused_at_the_include(self, tmp_path: Path) -> None:
        project = tmp_path / "project"
        project.mkdir()
        (tmp_path / "secret.dig").write_text("+x:\n  echo>: x\n")
        assert problems(project, "+a:\n  echo>: a\n!include : '../secret.dig'\n") == [
            "wf.dig:3: '!include' file '../secret.dig' is outside the project"
        ]

    def test_an_absolute_path_is_refused(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "!include : '/etc/passwd'\n") == [
            "wf.dig:1: '!include' needs a path relative to this file, not an absolute one:"
            " '/etc/passwd'"
        ]

    def test_a_cycle_is_refused(self, tmp_path: Path) -> None:
        found = problems(
            tmp_path,
            "!include : 'a.dig'\n",
            **{"a.dig": "!include : 'b.dig'\n", "b.dig": "\n\n!include : 'a.dig'\n"},
        )
        assert found == ["b.dig:3: '!include' cycle: a.dig -> b.dig -> a.dig"]

    def test_a_missing_file_is_reported_at_the_include(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "\n!include : 'nope.dig'\n") == [
            "wf.dig:2: '!include' file nope.dig does not exist"
        ]

    def test_errors_inside_an_included_file_name_that_file_and_line(self, tmp_path: Path) -> None:
        found = problems(
            tmp_path,
            "+a:\n  echo>: a\n!include : 'steps.dig'\n",
            **{"steps.dig": "+ok:\n  echo>: ok\n+bad:\n  ech>: typo\n"},
        )
        assert len(found) == 1 and found[0].startswith("steps.dig:4: unknown operator 'ech>'")

    def test_yaml_errors_inside_an_included_file_name_that_file(self, tmp_path: Path) -> None:
        found = problems(tmp_path, "!include : 'bad.dig'\n", **{"bad.dig": "a: [1\n"})
        assert len(found) == 1 and found[0].startswith("bad.dig:")

    def test_a_key_defined_twice_through_an_include_is_an_error(self, tmp_path: Path) -> None:
        found = problems(
            tmp_path,
            "+a:\n  echo>: a\n!include : 'more.dig'\n",
            **{"more.dig": "+a:\n  echo>: again\n"},
        )
        assert found == ["wf.dig:3: '!include more.dig' defines '+a' again (first at line 1)"]

    def test_an_alias_cannot_repeat_an_included_file(self, tmp_path: Path) -> None:
        # Given a file whose size only shows once it is read, aliased many times
        aliases = ", ".join(["*big"] * 50)
        text = f"_export:\n  one: &big !include 'big.dig'\n  many: [{aliases}]\n+a:\n  echo>: a\n"
        found = problems(tmp_path, text, **{"big.dig": "a: 1\n"})
        # Then the alias is refused at its line
        assert len(found) == 1 and found[0].startswith("wf.dig:3:")
        assert "an alias cannot repeat a node that holds '!include'" in found[0]

    def test_alias_expansion_counts_over_every_included_file(self, tmp_path: Path) -> None:
        # Given included files that each expand their aliases to 3/4 of the limit
        level = "[" + ", ".join(["x"] * 1000) + "]"
        bomb = f"a: &a {level}\nb: [" + ", ".join(["*a"] * 150) + "]\n"
        text = "_export:\n  p: !include 'one.dig'\n  q: !include 'two.dig'\n+a:\n  echo>: a\n"
        found = problems(tmp_path, text, **{"one.dig": bomb, "two.dig": bomb})
        # Then the second one takes the whole past the limit
        assert len(found) == 1 and "aliases expand this file past 200000" in found[0]


class TestDisable:
    def test_a_disabled_task_becomes_an_empty_group(self, tmp_path: Path) -> None:
        definition = parse(
            tmp_path,
            """
            +a:
              echo>: a
            +skipped:
              _disable: true
              +inner:
                sh>: exit 1
            +op:
              _disable: true
              sh>: exit 1
            """,
        )
        skipped, op = definition.root.children[1:]
        assert skipped == TaskSpec("+skipped") and op == TaskSpec("+op")

    def test_disable_false_changes_nothing(self, tmp_path: Path) -> None:
        definition = parse(tmp_path, "+a:\n  _disable: false\n  echo>: a\n")
        assert definition.root.children[0].operator == "echo"

    def test_a_disabled_task_is_still_checked(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  _disable: true\n  ech>: a\n")[0].startswith(
            "wf.dig:3: unknown operator 'ech>'"
        )

    def test_disable_must_be_a_boolean(self, tmp_path: Path) -> None:
        assert problems(tmp_path, "+a:\n  _disable: maybe\n  echo>: a\n") == [
            "wf.dig:2: '_disable' must be true or false, got 'maybe'"
        ]


class TestGeneratedTasks:
    def test_subtasks_are_checked_like_a_group(self, tmp_path: Path) -> None:
        spec = parse_generated_tasks(
            {"+subtask0": {"sh>": "echo 0"}, "+subtask1": {"echo>": "1"}}, "py", tmp_path
        )
        assert spec.name == "^sub" and names(spec) == ["+subtask0", "+subtask1"]

    def test_bad_subtasks_are_errors_naming_their_source(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidWorkflow) as caught:
            parse_generated_tasks({"+subtask0": {"nope>": 1}}, "subtasks of +wf+t", tmp_path)
        assert str(caught.value).startswith("subtasks of +wf+t: unknown operator 'nope>'")
