"""Specification of numeric options of agent operators given as strings, as ``${...}``
renders them: a string that spells a number is that number, anything else is refused."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.services.agent.operators.base import OperatorFailed
from tickwork.services.agent.operators.mail import smtp_settings


@pytest.mark.parametrize(("port", "number"), [("2525", 2525), (587, 587), (" 25 ", 25)])
def test_a_mail_port_written_as_a_string_is_that_port(port: Any, number: int) -> None:
    assert smtp_settings({"host": "smtp.example", "port": port}, {})["port"] == number


@pytest.mark.parametrize("port", ["25x", True, "2.5"])
def test_a_mail_port_that_is_not_a_whole_number_is_refused(port: Any) -> None:
    with pytest.raises(OperatorFailed, match="'mail>' port must be a number"):
        smtp_settings({"host": "smtp.example", "port": port}, {})
