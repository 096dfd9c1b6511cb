"""REST API latency while slow clients and log followers hold its connections.

A throwaway database on TICKWORK_BENCH_DATABASE_URL (default: the local server) gets one
pushed project and ``--sessions`` finished sessions. A real ``tickwork api`` (its default
serving model, ``--workers`` processes) serves it, rate limit off; one attempt is started
and never run, so its log follow stream stays open. Then, at once (bench/_slow_clients.py):

- ``--connections`` silent clients, a third each idle, half a header block, and a whole
  header block with no body; each reconnects as soon as the server drops it;
- ``--follows`` follow streams (``GET /api/logs/<attempt>/follow``) on that attempt.

With those held, an open-loop generator (bench/_api_load.py) sends ``GET /healthz`` and
then ``GET /api/sessions?limit=100``, each at ``--rate`` per second for ``--duration``
seconds. Latency runs from each request's scheduled send time to the end of its answer;
a request not answered within 10 s is an error. The last stdout line is one JSON object of
figures; the database is dropped and the server stopped however the run ends.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _api_load import LoadResult, Request, run_fixed_rate
from _api_seed import FIRST_STARTED_TIME, PROJECT, WORKFLOW, seed
from _slow_clients import SILENT_KINDS, SlowClients, split_connections
from _stores import percentile, throwaway_database
from api import TOKEN, BenchFailed, api_server, main_guarded

from tickwork.shared.store.engine import create_store_engine

TARGET_P99_MS = 1000.0
SETTLE_SECONDS = 5.0  # after opening the connections, before measuring
MEASURE_CONNECTIONS = 8  # the generator's own connections

log = logging.getLogger("bench.serving")


def start_attempt(base_url: str) -> int:
    """An attempt nothing will run: its follow stream stays open until ``max_seconds``."""
    body = {
        "project": PROJECT,
        "workflow": WORKFLOW,
        "session_time": FIRST_STARTED_TIME.isoformat(),
    }
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = httpx.post(f"{base_url}/api/attempts", json=body, headers=headers, timeout=30)
    if response.status_code != 201:
        raise BenchFailed(f"POST /api/attempts answered {response.status_code}: {response.text}")
    return int(response.json()["id"])


def measure(name: str, base_url: str, path: str, args: argparse.Namespace) -> LoadResult:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    result = run_fixed_rate(
        base_url,
        headers,
        lambda _: Request("GET", path),
        rate=args.rate,
        duration_s=args.duration,
        expected_status=200,
        connections=MEASURE_CONNECTIONS,
        grace_s=15.0,
    )
    timed = result.latencies_s + result.unanswered_s
    log.info(
        "measured kind=%s answered=%d errors=%s unanswered=%d p50_ms=%.1f p99_ms=%.1f",
        name,
        len(result.latencies_s),
        json.dumps(result.errors),
        len(result.unanswered_s),
        1000 * percentile(timed or [0.0], 0.5),
        1000 * percentile(timed or [0.0], 0.99),
    )
    return result


def run_all(args: argparse.Namespace, server_url: str, work_dir: Path) -> dict[str, Any]:
    with throwaway_database(server_url) as url:
        engine = create_store_engine(url)
        seed(engine, args.sessions)
        engine.dispose()
        with (
            (work_dir / "api.log").open("wb") as server_log,
            api_server(url, args.workers, server_log) as base_url,
        ):
            attempt_id = start_attempt(base_url)
            host, port = base_url.removeprefix("http://").split(":")
            counts = split_connections(args.connections) | {"follow": args.follows}
            follow_path = f"/api/logs/{attempt_id}/follow"
            clients = SlowClients(host, int(port), TOKEN, follow_path, counts)
            load_average = os.getloadavg()[0]
            clients.start()
            try:
                time.sleep(SETTLE_SECONDS)
                follows_open = clients.held["follow"].open_now
                results = {
                    "healthz": measure("healthz", base_url, "/healthz", args),
                    "list": measure("list", base_url, "/api/sessions?limit=100", args),
                }
                follows_open = min(follows_open, clients.held["follow"].open_now)
            finally:
                clients.stop()
            return figures(results, clients, follows_open, args, load_average)


def figures(
    results: dict[str, LoadResult],
    clients: SlowClients,
    follows_open: int,
    args: argparse.Namespace,
    load_average: float,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, result in results.items():
        timed = result.latencies_s + result.unanswered_s or [float("inf")]
        out[f"{name}_p50_ms"] = round(1000 * percentile(timed, 0.5), 1)
        out[f"{name}_p99_ms"] = round(1000 * percentile(timed, 0.99), 1)
        out[f"{name}_max_ms"] = round(1000 * percentile(timed, 1.0), 1)
        out[f"{name}_errors"] = result.error_count + len(result.unanswered_s)
    held = [s for kind in SILENT_KINDS for s in clients.held[kind].held_seconds]
    out |= {
        "follows_open": follows_open,
        "silent_connections_dropped": len(held),
        "silent_held_p50_s": round(percentile(held, 0.5), 2) if held else None,
        "silent_held_max_s": round(max(held), 2) if held else None,
        "connections": args.connections,
        "follows": args.follows,
        "workers": args.workers,
        "rate": args.rate,
        "duration_s": args.duration,
        "load_average_1m": round(load_average, 2),
    }
    out["meets_targets"] = (
        all(out[f"{name}_p99_ms"] < TARGET_P99_MS for name in results)
        and not any(out[f"{name}_errors"] for name in results)
        and follows_open >= args.follows
    )
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000, help="silent connections")
    parser.add_argument("--follows", type=int, default=200, help="log follow streams")
    parser.add_argument("--rate", type=float, default=5.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per kind")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions to seed")
    parser.add_argument("--workers", type=int, default=2, help="API worker processes")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    return parser.parse_args()


def main() -> int:
    return main_guarded(parse_args(), run_all, "serving")


if __name__ == "__main__":
    sys.exit(main())
