"""REST API latency and server CPU under a fixed request rate, with 100,000 sessions.

A throwaway database on TICKWORK_BENCH_DATABASE_URL (default: the local server) gets one
pushed project and ``--sessions`` finished sessions, one attempt each, inserted in bulk.
A real ``tickwork api --workers 4`` (gunicorn, gevent workers) serves it, rate limit off,
and an open-loop generator (bench/_api_load.py) sends each kind of request at ``--rate``
per second for ``--duration`` seconds, after a short warm-up of each:

- ``trivial``: ``GET /api/whoami``, the floor: the same server, token check, hooks and
  problem documents as the others, no store work, a small JSON dict;
- ``list``: ``GET /api/sessions?limit=100``, the newest page;
- ``start``: ``POST /api/attempts``, each with a new session time, so each makes a session
  (and its audit row, in the same transaction);
- ``deep_page``: the same as ``list`` with a cursor about 90% of the sessions deep, found
  beforehand by following ``next_cursor`` (keyset paging: it should cost what the first
  page does);
- ``list_store_token``: ``list`` again, sent with a named token of the store (one of
  ``--store-tokens``), which each request looks up by its digest, against ``list``'s
  environment token compared in memory;
- ``list_scoped_token``: ``list`` again, with a store token limited to the project's name
  by a glob, among ``--other-projects`` projects it does not cover: each request also
  reads which projects the token covers and keeps only their sessions.

``trivial``, ``list`` and ``start`` run in each of ``--rounds`` rounds, one after the
other in the same server; the others run once, in the first round. A figure is the median
of the rounds', and the list's and the start's server CPU are given as ratios to the
trivial route's in the same round (bench/_api_figures.py).

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
from _api_figures import Measured, kind_figures, meets_targets, ratio_figures
from _api_load import Request, run_fixed_rate
from _api_seed import FIRST_STARTED_TIME, PROJECT, WORKFLOW, seed
from _stores import throwaway_database
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
# The floor the list's and the start's CPU are measured against: a route of the product
# behind the same token check, hooks and problem documents as theirs, that reads nothing
# from the store (an environment token is compared in memory) and answers a small dict.
TRIVIAL_PATH = "/api/whoami"
# Measured in every round, one after the other; the other kinds run once, in the first
# round, before its start (which adds sessions).
ALTERNATED = ("trivial", "list", "start")

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


@dataclass(frozen=True)
class Kind:
    """A kind of request: what each one is, the status that answers it well, and the token
    it is sent with."""

    make_request: Callable[[int], Request]
    expected_status: int = 200
    token: str = TOKEN


def measure(name: str, server: tuple[str, int], kind: Kind, args: argparse.Namespace) -> Measured:
    """A warm-up (not counted), then the timed run of one request kind, with the CPU the
    server's process group spent during that run."""
    base_url, group = server
    headers = {"Authorization": f"Bearer {kind.token}"}
    options = {"rate": args.rate, "expected_status": kind.expected_status}
    run_fixed_rate(base_url, headers, kind.make_request, duration_s=args.warmup, **options)
    cpu_before = group_cpu_seconds(group)
    result = run_fixed_rate(
        base_url, headers, kind.make_request, duration_s=args.duration, **options
    )
    measured = Measured(result, group_cpu_seconds(group) - cpu_before)
    log.info(
        "measured kind=%s answered=%d errors=%d error_kinds=%s unanswered=%d p50_ms=%.2f "
        "p99_ms=%.2f achieved_rps=%.1f server_cpu_ms_per_request=%.2f",
        name,
        len(result.latencies_s),
        result.error_count,
        json.dumps(result.errors),
        len(result.unanswered_s),
        measured.latency_ms(0.5),
        measured.latency_ms(0.99),
        result.achieved_rps,
        measured.cpu_ms_per_request or 0.0,
    )
    if not result.latencies_s:
        raise BenchFailed(f"every {name} request failed: {result.errors}")
    return measured


def measure_rounds(
    server: tuple[str, int], kinds: Mapping[str, Kind], args: argparse.Namespace
) -> dict[str, list[Measured]]:
    """``args.rounds`` rounds of the :data:`ALTERNATED` kinds, one after the other in the
    same server, the other kinds in the first round only (before its starts); each kind's
    timed runs in round order."""
    once = [name for name in kinds if name not in ALTERNATED]
    measured: dict[str, list[Measured]] = {name: [] for name in kinds}
    for round_index in range(args.rounds):
        # Start last: past what 2 cores can start a second, the queue the starts leave
        # is absorbed by the next kind's warm-up rather than timed.
        order = ["trivial", "list", *(once if round_index == 0 else []), "start"]
        log.info("round number=%d of=%d", round_index + 1, args.rounds)
        for name in order:
            measured[name].append(measure(name, server, kinds[name], args))
    return measured


def check_trivial(base_url: str, headers: dict[str, str]) -> None:
    """The trivial route answers the environment token's name before it is measured."""
    response = httpx.get(f"{base_url}{TRIVIAL_PATH}", headers=headers, timeout=30)
    if response.status_code != 200 or response.json().get("source") != "environment":
        raise BenchFailed(f"GET {TRIVIAL_PATH} answered {response.status_code}: {response.text}")


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
    """Seed, serve, and measure the request kinds in rounds; their figures."""
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
            check_trivial(base_url, headers)
            kinds = {
                "trivial": Kind(lambda _: Request("GET", TRIVIAL_PATH)),
                "list": Kind(lambda _: Request("GET", first)),
                "deep_page": Kind(lambda _: Request("GET", deep)),
                "list_store_token": Kind(lambda _: Request("GET", first), token=store_token),
                "list_scoped_token": Kind(lambda _: Request("GET", first), token=scoped_token),
                # One for every round: no two starts share a session time.
                "start": Kind(StartRequests(), expected_status=201),
            }
            load_average = os.getloadavg()[0]  # before the load: what else the machine runs
            measured = measure_rounds(server, kinds, args)
    return figures(measured, args, depth, seed_seconds, load_average)


def figures(
    measured: dict[str, list[Measured]],
    args: argparse.Namespace,
    depth: int,
    seed_seconds: float,
    load_average: float,
) -> dict[str, Any]:
    """The JSON figures: the headline ones first, then what supports them."""
    kinds: dict[str, Any] = {}
    for name, runs in measured.items():
        kinds |= kind_figures(name, runs, by_round=name in ALTERNATED)
    ratios = ratio_figures(measured)
    every_run = [run for runs in measured.values() for run in runs]
    served = sum(run.served for run in every_run)
    good = sum(len(run.load.latencies_s) for run in every_run)
    span = sum(run.load.span_s for run in every_run)
    headline = (
        "list_p99_ms",
        "start_p99_ms",
        "trivial_p99_ms",
        "trivial_server_cpu_ms_per_request",
        "list_server_cpu_ms_per_request",
        "start_server_cpu_ms_per_request",
    )
    out: dict[str, Any] = {
        "list_to_trivial_cpu_ratio": ratios.pop("list_to_trivial_cpu_ratio"),
        "start_to_trivial_cpu_ratio": ratios.pop("start_to_trivial_cpu_ratio"),
        **{key: kinds.pop(key) for key in headline},
        "rps": round(good / span, 1),
        "server_cpu_ms_per_request": round(
            1000 * sum(run.server_cpu_s for run in every_run) / served, 2
        )
        if served
        else None,
        **kinds,
        **ratios,
        "store_tokens": args.store_tokens,
        "other_projects": args.other_projects,
        "deep_page_depth": depth,
        "rounds": args.rounds,
        "target_rps": args.rate,
        "duration_s": args.duration,
        "sessions": args.sessions,
        "workers": args.workers,
        "seed_seconds": round(seed_seconds, 2),
        "load_average_1m": round(load_average, 2),
    }
    out["meets_targets"] = meets_targets(out, measured)
    return out


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
    parser.add_argument(
        "--duration", type=float, default=10.0, help="timed seconds per kind and round"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds of trivial, list and start (at least 1)"
    )
    parser.add_argument("--warmup", type=float, default=3.0, help="uncounted seconds per kind")
    parser.add_argument("--sessions", type=int, default=100_000, help="sessions to seed")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    if args.sessions < 10 * PAGE_LIMIT or args.rate <= 0 or args.duration <= 0:
        parser.error(f"--sessions must be at least {10 * PAGE_LIMIT}; --rate, --duration > 0")
    if args.store_tokens < 1 or args.rounds < 1:
        parser.error("--store-tokens and --rounds must be at least 1")
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
