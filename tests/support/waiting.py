"""Bounded waits for tests: poll a condition, fail naming it when time runs out."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: str, check: Callable[[], bool], timeout_seconds: float, poll: float = 0.02
) -> None:
    """Poll ``check()`` until it is true; fail naming ``condition`` after ``timeout_seconds``."""
    deadline = time.monotonic() + timeout_seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout_seconds}s: {condition}"
        time.sleep(poll)
