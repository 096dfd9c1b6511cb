"""Specifications of the workflow tree values: sibling edges, retry waits, JSON round trips."""

from __future__ import annotations

import json

import pytest

from tickwork.shared.domain.workflow import (
    MAX_INTERVAL_SECONDS,
    IntervalType,
    RetryPolicy,
    TaskSpec,
    WorkflowDefinition,
    sibling_dependencies,
)


def _op(name: str, **kwargs: object) -> TaskSpec:
    return TaskSpec(name, operator="echo", command=name, **kwargs)  # type: ignore[arg-type]


def _upstreams(group: TaskSpec) -> dict[str, set[str]]:
    names = [child.name for child in group.children]
    found: dict[str, set[str]] = {name: set() for name in names}
    for up, down in sibling_dependencies(group):
        found[names[down]].add(names[up])
    return found


class TestSiblingDependencies:
    def test_a_sequential_group_chains_each_child_to_the_one_before(self) -> None:
        group = TaskSpec("+g", children=(_op("+a"), _op("+b"), _op("+c")))
        assert sibling_dependencies(group) == [(0, 1), (1, 2)]

    def test_a_group_with_one_or_no_child_has_no_edges(self) -> None:
        assert sibling_dependencies(TaskSpec("+g")) == []
        assert sibling_dependencies(TaskSpec("+g", children=(_op("+a"),))) == []

    def test_a_background_child_has_no_upstream_and_the_next_child_waits_for_it(self) -> None:
        group = TaskSpec(
            "+g", children=(_op("+a"), _op("+b", background=True), _op("+c"), _op("+d"))
        )
        assert _upstreams(group) == {
            "+a": set(),
            "+b": set(),
            "+c": {"+a", "+b"},
            "+d": {"+c"},
        }

    def test_consecutive_background_children_are_all_awaited_by_the_next_one(self) -> None:
        group = TaskSpec(
            "+g",
            children=(_op("+a", background=True), _op("+b", background=True), _op("+c")),
        )
        assert _upstreams(group) == {"+a": set(), "+b": set(), "+c": {"+a", "+b"}}

    def test_a_trailing_background_child_has_no_upstream_and_no_downstream(self) -> None:
        group = TaskSpec("+g", children=(_op("+a"), _op("+b", background=True)))
        assert sibling_dependencies(group) == []

    def test_a_parallel_group_without_after_has_no_edges(self) -> None:
        group = TaskSpec("+g", parallel=True, children=(_op("+a"), _op("+b"), _op("+c")))
        assert sibling_dependencies(group) == []

    def test_a_parallel_group_has_exactly_the_edges_after_names(self) -> None:
        group = TaskSpec(
            "+g",
            parallel=True,
            parallel_limit=2,
            children=(
                _op("+a"),
                _op("+b", after=("+a",)),
                _op("+c"),
                _op("+d", after=("+b", "+c")),
            ),
        )
        assert sorted(sibling_dependencies(group)) == [(0, 1), (1, 3), (2, 3)]


class TestRetryDelay:
    def test_a_constant_interval_never_grows(self) -> None:
        policy = RetryPolicy(limit=5, interval_seconds=10)
        assert [policy.delay_seconds(n) for n in range(4)] == [10, 10, 10, 10]

    def test_no_interval_means_no_wait(self) -> None:
        assert RetryPolicy(limit=1).delay_seconds(0) == 0

    def test_an_exponential_interval_doubles_from_the_first_retry(self) -> None:
        policy = RetryPolicy(limit=5, interval_seconds=3, interval_type=IntervalType.EXPONENTIAL)
        assert [policy.delay_seconds(n) for n in range(5)] == [3, 6, 12, 24, 48]

    def test_max_interval_caps_an_exponential_interval(self) -> None:
        policy = RetryPolicy(
            limit=9,
            interval_seconds=2,
            interval_type=IntervalType.EXPONENTIAL,
            max_interval_seconds=10,
        )
        assert [policy.delay_seconds(n) for n in range(5)] == [2, 4, 8, 10, 10]

    def test_max_interval_caps_a_constant_interval(self) -> None:
        policy = RetryPolicy(limit=1, interval_seconds=30, max_interval_seconds=5)
        assert policy.delay_seconds(0) == 5

    def test_a_huge_retry_count_waits_at_most_a_week(self) -> None:
        policy = RetryPolicy(
            limit=10_000, interval_seconds=1, interval_type=IntervalType.EXPONENTIAL
        )
        assert policy.delay_seconds(10_000) == MAX_INTERVAL_SECONDS == 7 * 24 * 3600
        capped = RetryPolicy(
            limit=10_000,
            interval_seconds=1,
            interval_type=IntervalType.EXPONENTIAL,
            max_interval_seconds=60,
        )
        assert capped.delay_seconds(10_000) == 60


def _full_tree() -> TaskSpec:
    called = TaskSpec("^sub", children=(_op("+x"), _op("+y")))
    return TaskSpec(
        "+wf",
        parallel=True,
        parallel_limit=2,
        export={"region": "eu", "nested": {"a": 1}},
        retry=RetryPolicy(3, 5.0, IntervalType.EXPONENTIAL, 60.0),
        error=_op("^error", params={"to": "ops"}),
        children=(
            _op("+a", params={"n": 1}, check=_op("^check")),
            TaskSpec("+b", operator="call", command="sub.dig", called=called, after=("+a",)),
            TaskSpec(
                "+c",
                after=("+a",),
                children=(_op("+c1"), _op("+c2", background=True), _op("+c3")),
            ),
            TaskSpec("+d", operator="sh", command="echo ${x}", retry=RetryPolicy(limit=1)),
        ),
    )


class TestJsonRoundTrip:
    def test_a_task_tree_survives_to_config_and_back(self) -> None:
        spec = _full_tree()
        assert TaskSpec.from_config(spec.to_config()) == spec

    def test_the_config_is_plain_json(self) -> None:
        config = _full_tree().to_config()
        assert TaskSpec.from_config(json.loads(json.dumps(config))) == _full_tree()

    def test_a_task_row_config_leaves_the_children_out(self) -> None:
        config = _full_tree().to_config(with_children=False)
        assert "children" not in config
        restored = TaskSpec.from_config(config)
        assert restored.children == ()
        assert restored.error == _full_tree().error
        assert restored.parallel_limit == 2

    def test_defaults_are_not_written(self) -> None:
        assert _op("+a").to_config() == {"name": "+a", "operator": "echo", "command": "+a"}
        assert TaskSpec("+g").to_config() == {"name": "+g"}

    @pytest.mark.parametrize(
        "policy",
        [
            RetryPolicy(limit=2),
            RetryPolicy(limit=3, interval_seconds=1.5),
            RetryPolicy(3, 5.0, IntervalType.EXPONENTIAL, 60.0),
        ],
    )
    def test_a_retry_policy_survives_to_config_and_back(self, policy: RetryPolicy) -> None:
        assert RetryPolicy.from_config(json.loads(json.dumps(policy.to_config()))) == policy

    def test_a_workflow_definition_survives_to_config_and_back(self) -> None:
        definition = WorkflowDefinition(
            name="wf",
            root=_full_tree(),
            timezone="Asia/Tokyo",
            schedule={"daily>": "07:00:00"},
        )
        config = json.loads(json.dumps(definition.to_config()))
        assert WorkflowDefinition.from_config(config) == definition

    def test_a_workflow_without_schedule_defaults_to_utc(self) -> None:
        definition = WorkflowDefinition("wf", TaskSpec("+wf"))
        config = definition.to_config()
        assert "schedule" not in config
        assert WorkflowDefinition.from_config(config) == definition
        assert WorkflowDefinition.from_config({"name": "wf", "root": {"name": "+wf"}}).timezone == (
            "UTC"
        )

    def test_count_tasks_counts_the_static_tree(self) -> None:
        # +wf, +a, +b, +c, +c1, +c2, +c3, +d: generated ^check/^error/^sub are not static.
        assert _full_tree().count_tasks() == 8
