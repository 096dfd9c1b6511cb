"""The schedules bench/scheduler.py loads: 100,000 of mixed forms and zones, bulk-inserted.

Every spec goes through the real validator (``parse_schedule``) and is stored as the
workflow parser would store it; only the insertion is bulk (one multi-row INSERT per
table) instead of ``upsert_schedule`` once per workflow, which would take minutes. Each
schedule gets the checkpoint a running scheduler would have left: the last session time
whose run time has passed, and the next run time after it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, update

from tickwork.shared.domain.schedule import ScheduleSpec, parse_schedule
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store.projects import config_digest
from tickwork.shared.store.sql import insert_rows
from tickwork.shared.store.tables import (
    projects,
    revisions,
    schedules,
    workflow_configs,
    workflow_definitions,
)

PROJECTS = 100
MINUTELY_PREFIX = "minutely-"

# The every-minute schedules: each (form, zone) pair gets an equal share.
EVERY_MINUTE_FORMS: tuple[tuple[dict[str, Any], tuple[str, ...]], ...] = (
    ({"cron>": "* * * * *"}, ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata")),
    ({"minutes_interval>": 1}, ("UTC", "Asia/Tokyo", "America/Los_Angeles")),
    ({"cron>": "@every 1m"}, ("UTC", "Australia/Sydney", "Europe/London")),
)
OTHER_ZONES = (
    "UTC",
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Australia/Sydney",
)
CRON_PATTERNS = (
    "{m} {h} * * *",
    "{m} {h} * * 1-5",
    "{m} */{step} * * *",
    "{m} {h} 1,15 * *",
    "{m} {h} * * SUN",
)
EVERY_PERIODS_SECONDS = (90, 300, 900, 1800, 3600, 5400, 7200, 21600)
WEEKDAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")


@dataclass(frozen=True)
class PlannedSchedule:
    """One schedule to insert."""

    workflow_name: str
    timezone: str
    spec: ScheduleSpec

    @property
    def minutely(self) -> bool:
        return self.workflow_name.startswith(MINUTELY_PREFIX)


def _clock(rng: random.Random, hour_step: int = 1) -> str:
    # Seconds are never 0, so these run times never fall on a minute boundary.
    hour, minute, second = rng.randrange(0, 24, hour_step), rng.choice((0, 30)), rng.choice((7, 43))
    return f"{hour:02d}:{minute:02d}:{second:02d}"


def _hourly(rng: random.Random) -> dict[str, Any]:
    return {"hourly>": f"{rng.randrange(0, 60, 5):02d}:{rng.choice((7, 29, 43)):02d}"}


def _every(rng: random.Random) -> dict[str, Any]:
    period = rng.choice(EVERY_PERIODS_SECONDS)
    return {"cron>": f"@every {period}s", "offset": f"{rng.randrange(7, min(period, 300), 61)}s"}


def _cron(rng: random.Random) -> dict[str, Any]:
    pattern = rng.choice(CRON_PATTERNS)
    minute, hour, step = rng.randrange(0, 60, 10), rng.randrange(0, 24, 3), rng.randint(2, 6)
    return {"cron>": pattern.format(m=minute, h=hour, step=step)}


# How the 90,000 other schedules are spread over the forms (weights sum to 1). Times come
# from coarse grids: a few thousand distinct specs, each validated and stepped once.
OTHER_FORMS: tuple[tuple[float, Callable[[random.Random], dict[str, Any]]], ...] = (
    (0.28, lambda rng: {"daily>": _clock(rng)}),
    (0.22, _hourly),
    (0.11, lambda rng: {"weekly>": f"{rng.choice(WEEKDAYS)},{_clock(rng, 3)}"}),
    (0.06, lambda rng: {"monthly>": f"{rng.choice((1, 10, 15, 28))},{_clock(rng, 3)}"}),
    (0.22, _cron),
    (0.11, _every),
)


@cache
def _parsed(raw: tuple[tuple[str, Any], ...], zone: str) -> ScheduleSpec:
    return parse_schedule(dict(raw), zone)


def plan_fleet(total: int, minutely: int, seed: int = 7) -> list[PlannedSchedule]:
    """``minutely`` every-minute schedules and ``total - minutely`` others, reproducibly."""
    rng = random.Random(seed)
    pairs = [(form, zone) for form, zones in EVERY_MINUTE_FORMS for zone in zones]
    fleet = []
    for i in range(minutely):
        form, zone = pairs[i * len(pairs) // minutely]
        spec = _parsed(tuple(form.items()), zone)
        fleet.append(PlannedSchedule(f"{MINUTELY_PREFIX}{i:05d}", zone, spec))
    weights = [weight for weight, _ in OTHER_FORMS]
    for i in range(total - minutely):
        (_, make), zone = rng.choices(OTHER_FORMS, weights)[0], rng.choice(OTHER_ZONES)
        spec = _parsed(tuple(make(rng).items()), zone)
        fleet.append(PlannedSchedule(f"wf-{i:05d}", zone, spec))
    return fleet


def load_fleet(conn: Connection, fleet: list[PlannedSchedule], now: datetime) -> None:
    """Insert projects, revisions, workflow definitions and schedules, a table at a time.

    The every-minute schedules are stored without a due time (they never fire) until
    :func:`arm_minutely` points them at one minute boundary.
    """
    names = [f"bench-{p:03d}" for p in range(PROJECTS)]
    rows = [{"name": name, "source_dir": None, "created_at": now} for name in names]
    # RETURNING order is not guaranteed: ids are matched by name.
    returned = insert_rows(conn, projects, rows, (projects.c.name, projects.c.id))
    project_ids = [int(i) for _, i in sorted(returned)]
    rows = [
        {"project_id": p, "name": "r1", "default_params": {}, "created_at": now}
        for p in project_ids
    ]
    revision_of = dict(insert_rows(conn, revisions, rows, (revisions.c.project_id, revisions.c.id)))
    revision_ids = [int(revision_of[p]) for p in project_ids]
    timing = _Timing(now)
    definition_ids = _insert_definitions(conn, fleet, revision_ids, timing)
    rows = [
        {
            "project_id": project_ids[i % PROJECTS],
            "workflow_name": item.workflow_name,
            "workflow_definition_id": definition_ids[i],
            "spec": timing.config(item.spec),
            "timezone": item.timezone,
            "created_at": now,
            "updated_at": now,
            **timing.progress(item),
        }
        for i, item in enumerate(fleet)
    ]
    insert_rows(conn, schedules, rows, (schedules.c.id,))


def _insert_definitions(
    conn: Connection, fleet: list[PlannedSchedule], revision_ids: list[int], timing: _Timing
) -> list[int]:
    """A workflow definition per schedule (one echo> task); the definition ids, in order.

    Workflows with the same schedule share one stored config, as identical workflows do
    (the scheduler never reads configs; 100,000 distinct ones would only slow the set-up).
    """
    root = parse_workflow_text("+a:\n  echo>: hi\n", "bench.dig", Path("/tmp")).root.to_config()
    configs = {
        item.spec: {
            "name": "bench",
            "timezone": item.timezone,
            "schedule": timing.config(item.spec),
        }
        | {"root": root}
        for item in fleet
    }
    rows = [{"digest": config_digest(c), "config": c} for c in configs.values()]
    returned = (workflow_configs.c.digest, workflow_configs.c.id)
    config_by_digest = dict(insert_rows(conn, workflow_configs, rows, returned))
    config_id = {
        spec: config_by_digest[row["digest"]] for spec, row in zip(configs, rows, strict=True)
    }
    rows = [
        {
            "revision_id": revision_ids[i % PROJECTS],
            "name": item.workflow_name,
            "config_id": config_id[item.spec],
        }
        for i, item in enumerate(fleet)
    ]
    returned = (workflow_definitions.c.name, workflow_definitions.c.id)
    definition_id = dict(insert_rows(conn, workflow_definitions, rows, returned))
    return [int(definition_id[item.workflow_name]) for item in fleet]


class _Timing:
    """Each distinct spec's stored form and where a running scheduler would have left it."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._configs: dict[ScheduleSpec, dict[str, Any]] = {}
        self._progress: dict[ScheduleSpec, dict[str, Any]] = {}

    def config(self, spec: ScheduleSpec) -> dict[str, Any]:
        if spec not in self._configs:
            self._configs[spec] = spec.to_config()
        return self._configs[spec]

    def progress(self, item: PlannedSchedule) -> dict[str, Any]:
        """The checkpoint (last time whose run time has passed) and the next run time."""
        if item.minutely:
            return {"last_session_time": None, "next_schedule_time": None, "next_run_time": None}
        spec = item.spec
        if spec not in self._progress:
            checkpoint = spec.last_session_time(self.now - timedelta(seconds=spec.delay_seconds))
            following = spec.next_session_time(checkpoint or self.now)
            self._progress[spec] = {
                "last_session_time": checkpoint,
                "next_schedule_time": following,
                "next_run_time": None if following is None else spec.run_time(following),
            }
        return self._progress[spec]


def arm_minutely(conn: Connection, boundary: datetime) -> int:
    """Make every every-minute schedule due at ``boundary``, its previous minute handled."""
    result = conn.execute(
        update(schedules)
        .where(schedules.c.workflow_name.startswith(MINUTELY_PREFIX))
        .values(
            last_session_time=boundary - timedelta(minutes=1),
            next_schedule_time=boundary,
            next_run_time=boundary,
        )
    )
    return int(result.rowcount)
