"""How attempts are spread over the partitions that executors share out among them."""

from __future__ import annotations

DEFAULT_PARTITION_COUNT = 16
"""Partitions attempts are spread over unless configured (``TICKWORK_EXECUTOR_PARTITIONS``);
every executor of a deployment must use the same number."""
MAX_PARTITION_COUNT = 1024
"""The most partitions a deployment may configure."""


def partition_of(attempt_id: int, partition_count: int) -> int:
    """The partition an attempt belongs to: ``attempt_id % partition_count``."""
    return int(attempt_id) % partition_count
