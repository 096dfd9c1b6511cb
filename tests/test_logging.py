"""Where logs go and how they look: JSON lines for machines, text for people, as
TICKWORK_LOG_FORMAT says (JSON unless stderr is a terminal, by default)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from tickwork.shared.logging import configure_logging


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    logging.getLogger("tickwork.test").warning("lease lost task_id=%d", 7)
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_logs_are_json_lines_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TICKWORK_LOG_FORMAT", raising=False)
    configure_logging("INFO")
    entry = json.loads(_one_line(capsys))
    assert entry["message"] == "lease lost task_id=7"
    assert entry["level"] == "warning"


def test_text_format_is_chosen_by_tickwork_log_format(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_LOG_FORMAT", "text")
    configure_logging("INFO")
    line = _one_line(capsys)
    assert line.endswith("WARNING tickwork.test lease lost task_id=7")


def test_an_explicit_choice_wins_over_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_LOG_FORMAT", "text")
    configure_logging("INFO", json_lines=True)
    assert json.loads(_one_line(capsys))["message"] == "lease lost task_id=7"
