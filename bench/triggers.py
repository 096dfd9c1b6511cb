"""Trigger latency: from an upstream attempt's success to the start of the workflow its
``trigger: after:`` starts, beside a start by hand measured the same way.

One ``tickwork executor`` and two ``tickwork agent --concurrency 1`` processes on a
throwaway PostgreSQL database and a Redis key prefix. The project has ``load`` (one
``echo>``), ``report`` (one ``echo>``, ``trigger: after: load``) and ``manual`` (the same
as ``report``, no trigger). Sequentially, N times each:

- **trigger**: a session of ``load`` is started; the latency is from its attempt's
  ``finished_at`` (the pass that applied its result, and in the same transaction started
  ``report``'s session) to the ``started_at`` of ``report``'s task (the pass that queued
  it for an agent);
- **manual** (the floor): a session of ``manual`` is started by a transaction like
  ``POST /api/attempts``'s; the latency is from its attempt's ``created_at`` (the instant
  that transaction stamps, as the upstream's pass stamps ``finished_at``) to its task's
  ``started_at``.

Both are the time an executor takes to notice a new attempt, materialize it and queue its
first task: the target is trigger p50 within 1.5x of the manual p50 of the same run.
Progress goes to stderr; the last stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa
from _services import (
    redis_prefix,
    run_guarded,
    running,
    start_executors_and_agents,
    wait_until,
)
from _stores import percentile, throwaway_database
from rich.console import Console

from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.archive import pack_project, read_project_archive
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.projects import push_revision
from tickwork.shared.store.starts import start_attempt
from tickwork.shared.store.tables import attempts, sessions, tasks

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
RUNS = 100
AGENTS = 2
TARGET_RATIO = 1.5
FILES = {
    "load.dig": "+load:\n  echo>: loaded\n",
    "report.dig": "trigger:\n  after: load\n+report:\n  echo>: reported\n",
    "manual.dig": "+manual:\n  echo>: reported\n",
}


def first_task_started(engine: sa.Engine, session_id: int) -> datetime | None:
    query = (
        sa.select(sa.func.min(tasks.c.started_at))
        .join(attempts, attempts.c.id == tasks.c.attempt_id)
        .where(attempts.c.session_id == session_id, tasks.c.is_group.is_(False))
    )
    with engine.connect() as conn:
        found: datetime | None = conn.execute(query).scalar()
    return found


def start(engine: sa.Engine, workflow: str) -> tuple[int, int, datetime]:
    """A session of ``workflow`` started now; (attempt id, session id, its created_at)."""
    now = utc_now()
    with engine.begin() as conn:
        result = start_attempt(
            conn,
            project="bench",
            workflow=workflow,
            session_time=now,
            params={},
            idempotency_key=None,
            now=now,
        )
    return result.attempt_id, result.session_id, now


def settle(what: str, check: Callable[[], object], services: list) -> object:  # type: ignore[type-arg]
    box: list[object] = []

    def done() -> bool:
        found = check()
        if found:
            box.append(found)
        return bool(found)

    wait_until(done, 60, what, services, interval_seconds=0.005)
    return box[0]


def run(server_url: str, redis_url: str, runs: int, err: Console) -> dict[str, object]:
    with ExitStack() as stack:
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url))
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tickwork-bench-")))
        engine = open_migrated_store(url)
        stack.callback(engine.dispose)
        source = work_dir / "project"
        source.mkdir()
        for name, text in FILES.items():
            (source / name).write_text(text)
        with engine.begin() as conn:
            push_revision(
                conn,
                project_name="bench",
                revision_name="v1",
                archive=read_project_archive(pack_project(source)),
                now=utc_now(),
            )
        services = stack.enter_context(running([]))
        start_executors_and_agents(services, url, redis_url, prefix, work_dir, agents=AGENTS)
        # warm up: a manual start runs to its end
        _, warm, _ = start(engine, "manual")
        settle("the warm-up run", lambda: first_task_started(engine, warm), services)
        time.sleep(1.0)

        triggered: list[float] = []
        manual: list[float] = []
        for index in range(runs):
            attempt_id, _, _ = start(engine, "load")
            finished = settle(
                "the upstream's success",
                lambda a=attempt_id: _finished(engine, a),  # type: ignore[misc]
                services,
            )
            assert isinstance(finished, datetime)
            report = settle(
                "the triggered session",
                lambda a=attempt_id: _triggered_session(engine, a),  # type: ignore[misc]
                services,
            )
            assert isinstance(report, int)
            began = settle(
                "the triggered task's start",
                lambda s=report: first_task_started(engine, s),  # type: ignore[misc]
                services,
            )
            assert isinstance(began, datetime)
            triggered.append((began - finished).total_seconds() * 1000)
            _, session_id, created = start(engine, "manual")
            began = settle(
                "the manual task's start",
                lambda s=session_id: first_task_started(engine, s),  # type: ignore[misc]
                services,
            )
            assert isinstance(began, datetime)
            manual.append((began - created).total_seconds() * 1000)
            if (index + 1) % 20 == 0:
                err.print(f"{index + 1}/{runs} runs", highlight=False)
    trigger_p50 = percentile(triggered, 0.5)
    manual_p50 = percentile(manual, 0.5)
    ratio = trigger_p50 / manual_p50 if manual_p50 > 0 else None
    return {
        "runs": runs,
        "trigger_p50_ms": round(trigger_p50, 1),
        "trigger_p99_ms": round(percentile(triggered, 0.99), 1),
        "manual_p50_ms": round(manual_p50, 1),
        "manual_p99_ms": round(percentile(manual, 0.99), 1),
        "trigger_vs_manual_p50": None if ratio is None else round(ratio, 2),
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio is not None and ratio <= TARGET_RATIO,
    }


def _finished(engine: sa.Engine, attempt_id: int) -> datetime | None:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(attempts.c.state, attempts.c.finished_at).where(attempts.c.id == attempt_id)
        ).one()
    if row.state not in ("success", "error"):
        return None
    if row.state == "error":
        raise RuntimeError(f"the upstream attempt {attempt_id} failed")
    found: datetime = row.finished_at
    return found


def _triggered_session(engine: sa.Engine, upstream_attempt: int) -> int | None:
    """The session of ``report`` the upstream attempt's success started."""
    with engine.connect() as conn:
        time_of = (
            sa.select(sessions.c.session_time)
            .join(attempts, attempts.c.session_id == sessions.c.id)
            .where(attempts.c.id == upstream_attempt)
            .scalar_subquery()
        )
        found = conn.execute(
            sa.select(sessions.c.id).where(
                sessions.c.workflow_name == "report", sessions.c.session_time == time_of
            )
        ).scalar()
    return None if found is None else int(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs of each (default {RUNS})")
    args = parser.parse_args()
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    result = run_guarded(
        lambda: run(server_url, redis_url, max(1, args.runs), err), server_url, redis_url, err
    )
    if isinstance(result, int):
        return result
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
