"""The agent's operator table and the operator registry name the same operators."""

from __future__ import annotations

from tickwork.services.agent.operators import OPERATORS
from tickwork.shared.domain.operators import RunsOn, agent_operators, runs_on


def test_every_agent_run_operator_of_the_registry_has_an_implementation() -> None:
    missing = agent_operators() - set(OPERATORS)
    assert not missing, f"registry operators without an agent implementation: {missing}"


def test_every_implementation_is_an_agent_run_operator_of_the_registry() -> None:
    for name in OPERATORS:
        assert runs_on(name) is RunsOn.AGENT, f"{name!r} is not an agent operator"
