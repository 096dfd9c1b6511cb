"""The lists' filters, live parts and search on a 100,000-session store: server time per
request, p50 and p99.

The store is bench/ui.py's (bench/_ui_seed.py: four projects of five workflows sharing
``--sessions`` sessions, and one ``warehouse`` project with a single session): each kind
of filter is timed where it matches often (a quarter of the sessions), rarely (one
session: a naive ``LIKE`` would walk every row) and never. The API application (auth
off) answers ``--requests`` requests of each path in this process through Flask's test
client, after three not counted. The last stdout line is one JSON object of figures, by
path; ``meets_targets`` when every p99 is under 100 ms, as bench/ui.py holds pages.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from _stores import percentile, throwaway_database
from _ui_seed import seed
from api import main_guarded
from ui import time_page

from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.shared.store.engine import create_store_engine

TARGET_P99_MS = 100.0
PATHS = {
    "sessions_project_often": "/ui/sessions?project_contains=ALE",
    "sessions_workflow_often": "/ui/sessions?workflow_contains=PUB",
    "sessions_workflow_rarely": "/ui/sessions?workflow_contains=nightly",
    "sessions_project_never": "/ui/sessions?project_contains=zzz",
    "sessions_project_and_state": "/ui/sessions?project_contains=ale&state=error",
    "attempts_workflow_rarely": "/ui/attempts?workflow_contains=nightly",
    "attempts_project_exact_rarely": "/ui/attempts?project=warehouse",
    "attempts_project_often": "/ui/attempts?project_contains=ale",
    "attempts_two_names": "/ui/attempts?project_contains=fin&workflow_contains=exp",
    "sessions_live": "/ui/sessions/live?project_contains=ALE",
    "attempts_live": "/ui/attempts/live",
    "overview_live": "/ui/overview/live",
    "search_names": "/ui/search?q=ing",
    "search_id": "/ui/search?q=5000",
    "projects_named": "/ui/projects?q=a",
    "api_sessions_workflow_rarely": "/api/sessions?workflow_contains=nightly",
    "api_attempts_project_often": "/api/attempts?project_contains=ale",
}

log = logging.getLogger("bench.ui_lists")


def run_all(args: argparse.Namespace, server_url: str, work_dir: Path) -> dict[str, Any]:
    """Seed, then time every path; their figures."""
    with throwaway_database(server_url) as url:
        engine = create_store_engine(url)
        seeded = seed(engine, args.sessions)
        log.info("seeded sessions=%d", seeded.sessions)
        config = ApiConfig(database_url=url, auth_enabled=False, rate_limit_per_second=0)
        client = create_app(config, engine).test_client()
        try:
            timings = {
                name: time_page(client, path, args.requests, (200, 303))
                for name, path in PATHS.items()
            }
        finally:
            engine.dispose()
    out: dict[str, Any] = {
        f"{name}_p99_ms": round(percentile(values, 0.99), 2) for name, values in timings.items()
    }
    out |= {f"{name}_p50_ms": round(percentile(values, 0.5), 2) for name, values in timings.items()}
    out["sessions_seeded"] = seeded.sessions
    out["meets_targets"] = all(
        percentile(values, 0.99) < TARGET_P99_MS for values in timings.values()
    )
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000, help="sessions to seed")
    parser.add_argument("--requests", type=int, default=50, help="timed requests per path")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    if args.sessions < 1000 or args.requests < 1:
        parser.error("--sessions must be at least 1000; --requests at least 1")
    return args


def main() -> int:
    return main_guarded(parse_args(), run_all, "ui_lists")


if __name__ == "__main__":
    sys.exit(main())
