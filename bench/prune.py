"""Retention's throughput: rows removed per second on PostgreSQL from a seeded history.

A throwaway database on TICKWORK_BENCH_DATABASE_URL (default: the local server) gets
``--sessions`` finished sessions 100 to 200 days old, each with an attempt, 8 tasks, 4
dependencies, 4 logs and 2 log chunks (set-based inserts, as the retention specs seed
them), then one prune with the scheduler's batches (``--pause`` seconds between two).
Progress goes to stderr; the last stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench._stores import throwaway_database
from tests.store import test_retention_scale as scale
from tests.support.history_seed import DAY, NOW, add_project, add_revision
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.retention import RetentionPolicy, prune_history
from tickwork.shared.store.retention_batches import BatchLimits

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50_000)
    parser.add_argument("--pause", type=float, default=0.0)
    args = parser.parse_args()
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    with throwaway_database(server_url) as url:
        engine = create_store_engine(url)
        scale.OLD_SESSIONS = args.sessions
        started = time.monotonic()
        with engine.begin() as conn:
            project_id = add_project(conn)
            scale.seed_old_history(conn, project_id, add_revision(conn, project_id, "r1"))
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
        print(f"seeded in {time.monotonic() - started:.1f}s", file=sys.stderr)
        policy = RetentionPolicy(90 * DAY, 90 * DAY, 10)
        started = time.monotonic()
        result = prune_history(engine, policy, NOW, limits=BatchLimits(pause_seconds=args.pause))
        seconds = time.monotonic() - started
        engine.dispose()
    figures = {
        "sessions": args.sessions,
        "rows_removed": result.total,
        "batches": result.batches,
        "seconds": round(seconds, 2),
        "rows_removed_per_second": round(result.total / seconds),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
