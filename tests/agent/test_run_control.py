"""Why a run was stopped is one of a closed set of reasons."""

from __future__ import annotations

import pytest

from tickwork.services.agent.operators.base import RunControl, StopReason


def test_a_stop_records_its_reason_as_a_stop_reason() -> None:
    control = RunControl()
    assert control.stop("killed")
    assert control.reason is StopReason.KILLED


def test_the_first_reason_given_stands() -> None:
    control = RunControl()
    control.stop(StopReason.SHUTDOWN)
    control.stop(StopReason.LEASE_LOST)
    assert control.reason is StopReason.SHUTDOWN


def test_an_unknown_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="'tired' is not a valid StopReason"):
        RunControl().stop("tired")
