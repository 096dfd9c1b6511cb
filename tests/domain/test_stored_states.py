"""A stored state outside its set is refused where it is read, naming the row."""

from __future__ import annotations

import pytest

from tickwork.shared.domain.choices import parse_choice
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.errors import UnknownValue


def test_a_stored_task_state_reads_as_its_member() -> None:
    assert parse_choice(TaskState, "retry_waiting", "state of task 3") is TaskState.RETRY_WAITING


def test_an_unknown_attempt_state_names_the_attempt() -> None:
    with pytest.raises(UnknownValue, match=r"^state of attempt 9 must be one of waiting \| "):
        parse_choice(AttemptState, "paused", "state of attempt 9")
