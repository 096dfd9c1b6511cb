"""The executor runs exactly the operators the registry says run in the executor."""

from __future__ import annotations

from tickwork.services.executor.dispatch import RUN_HERE
from tickwork.shared.domain.operators import executor_operators


def test_the_executor_has_a_handler_for_every_operator_the_registry_runs_there_and_no_other() -> (
    None
):
    assert set(RUN_HERE) == set(executor_operators())
