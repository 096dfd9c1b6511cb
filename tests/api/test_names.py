"""Names a request brings (projects, secrets, workflow files) and text inside a pushed
workflow: a bad one is a 422 naming it, and nothing is stored."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient
from sqlalchemy import Engine, func, select

from tests.api.conftest import HELLO_WORKFLOW, Pusher, assert_problem
from tickwork.shared.store.tables import projects, secrets


def project_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(projects)).scalar_one())


@pytest.mark.parametrize("name", ["demo%0A", "demo%0D%0A", "demo%0A%0A"])
def test_a_project_name_ending_in_a_newline_is_refused(
    push: Pusher, engine: Engine, name: str
) -> None:
    problem = assert_problem(push(name), 422)
    assert problem["errors"][0]["parameter"] == "name"
    assert project_count(engine) == 0


def test_a_secret_name_ending_in_a_newline_is_refused(
    api: FlaskClient, push: Pusher, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_SECRET_KEY", Fernet.generate_key().decode())
    assert push("demo").status_code == 201
    response = api.put("/api/projects/demo/secrets/token%0A", json={"value": "v"})
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["parameter"] == "key"
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(secrets)).scalar_one() == 0


@pytest.mark.parametrize(
    ("file_name", "shown"),
    [
        ("a+b.dig", "a+b.dig"),
        ("a^b.dig", "a^b.dig"),
        ("a\x01b.dig", "a\\x01b.dig"),
        ("tab\there.dig", "tab\\x09here.dig"),
        ("a\udcffb.dig", "a\ufffdb.dig"),  # the byte 0xff: not UTF-8
        ("a\u202e.dig", "a\\u202e.dig"),  # a bidi override
        ("a\u200b.dig", "a\\u200b.dig"),  # zero width
        ("a\ufeff.dig", "a\\ufeff.dig"),
        (" .dig", " .dig"),
        ("a .dig", "a .dig"),
    ],
)
def test_a_workflow_file_whose_name_cannot_name_a_workflow_is_refused(
    push: Pusher, engine: Engine, file_name: str, shown: str
) -> None:
    response = push("demo", {file_name: HELLO_WORKFLOW, "good.dig": HELLO_WORKFLOW})
    problem = assert_problem(response, 422)
    assert [error["file"] for error in problem["errors"]] == [shown]
    assert project_count(engine) == 0


def test_a_refused_workflow_name_is_shown_with_one_escape(push: Pusher, engine: Engine) -> None:
    response = push("demo", {"a\u2028.dig": HELLO_WORKFLOW})
    problem = assert_problem(response, 422)
    # The archive's own check refuses it first, naming the member with one escape.
    assert problem["errors"][0]["file"] == "a\\u2028.dig"
    assert "\\\\" not in problem["detail"]
    assert project_count(engine) == 0


def test_a_nul_inside_a_workflow_value_is_refused_with_its_line(
    push: Pusher, engine: Engine
) -> None:
    text = 'timezone: UTC\n+hello:\n  echo>: "a\\u0000b"\n'
    problem = assert_problem(push("demo", {"hello.dig": text}), 422)
    assert problem["errors"][0]["file"] == "hello.dig"
    assert problem["errors"][0]["line"] == 3
    assert "NUL" in problem["detail"]
    assert project_count(engine) == 0


@pytest.mark.parametrize("number", [".nan", ".inf", "9223372036854775808"])
def test_a_number_the_store_cannot_hold_in_a_workflow_is_refused_with_its_line(
    push: Pusher, engine: Engine, number: str
) -> None:
    text = f"timezone: UTC\n_export:\n  x: {number}\n+hello:\n  echo>: hi\n"
    problem = assert_problem(push("demo", {"hello.dig": text}), 422)
    assert (problem["errors"][0]["file"], problem["errors"][0]["line"]) == ("hello.dig", 3)
    assert project_count(engine) == 0
