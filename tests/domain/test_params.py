"""Specifications of parameter merging (Digdag's order) and the built-in session variables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tickwork.shared.domain.params import (
    merge_outputs,
    merge_params,
    session_variables,
    task_params,
)

LAYERS = ("session_params", "inherited_export", "stored", "own_export", "builtins", "local")


def _params(**layers: dict[str, Any] | None) -> dict[str, Any]:
    values: dict[str, Any] = {name: None for name in LAYERS}
    values["session_params"] = {}
    values["builtins"] = {}
    values.update(layers)
    return task_params(**values)


class TestTaskParamsOrder:
    @pytest.mark.parametrize("winner", range(len(LAYERS)))
    def test_each_layer_overrides_every_layer_below_it(self, winner: int) -> None:
        # Given the key "x" set in every layer up to ``winner``
        layers = {name: {"x": name, f"only_{name}": 1} for name in LAYERS[: winner + 1]}
        # When merged
        params = _params(**layers)
        # Then the highest of them wins and every layer's own keys survive
        assert params["x"] == LAYERS[winner]
        assert all(params[f"only_{name}"] == 1 for name in layers)

    def test_the_full_order_lowest_first(self) -> None:
        params = _params(
            session_params={"a": "session", "b": "session", "c": "session"},
            inherited_export={"b": "inherited", "c": "inherited", "d": "inherited"},
            stored={"c": "stored", "d": "stored", "e": "stored"},
            own_export={"d": "own", "e": "own", "f": "own"},
            builtins={"e": "builtin", "f": "builtin", "g": "builtin"},
            local={"f": "local", "g": "local"},
        )
        assert params == {
            "a": "session",
            "b": "inherited",
            "c": "stored",
            "d": "own",
            "e": "builtin",
            "f": "local",
            "g": "local",
        }

    def test_a_stored_param_beats_a_session_param_but_not_a_local_key(self) -> None:
        params = _params(session_params={"n": 1, "m": 1}, stored={"n": 2, "m": 2}, local={"m": 3})
        assert params == {"n": 2, "m": 3}


class TestMergeParams:
    def test_nested_dicts_merge_key_by_key(self) -> None:
        merged = merge_params(
            {"db": {"host": "a", "port": 5432, "opts": {"ssl": True}}},
            {"db": {"host": "b", "opts": {"timeout": 3}}},
        )
        assert merged == {"db": {"host": "b", "port": 5432, "opts": {"ssl": True, "timeout": 3}}}

    def test_a_non_dict_replaces_a_dict_and_the_other_way_round(self) -> None:
        assert merge_params({"a": {"x": 1}}, {"a": 5}) == {"a": 5}
        assert merge_params({"a": 5}, {"a": {"x": 1}}) == {"a": {"x": 1}}
        assert merge_params({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}

    def test_none_and_empty_layers_are_skipped(self) -> None:
        assert merge_params(None, {"a": 1}, {}, None) == {"a": 1}
        assert merge_params() == {}

    def test_inputs_are_not_modified(self) -> None:
        low = {"db": {"host": "a"}}
        high = {"db": {"port": 1}}
        merged = merge_params(low, high)
        merged["db"]["extra"] = True
        assert low == {"db": {"host": "a"}}
        assert high == {"db": {"port": 1}}

    def test_a_value_set_to_none_still_overrides(self) -> None:
        assert merge_params({"a": 1}, {"a": None}) == {"a": None}


class TestMergeOutputs:
    def test_the_last_defined_task_wins(self) -> None:
        assert merge_outputs([{"x": 1, "y": 1}, None, {"x": 2}]) == {"x": 2, "y": 1}

    def test_nothing_stored_is_none(self) -> None:
        assert merge_outputs([]) is None
        assert merge_outputs([None, {}]) is None


class TestSessionVariables:
    def test_they_are_written_in_the_workflows_time_zone(self) -> None:
        # 15:00 UTC is already the next day in Tokyo
        session_time = datetime(2024, 3, 10, 15, 0, tzinfo=UTC)
        variables = session_variables(session_time, "Asia/Tokyo")
        assert variables == {
            "timezone": "Asia/Tokyo",
            "session_time": "2024-03-11T00:00:00+09:00",
            "session_date": "2024-03-11",
            "session_date_compact": "20240311",
            "session_local_time": "2024-03-11 00:00:00",
            "session_tz_offset": "+0900",
            "session_unixtime": int(session_time.timestamp()),
        }

    def test_the_offset_follows_daylight_saving_time(self) -> None:
        winter = session_variables(datetime(2024, 1, 15, 12, tzinfo=UTC), "America/Los_Angeles")
        summer = session_variables(datetime(2024, 7, 15, 12, tzinfo=UTC), "America/Los_Angeles")
        assert winter["session_tz_offset"] == "-0800"
        assert winter["session_local_time"] == "2024-01-15 04:00:00"
        assert summer["session_tz_offset"] == "-0700"
        assert summer["session_time"] == "2024-07-15T05:00:00-07:00"

    def test_unixtime_does_not_depend_on_the_zone(self) -> None:
        session_time = datetime(2024, 3, 10, 15, 0, tzinfo=UTC)
        assert (
            session_variables(session_time, "UTC")["session_unixtime"]
            == session_variables(session_time, "Asia/Kolkata")["session_unixtime"]
            == 1710082800
        )

    def test_utc_is_written_with_a_zero_offset(self) -> None:
        variables = session_variables(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "UTC")
        assert variables["session_time"] == "2024-01-02T03:04:05+00:00"
        assert variables["session_tz_offset"] == "+0000"
