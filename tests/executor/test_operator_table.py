"""The executor runs exactly the operators the registry says run in the executor."""

from __future__ import annotations

from services.executor.dispatch import EXECUTOR_OPERATORS, RUN_HERE
from shared.domain.operators import RunsOn, executor_operators, runs_on


def test_the_executor_has_a_handler_for_every_operator_the_registry_runs_there() -> None:
    assert set(RUN_HERE) == set(executor_operators())


def test_the_executor_runs_no_operator_the_registry_sends_to_agents() -> None:
    assert all(runs_on(name) is RunsOn.EXECUTOR for name in RUN_HERE)
    assert executor_operators() == EXECUTOR_OPERATORS
