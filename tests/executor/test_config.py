"""The executor's settings from the environment (services/executor/config.py)."""

from __future__ import annotations

import pytest

from tickwork.services.executor.config import EXECUTOR_SETTINGS, ExecutorSettings
from tickwork.services.executor.report import Recovery
from tickwork.shared.errors import InvalidConfig

BASE = {"TICKWORK_DATABASE_URL": "postgresql://db/tickwork"}


class TestExecutorSettings:
    def test_defaults_are_those_the_command_line_documents(self) -> None:
        settings = ExecutorSettings.from_environment(BASE)
        assert settings.redis.url == "redis://127.0.0.1:6379/0"
        assert settings.redis.prefix == "tickwork:"
        assert settings.recovery == Recovery(every_seconds=5.0, max_lost=3)
        assert settings.task_timeout_seconds == 86400.0
        assert settings.max_tasks_per_attempt == 10_000
        assert (settings.crash_point, settings.metrics_port, settings.log_level) == ("", 0, "INFO")
        assert settings.partition_count == 16

    def test_every_variable_is_declared_once_with_a_doc(self) -> None:
        names = [setting.name for setting in EXECUTOR_SETTINGS]
        assert len(names) == len(set(names))
        assert all(name.startswith("TICKWORK_") for name in names)
        assert all(setting.doc for setting in EXECUTOR_SETTINGS)

    def test_variables_are_read(self) -> None:
        settings = ExecutorSettings.from_environment(
            {**BASE, "TICKWORK_REAPER_SECONDS": "2.5", "TICKWORK_MAX_LOST_LEASES": "7"}
        )
        assert settings.recovery == Recovery(every_seconds=2.5, max_lost=7)

    def test_the_partition_count_is_read(self) -> None:
        settings = ExecutorSettings.from_environment({**BASE, "TICKWORK_EXECUTOR_PARTITIONS": "4"})
        assert settings.partition_count == 4

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("TICKWORK_DATABASE_URL", ""),
            ("TICKWORK_REDIS_URL", "http://localhost"),
            ("TICKWORK_REAPER_SECONDS", "soon"),
            ("TICKWORK_MAX_LOST_LEASES", "101"),
            ("TICKWORK_MAX_TASKS_PER_ATTEMPT", "0"),
            ("TICKWORK_TASK_TIMEOUT_SECONDS", "0.5"),
            ("TICKWORK_CRASH_POINT", "somewhere"),
            ("TICKWORK_METRICS_PORT", "70000"),
            ("TICKWORK_LOG_LEVEL", "LOUD"),
            ("TICKWORK_EXECUTOR_PARTITIONS", "0"),
        ],
    )
    def test_a_bad_value_is_refused_naming_its_variable(self, name: str, value: str) -> None:
        with pytest.raises(InvalidConfig, match=name):
            ExecutorSettings.from_environment({**BASE, name: value})

    def test_a_flag_overrides_its_variable_which_is_then_not_read(self) -> None:
        settings = ExecutorSettings.from_environment(
            {**BASE, "TICKWORK_MAX_LOST_LEASES": "many"}, max_lost_leases=5, reaper_seconds=1.0
        )
        assert settings.recovery == Recovery(every_seconds=1.0, max_lost=5)

    def test_an_unknown_override_is_a_programming_error(self) -> None:
        with pytest.raises(TypeError, match="reaper_interval"):
            ExecutorSettings.from_environment(BASE, reaper_interval=1.0)
