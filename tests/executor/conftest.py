"""The ``run`` fixture: a :class:`Scenario` on a fresh store of each backend in turn."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.executor.scenario import Scenario


@pytest.fixture
def run(engine: Engine, tmp_path: Path) -> Scenario:
    return Scenario(engine, tmp_path)
