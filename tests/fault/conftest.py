"""The ``cluster`` fixture: a :class:`~tests.fault._cluster.Cluster` on the test's servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault._cluster import Cluster


@pytest.fixture
def cluster(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> Iterator[Cluster]:
    """No process started yet; every process it starts is killed however the test ends."""
    with Cluster(postgres_url, redis_url, redis_prefix, tmp_path) as started:
        yield started
