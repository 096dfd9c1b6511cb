"""``pg>`` options are checked when a workflow is pushed or checked, at their lines, as
Digdag refuses them: types, one of create_table / insert_into / download_file /
store_last_results, and store_last_results' values."""

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


def test_a_pg_task_with_every_option_parses(tmp_path: Path) -> None:
    text = """\
        +load:
          pg>: queries/load.sql
          database: app
          host: db.example.com
          port: "5433"
          user: loader
          password: ${secret:pg.password}
          ssl: true
          connect_timeout: 10s
          schema: staging
          insert_into: staging.events
          strict_transaction: false
          status_table: load_status
        """
    task = parse_workflow_text(textwrap.dedent(text), "wf.dig", tmp_path).root.children[0]
    assert task.operator == "pg"
    assert task.params["insert_into"] == "staging.events"


def test_create_table_and_insert_into_are_mutually_exclusive(tmp_path: Path) -> None:
    text = """\
        +t:
          pg>: q.sql
          create_table: a
          insert_into: b
        """
    assert problems(tmp_path, text) == [
        "wf.dig:4: 'pg>' insert_into can't be used together with create_table"
    ]


def test_download_file_and_store_last_results_are_mutually_exclusive(tmp_path: Path) -> None:
    text = """\
        +t:
          pg>: q.sql
          download_file: out.csv
          store_last_results: all
        """
    assert problems(tmp_path, text) == [
        "wf.dig:4: 'pg>' store_last_results can't be used together with download_file"
    ]


def test_store_last_results_takes_false_first_or_all(tmp_path: Path) -> None:
    text = "+t:\n  pg>: q.sql\n  store_last_results: some\n"
    assert problems(tmp_path, text) == [
        "wf.dig:3: 'pg>' store_last_results must be false, first or all, got 'some'"
    ]


def test_wrong_types_are_reported_at_their_lines(tmp_path: Path) -> None:
    text = """\
        +t:
          pg>: q.sql
          port: many
          ssl: maybe
          connect_timeout: forever
          status_table: [a, b]
          download_file: ../out.csv
          socket_timeout: never
          password_override: 3
        """
    assert problems(tmp_path, text) == [
        "wf.dig:3: 'pg>' port must be a port number, got 'many'",
        "wf.dig:4: 'pg>' ssl must be true or false, got 'maybe'",
        "wf.dig:5: 'pg>' connect_timeout must be a duration (30s, 1m, or seconds), got 'forever'",
        "wf.dig:6: 'pg>' status_table must be a non-empty string, got a list",
        "wf.dig:7: 'pg>' download_file must be a relative path inside the task's directory, "
        "got '../out.csv'",
        "wf.dig:8: 'pg>' socket_timeout must be a duration (30s, 1m, or seconds), got 'never'",
        "wf.dig:9: 'pg>' password_override must be a non-empty string, got 3",
    ]


def test_a_secret_may_not_stand_in_the_query_options(tmp_path: Path) -> None:
    text = "+t:\n  pg>: q.sql\n  insert_into: ${secret:pg.table}\n"
    assert len(problems(tmp_path, text)) == 1
