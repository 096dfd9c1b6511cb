"""REST API latency under a fixed request rate, with 100,000 sessions in PostgreSQL.

A throwaway database on TICKWORK_BENCH_DATABASE_URL (default: the local server) gets one
pushed project and ``--sessions`` finished sessions, one attempt each, inserted in bulk.
A real ``tickwork api --workers 4`` (gunicorn) serves it, rate limit off, and an open-loop
generator (bench/_api_load.py) sends each kind of request at ``--rate`` per second for
``--duration`` seconds, one kind after another, after a short warm-up of each:

- ``list``: ``GET /api/sessions?limit=100``, the newest page;
- ``deep_page``: the same with a cursor about 90% of the sessions deep, found beforehand
  by following ``next_cursor`` (keyset paging: it should cost what the first page does);
- ``start``: ``POST /api/attempts``, each with a new session time, so each makes a session
  (and its audit row, in the same transaction);
- ``list_store_token``: ``list`` again, sent with a named token of the store (one of
  ``--store-tokens``), which each request looks up by its digest, against ``list``'s
  environment token compared in memory;
- ``list_scoped_token``: ``list`` again, with a store token limited to the project's name
  by a glob, among ``--other-projects`` projects it does not cover: each request also
  reads which projects the token covers and keeps only their sessions.

Latency runs from each request's scheduled send time to the end of its answer. Progress
goes to stderr (JSON lines when it is not a terminal); the last stdout line is one JSON
object of figures. The database is dropped and the server stopped however the run ends.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import IO, Any
from urllib.parse import urlencode

import httpx
from _api_load import LoadResult, Request, run_fixed_rate
from _api_seed import FIRST_STARTED_TIME, PROJECT, WORKFLOW, seed
from _stores import percentile, throwaway_database
from sqlalchemy import Engine

from tickwork.shared.clock import utc_now
from tickwork.shared.logging import configure_logging
from tickwork.shared.store.api_tokens import create_token
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.projects import ensure_project

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TOKEN = "bench-admin-token"
DEEP_FRACTION = 0.9  # how deep the deep page is, as a fraction of the sessions
PAGE_LIMIT = 100
CURSOR_WALK_LIMIT = 1000  # page size while walking to the deep cursor (the largest allowed)
START_TIMEOUT_SECONDS = 60.0
# Deep page p50 at most this many times the first page's; see bench/README.md.
TARGET_DEEP_TO_FIRST_P50 = 1.5
# The server's CPU per list request (a page of 100), at most; see bench/README.md.
TARGET_LIST_SERVER_CPU_MS = 3.0
# A token limited to projects: its list's server CPU at most this times the environment
# token's, in the same run; see bench/README.md.
TARGET_SCOPED_TO_ENV_CPU = 1.10

log = logging.getLogger("bench.api")


class BenchFailed(Exception):
    """The server did not start, answered wrongly, or a request kind failed outright."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def api_server(
    database_url: str,
    workers: int,
    server_log: IO[bytes],
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """``tickwork api`` in its own process group; yields its base URL once /readyz is 200."""
    with served_api(database_url, workers, server_log, extra_env) as (base_url, _group):
        yield base_url


@contextmanager
def served_api(
    database_url: str,
    workers: int,
    server_log: IO[bytes],
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, int]]:
    """``tickwork api`` in its own process group; yields its base URL and the group's id
    (the gunicorn master's pid) once /readyz is 200."""
    port = free_port()
    command = [
        str(Path(sys.executable).with_name("tickwork")),
        "api",
        "--workers",
        str(workers),
        "--bind",
        f"127.0.0.1:{port}",
    ]
    env = {
        **os.environ,
        "TICKWORK_DATABASE_URL": database_url,
        "TICKWORK_API_TOKENS": f"admin:{TOKEN}",
        "TICKWORK_API_RATE_LIMIT": "0",
        **(extra_env or {}),
    }
    process = subprocess.Popen(
        command, env=env, stdout=server_log, stderr=server_log, start_new_session=True
    )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_until_ready(process, base_url)
        yield base_url, process.pid
    finally:
        stop_process_group(process)


def wait_until_ready(process: subprocess.Popen[bytes], base_url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchFailed(f"tickwork api exited with status {process.returncode}")
        try:
            if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise BenchFailed(f"tickwork api was not ready within {START_TIMEOUT_SECONDS:.0f} s")


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (gunicorn and its workers), SIGKILL after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def group_cpu_seconds(group: int) -> float:
    """User and system CPU seconds of every process in a process group so far, with the
    children each has waited for (a gunicorn worker that exited counts in its master).

    A process that ends is either waited for by a member, and so still counted, or leaves
    the group's total; the gunicorn master waits for its workers."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # the process ended while the table was read
        # fields[0] is the state (field 3 of proc_pid_stat(5)); pgrp is field 5,
        # utime, stime, cutime and cstime fields 14 to 17.
        if int(fields[2]) == group:
            ticks += sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def find_deep_cursor(base_url: str, headers: dict[str, str], depth: int) -> tuple[str, int]:
    """Follow ``next_cursor`` until at least ``depth`` sessions are behind; that cursor and
    how many sessions precede its page."""
    seen, cursor = 0, ""
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        while seen < depth:
            params: dict[str, Any] = {"limit": min(CURSOR_WALK_LIMIT, depth - seen)}
            if cursor:
                params["cursor"] = cursor
            response = client.get("/api/sessions", params=params)
            if response.status_code != 200:
                raise BenchFailed(f"GET /api/sessions answered {response.status_code}")
            page = response.json()
            seen += len(page["items"])
            if page["next_cursor"] is None:
                raise BenchFailed(f"the session list ended after {seen} sessions")
            cursor = str(page["next_cursor"])
    return cursor, seen


def check_page(base_url: str, headers: dict[str, str], path: str) -> None:
    """One request of a kind before its run: a wrong answer stops the benchmark early."""
    response = httpx.get(f"{base_url}{path}", headers=headers, timeout=30)
    if response.status_code != 200 or len(response.json()["items"]) != PAGE_LIMIT:
        raise BenchFailed(f"GET {path} answered {response.status_code}: {response.text[:300]}")


class StartRequests:
    """``POST /api/attempts`` bodies, each with a session time no request used before."""

    def __init__(self) -> None:
        self.sent = 0

    def __call__(self, _index: int) -> Request:
        session_time = FIRST_STARTED_TIME + timedelta(seconds=self.sent)
        self.sent += 1
        body = {"project": PROJECT, "workflow": WORKFLOW, "session_time": session_time.isoformat()}
        return Request("POST", "/api/attempts", body)


@dataclass
class Measured:
    """One request kind's timed run and the server's CPU seconds over it."""

    load: LoadResult
    server_cpu_s: float

    @property
    def served(self) -> int:
        """Requests the server answered: good answers and answers with another status."""
        return len(self.load.latencies_s) + self.load.error_count


def measure(
    name: str,
    server: tuple[str, int],
    make_request: Callable[[int], Request],
    expected_status: int,
    args: argparse.Namespace,
    token: str = TOKEN,
) -> Measured:
    """A warm-up (not counted), then the timed run of one request kind, with the CPU the
    server's process group spent during that run."""
    base_url, group = server
    headers = {"Authorization": f"Bearer {token}"}
    options = {"rate": args.rate, "expected_status": expected_status}
    run_fixed_rate(base_url, headers, make_request, duration_s=args.warmup, **options)
    cpu_before = group_cpu_seconds(group)
    result = run_fixed_rate(base_url, headers, make_request, duration_s=args.duration, **options)
    measured = Measured(result, group_cpu_seconds(group) - cpu_before)
    timed = result.latencies_s + result.unanswered_s
    log.info(
        "measured kind=%s answered=%d errors=%d error_kinds=%s unanswered=%d p50_ms=%.2f "
        "p99_ms=%.2f achieved_rps=%.1f server_cpu_s=%.2f",
        name,
        len(result.latencies_s),
        result.error_count,
        json.dumps(result.errors),
        len(result.unanswered_s),
        1000 * percentile(timed or [0.0], 0.5),
        1000 * percentile(timed or [0.0], 0.99),
        result.achieved_rps,
        measured.server_cpu_s,
    )
    if not result.latencies_s:
        raise BenchFailed(f"every {name} request failed: {result.errors}")
    return measured


def seed_tokens(engine: Engine, count: int, other_projects: int) -> tuple[str, str]:
    """``count`` operate tokens in the store, one more limited to the seeded project, and
    ``other_projects`` projects that token does not cover; the secret of one of the
    ``count`` and the limited one's."""
    now = utc_now()
    secrets_made = []
    with engine.begin() as conn:
        for index in range(count):
            _, secret = create_token(conn, f"bench-{index}", "operate", "bench", now, None)
            secrets_made.append(secret)
        _, scoped = create_token(
            conn, "bench-scoped", "operate", "bench", now, None, projects=[f"{PROJECT}*"]
        )
        for index in range(other_projects):
            ensure_project(conn, f"other-{index}", now)
    return secrets_made[count // 2], scoped


def run_all(args: argparse.Namespace, server_url: str, work_dir: Path) -> dict[str, Any]:
    """Seed, serve, and measure the three request kinds; their figures."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with throwaway_database(server_url) as url:
        engine = create_store_engine(url)
        started = time.perf_counter()
        seeded = seed(engine, args.sessions)
        store_token, scoped_token = seed_tokens(engine, args.store_tokens, args.other_projects)
        engine.dispose()
        seed_seconds = time.perf_counter() - started
        log.info("seeded sessions=%d seconds=%.1f", seeded.sessions, seed_seconds)
        with (
            (work_dir / "api.log").open("wb") as server_log,
            served_api(url, args.workers, server_log) as server,
        ):
            base_url = server[0]
            log.info("serving url=%s workers=%d", base_url, args.workers)
            first = f"/api/sessions?limit={PAGE_LIMIT}"
            check_page(base_url, headers, first)
            cursor, depth = find_deep_cursor(base_url, headers, int(args.sessions * DEEP_FRACTION))
            deep = f"/api/sessions?{urlencode({'limit': PAGE_LIMIT, 'cursor': cursor})}"
            check_page(base_url, headers, deep)
            log.info("deep cursor found depth=%d", depth)
            load_average = os.getloadavg()[0]  # before the load: what else the machine runs
            results = {
                "list": measure("list", server, lambda _: Request("GET", first), 200, args),
                "deep_page": measure(
                    "deep_page", server, lambda _: Request("GET", deep), 200, args
                ),
                "list_store_token": measure(
                    "list_store_token",
                    server,
                    lambda _: Request("GET", first),
                    200,
                    args,
                    token=store_token,
                ),
                "list_scoped_token": measure(
                    "list_scoped_token",
                    server,
                    lambda _: Request("GET", first),
                    200,
                    args,
                    token=scoped_token,
                ),
                # Last: past about 150 a second the starts outrun 2 cores, and the queue
                # they leave would be measured by whatever came after them.
                "start": measure("start", server, StartRequests(), 201, args),
            }
    return figures(results, args, depth, seed_seconds, load_average)


def figures(
    measured: dict[str, Measured],
    args: argparse.Namespace,
    depth: int,
    seed_seconds: float,
    load_average: float,
) -> dict[str, Any]:
    """The JSON figures: the four headline ones first, then what supports them."""
    results = {name: run.load for name, run in measured.items()}

    def ms(name: str, fraction: float) -> float:
        # Unanswered requests count with a lower bound of their latency.
        timed = results[name].latencies_s + results[name].unanswered_s
        return round(1000 * percentile(timed, fraction), 2)

    good = sum(len(result.latencies_s) for result in results.values())
    span = sum(result.span_s for result in results.values())
    out: dict[str, Any] = {
        "list_p99_ms": ms("list", 0.99),
        "deep_page_p99_ms": ms("deep_page", 0.99),
        "start_p99_ms": ms("start", 0.99),
        "list_store_token_p99_ms": ms("list_store_token", 0.99),
        "list_scoped_token_p99_ms": ms("list_scoped_token", 0.99),
        "rps": round(good / span, 1),
        "server_cpu_ms_per_request": cpu_ms_per_request(list(measured.values())),
    }
    for name, result in results.items():
        out[f"{name}_p50_ms"] = ms(name, 0.5)
        out[f"{name}_max_ms"] = ms(name, 1.0)
        out[f"{name}_rps"] = round(result.achieved_rps, 1)
        out[f"{name}_errors"] = result.error_count
        out[f"{name}_unanswered"] = len(result.unanswered_s)
        out[f"{name}_generator_late_max_ms"] = round(1000 * result.lateness_max_s, 2)
        out[f"{name}_server_cpu_ms_per_request"] = cpu_ms_per_request([measured[name]])
    ratio = out["deep_page_p50_ms"] / out["list_p50_ms"]
    store_cpu = out["list_store_token_server_cpu_ms_per_request"] or 0.0
    env_cpu = out["list_server_cpu_ms_per_request"] or 0.0
    scoped_cpu = out["list_scoped_token_server_cpu_ms_per_request"] or 0.0
    out["store_token_to_env_token_cpu_ratio"] = round(store_cpu / env_cpu, 3) if env_cpu else None
    out["scoped_token_to_env_token_cpu_ratio"] = round(scoped_cpu / env_cpu, 3) if env_cpu else None
    out["store_tokens"] = args.store_tokens
    out["other_projects"] = args.other_projects
    out |= {
        "deep_to_first_p50_ratio": round(ratio, 3),
        "deep_page_depth": depth,
        "target_rps": args.rate,
        "duration_s": args.duration,
        "sessions": args.sessions,
        "workers": args.workers,
        "seed_seconds": round(seed_seconds, 2),
        "load_average_1m": round(load_average, 2),
        "meets_targets": ratio <= TARGET_DEEP_TO_FIRST_P50
        and (out["list_server_cpu_ms_per_request"] or 0.0) <= TARGET_LIST_SERVER_CPU_MS
        and (out["scoped_token_to_env_token_cpu_ratio"] or 0.0) <= TARGET_SCOPED_TO_ENV_CPU
        and not any(r.error_count or r.unanswered_s for r in results.values()),
    }
    return out


def cpu_ms_per_request(runs: list[Measured]) -> float | None:
    """The server's CPU milliseconds per request served over some timed runs; None when
    it served none."""
    served = sum(run.served for run in runs)
    cpu_s = sum(run.server_cpu_s for run in runs)
    return round(1000 * cpu_s / served, 2) if served else None


def log_tail(work_dir: Path) -> str:
    """The end of the server's log, to show after a failure."""
    path = work_dir / "api.log"
    return path.read_bytes()[-2000:].decode(errors="replace") if path.exists() else ""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument(
        "--store-tokens", type=int, default=100, help="named tokens in the store (at least 1)"
    )
    parser.add_argument(
        "--other-projects",
        type=int,
        default=50,
        help="projects the limited token does not cover",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per kind")
    parser.add_argument("--warmup", type=float, default=3.0, help="uncounted seconds per kind")
    parser.add_argument("--sessions", type=int, default=100_000, help="sessions to seed")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    if args.sessions < 10 * PAGE_LIMIT or args.rate <= 0 or args.duration <= 0:
        parser.error(f"--sessions must be at least {10 * PAGE_LIMIT}; --rate, --duration > 0")
    if args.store_tokens < 1:
        parser.error("--store-tokens must be at least 1")
    return args


def _interrupt_on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main_guarded(
    args: argparse.Namespace,
    run_all: Callable[[argparse.Namespace, str, Path], dict[str, Any]],
    name: str,
) -> int:
    """Run an API benchmark's ``run_all`` in a temporary directory and print its figures;
    an exit status, said in one line, when it fails (1), misses a target under ``--check``
    (1) or is interrupted by Ctrl-C or SIGTERM (130), its server stopped and database
    dropped."""
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)  # clean up as on Ctrl-C
    configure_logging("INFO")
    for noisy in ("httpx", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    with tempfile.TemporaryDirectory(prefix=f"tickwork-bench-{name}-") as work_dir:
        try:
            out = run_all(args, server_url, Path(work_dir))
        except BenchFailed as exc:
            log.error("failed error=%s server_log_tail=%r", exc, log_tail(Path(work_dir)))
            return 1
        except KeyboardInterrupt:
            log.error("interrupted; server stopped, database dropped")
            return 130
    print(json.dumps(out))
    if args.check and not out["meets_targets"]:
        log.error("a target of bench/%s.py was missed (see bench/README.md)", name)
        return 1
    return 0


def main() -> int:
    return main_guarded(parse_args(), run_all, "api")


if __name__ == "__main__":
    sys.exit(main())
