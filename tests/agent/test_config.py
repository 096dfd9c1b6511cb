"""The agent's settings from the environment (services/agent/config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tickwork.services.agent.config import AgentSettings
from tickwork.services.agent.log_limits import LogLimits
from tickwork.services.agent.operators.base import ResourceLimits
from tickwork.shared.errors import InvalidConfig

BASE = {"TICKWORK_AGENT_WORK_DIR": "/tmp/agent"}


class TestAgentSettings:
    def test_defaults_are_those_the_command_line_documents(self) -> None:
        settings = AgentSettings.from_environment(BASE)
        assert settings.queues == ("default",)
        assert (settings.grace_seconds, settings.lease_ttl_seconds) == (30.0, 30.0)
        assert settings.heartbeat_seconds == 10.0
        assert settings.work_dir == Path("/tmp/agent")
        assert settings.limits == ResourceLimits()
        assert settings.log_limits == LogLimits()

    def test_queues_are_comma_separated_names(self) -> None:
        env = {**BASE, "TICKWORK_AGENT_QUEUES": "gpu, io"}
        assert AgentSettings.from_environment(env).queues == ("gpu", "io")
        with pytest.raises(InvalidConfig, match="TICKWORK_AGENT_QUEUES"):
            AgentSettings.from_environment({**BASE, "TICKWORK_AGENT_QUEUES": "a b"})

    def test_a_heartbeat_not_shorter_than_the_lease_is_refused(self) -> None:
        env = {**BASE, "TICKWORK_HEARTBEAT_SECONDS": "30"}
        with pytest.raises(InvalidConfig, match="TICKWORK_HEARTBEAT_SECONDS"):
            AgentSettings.from_environment(env)

    def test_a_bad_limit_names_its_variable(self) -> None:
        with pytest.raises(InvalidConfig, match="TICKWORK_TASK_MAX_MEMORY_MB"):
            AgentSettings.from_environment({**BASE, "TICKWORK_TASK_MAX_MEMORY_MB": "-1"})
