"""The closed sets of a schedule's policies and records, stored as their string values."""

from __future__ import annotations

from enum import StrEnum


class Catchup(StrEnum):
    """``catchup:``: which session times missed while the scheduler was away still run."""

    ALL = "all"  # every one (up to max_catchup, inside catchup_window)
    LATEST = "latest"  # only the newest; the others are recorded as missed
    NONE = "none"  # none: only times due now run


class Overlap(StrEnum):
    """``overlap:``: what a session time due while earlier sessions still run does."""

    ALLOW = "allow"  # starts, up to max_active sessions at once (the rest wait)
    SKIP = "skip"  # is recorded as missed while any session is active or waiting
    BUFFER_ONE = "buffer_one"  # waits for the running one; a second one is missed


class MissedReason(StrEnum):
    """Why session times were recorded as missed (a backfill can still run them)."""

    CATCHUP = "catchup"  # the catch-up policy dropped them
    OVERLAP = "overlap"  # the overlap policy skipped them
    SKIPPED = "skipped"  # a user skipped them ahead of time
    EDITED = "edited"  # the schedule changed while they were due


class InactiveReason(StrEnum):
    """Why a schedule was inactive for a span of time (runs due in it never happen)."""

    PAUSED = "paused"
    REMOVED = "removed"
