"""Specification: what a task with secrets sends back never holds a secret's value."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tickwork.services.agent.operators import OPERATORS
from tickwork.services.agent.operators.base import OperatorContext
from tickwork.services.agent.runner import TaskRunner
from tickwork.shared.dispatch.messages import TaskEvent, TaskFinished, TaskMessage
from tickwork.shared.secrets import SECRET_KEY_VARIABLE, SecretBox

KEY = "a passphrase long enough for tests"
MARKER = "~secret-test~"


def message_with_secret(tmp_path: Path, operator: str, command: str) -> TaskMessage:
    return TaskMessage(
        task_id=1,
        attempt_id=1,
        lease_token=1,
        full_name="+wf+a",
        operator=operator,
        command=command,
        params={},
        project_dir=str(tmp_path),
        env={"TOKEN": f"{MARKER}token{MARKER}"},
        secrets={"token": SecretBox(KEY).encrypt("hunter2-clear")},
        secret_marker=MARKER,
    )


def run(tmp_path: Path, task: TaskMessage) -> TaskFinished:
    events: list[TaskEvent] = []
    TaskRunner(tmp_path / "logs")(task, events.append)
    finished = events[-1]
    assert isinstance(finished, TaskFinished)
    return finished


def test_a_py_task_cannot_export_or_add_subtasks_holding_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a py> function that exports its secret env value and puts it in a subtask
    monkeypatch.setenv(SECRET_KEY_VARIABLE, KEY)
    (tmp_path / "leak.py").write_text(
        "import os, digdag\n"
        "def run():\n"
        "    digdag.env.export({'t': os.environ['TOKEN']})\n"
        "    digdag.env.add_subtask({'echo>': os.environ['TOKEN']})\n"
    )
    # When it runs
    finished = run(tmp_path, message_with_secret(tmp_path, "py", "leak.run"))
    # Then what goes back (through Redis to the database) has the value masked
    assert finished.error_message is None
    assert "hunter2-clear" not in repr(finished)
    assert finished.export == {"t": "***"}


def test_an_operator_crash_is_logged_with_secrets_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an operator that crashes with the secret in its exception
    def crash(context: OperatorContext) -> dict[str, object]:
        raise RuntimeError(f"bad header {context.message.env['TOKEN']}")

    monkeypatch.setenv(SECRET_KEY_VARIABLE, KEY)
    monkeypatch.setitem(OPERATORS, "crash", crash)
    # When it runs
    with caplog.at_level(logging.ERROR):
        finished = run(tmp_path, message_with_secret(tmp_path, "crash", ""))
    # Then neither the result nor the agent's log holds the value
    assert finished.error_message == "RuntimeError: bad header ***"
    assert "operator crashed" in caplog.text
    assert "hunter2-clear" not in caplog.text
