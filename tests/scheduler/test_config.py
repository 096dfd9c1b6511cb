"""The scheduler's settings from the environment (services/scheduler/config.py)."""

from __future__ import annotations

import pytest

from tickwork.services.scheduler.config import SchedulerSettings
from tickwork.shared.errors import InvalidConfig


class TestSchedulerSettings:
    def test_the_database_url_is_required(self) -> None:
        with pytest.raises(InvalidConfig, match="TICKWORK_DATABASE_URL"):
            SchedulerSettings.from_environment({})

    def test_defaults_and_overrides(self) -> None:
        env = {"TICKWORK_DATABASE_URL": "sqlite:///x.db", "TICKWORK_METRICS_PORT": "9100"}
        assert SchedulerSettings.from_environment(env) == SchedulerSettings(
            "sqlite:///x.db", metrics_port=9100, log_level="INFO"
        )
        assert SchedulerSettings.from_environment(env, metrics_port=0).metrics_port == 0

    def test_a_bad_port_names_its_variable(self) -> None:
        with pytest.raises(InvalidConfig, match="TICKWORK_METRICS_PORT"):
            SchedulerSettings.from_environment(
                {"TICKWORK_DATABASE_URL": "sqlite://", "TICKWORK_METRICS_PORT": "-1"}
            )
