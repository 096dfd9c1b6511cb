"""What ``tickwork run --goal +TASK`` and ``--end +TASK`` run, as Digdag's run decides it:
the tasks before the target (its upstream siblings and those of each group around it,
with their subtrees) run; ``--end`` skips the target and the rest, ``--goal`` runs the
target's subtree too and skips the rest."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tickwork.services.compose.partial_runs import partial_run
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import InvalidInput

WORKFLOW = """
    +a:
      echo>: a
    +g:
      +b:
        echo>: b
      +c:
        echo>: c
    +p:
      _parallel: true
      +x:
        echo>: x
      +y:
        echo>: y
    +d:
      echo>: d
"""


@pytest.fixture
def definition(tmp_path: Path) -> WorkflowDefinition:
    return parse_workflow_text(textwrap.dedent(WORKFLOW), "wf.dig", tmp_path)


def test_end_runs_what_comes_before_and_skips_the_target_and_the_rest(
    definition: WorkflowDefinition,
) -> None:
    plan = partial_run(definition, "+c", "--end")
    assert plan.before == {"+wf+a", "+wf+g+b"}
    assert plan.skipped == {"+wf+g+c", "+wf+p", "+wf+p+x", "+wf+p+y", "+wf+d"}


def test_goal_runs_the_target_s_subtree_too(definition: WorkflowDefinition) -> None:
    plan = partial_run(definition, "+g", "--goal")
    assert plan.before == {"+wf+a"}
    assert plan.skipped == {"+wf+p", "+wf+p+x", "+wf+p+y", "+wf+d"}


def test_a_parallel_sibling_is_not_before_a_task(definition: WorkflowDefinition) -> None:
    plan = partial_run(definition, "+y", "--end")
    assert plan.before == {"+wf+a", "+wf+g", "+wf+g+b", "+wf+g+c"}
    assert "+wf+p+x" in plan.skipped and "+wf+p" not in plan.skipped


def test_a_target_that_names_no_task_names_the_option(definition: WorkflowDefinition) -> None:
    with pytest.raises(InvalidInput) as caught:
        partial_run(definition, "+nope", "--goal")
    assert str(caught.value) == "--goal: no task '+nope' in this workflow"
