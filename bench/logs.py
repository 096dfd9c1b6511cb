"""Task logs end to end: a 64 MiB log stored and read back through the API, and 200
followers of a log being written.

Real processes run from a checkout (``--tree``, default this one; its ``.venv``): one
``tickwork executor``, one ``tickwork agent`` and ``tickwork api`` with ``--api-workers``
gevent workers (auth and rate limit off), on a throwaway PostgreSQL database (migrated
by that checkout's ``tickwork db upgrade``) and a Redis prefix of their own. A checkout
whose executor still has ``--log-dir`` (before logs moved into the store) gets a log
directory, for its executor and its API. A project of three workflows is pushed through
``tickwork push``; bench/_log_text.py is the tasks' program.

1. **Store.** ``big`` writes ``--mib`` MiB (default 64: the agent's default head and tail,
   32 MiB each, keep it whole) of service-log text: a ``start <time>`` line, text drawn
   from a fixed seed, an ``end <time>`` line. The log's listing
   (``GET /api/logs/<attempt>/files``) is polled every 20 ms. ``time_to_stored_s`` runs
   from the task's own ``start`` time to the first listing that shows the whole log
   (``size_bytes`` the full size, nothing missing) and the run's result applied
   (``ended_at`` set): in the store, or for a checkout with log files, in its file.
   ``task_write_s`` is the task's ``start`` to ``end``, so ``stored_after_end_s`` is how
   long the log took to be stored once the task had written it.
   ``store_bytes_per_log_byte`` is the growth of ``pg_total_relation_size`` of
   ``task_log_chunks`` (table, indexes and TOAST) over the log's bytes; with log files
   it is the file's size over the log's bytes (1.0).
2. **Read.** The whole log is read through ``GET /api/logs/<attempt>/files/<id>?offset=
   &length=`` in 16 MiB pages (the most one response holds), ``--reads`` times (default
   3) on one keep-alive connection; ``read_mb_per_s`` is the median (MB: 10^6 bytes). The
   first read is checked byte for byte against what the task wrote.
3. **Follow.** ``ticks`` waits 4 s, then writes ``tick <n> <time>`` every 50 ms for 10 s
   (200 lines). Right after it is started, ``--followers`` (default 200) threads each open
   ``GET /api/logs/<attempt>/follow`` (``http.client``) and read it to its ``end`` event.
   A line's latency is the time a follower has the whole line minus the time the task
   wrote into it; ``follow_latency_p50_ms`` / ``p99_ms`` are over every line every
   follower received. The followers' own Python threads share the machine with the
   services, so their scheduling is part of the figure.

The CPU of the executor while the big log is stored, and of the API while it is read,
is read from ``/proc`` per MiB. Every wait is bounded; services are stopped, the database
dropped, Redis keys deleted and the temporary directory removed however the run ends
(kept, with the services' logs, after a failure). Progress goes to stderr; the last
stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from _log_text import log_body, mark_bytes, mark_line
from _services import (
    BenchFailed,
    Service,
    free_port,
    is_ready,
    redis_prefix,
    run_guarded,
    running,
    service_env,
    start_service,
    wait_until,
)
from _stores import percentile, throwaway_database
from dispatch import services_cpu_seconds
from rich.console import Console

from tickwork.shared.store.engine import libpq_url

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BENCH_DIR = Path(__file__).resolve().parent
PROJECT = "logbench"
MIB = 1024 * 1024
PAGE_BYTES = 16 * MIB  # the most one response of the API holds
POLL_SECONDS = 0.02
START_TIMEOUT_SECONDS = 60.0
STORE_TIMEOUT_SECONDS = 180.0
TICK_SETTLE_SECONDS = 4.0  # the followers connect meanwhile
TICK_EVERY_SECONDS = 0.05
TICK_SECONDS = 10.0
FOLLOW_TIMEOUT_SECONDS = 60.0  # after the ticks' last line, for the streams to end
REQUEST_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Tree:
    """A checkout to run the services from, with its virtual environment."""

    path: Path
    bin_dir: Path
    log_files: bool  # its executor writes log files (``--log-dir``), not the store

    @classmethod
    def at(cls, path: Path) -> Tree:
        path = path.resolve()
        here = path == BENCH_DIR.parent
        bin_dir = Path(sys.executable).parent if here else path / ".venv" / "bin"
        if not (bin_dir / "tickwork").exists():
            raise BenchFailed(f"no {bin_dir / 'tickwork'}: make the checkout's .venv first")
        usage = subprocess.run(
            [str(bin_dir / "tickwork"), "executor", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            cwd=path,
        ).stdout
        return cls(path, bin_dir, "--log-dir" in usage)

    def command(self, *args: str) -> list[str]:
        return [str(self.bin_dir / "tickwork"), *args]


# --- the services ------------------------------------------------------------------------


class Cluster:
    """An executor, an agent and the API of one checkout, and what talks to them."""

    def __init__(self, tree: Tree, url: str, redis_at: tuple[str, str], work_dir: Path):
        self.tree, self.url, self.work_dir = tree, url, work_dir
        self.redis_url, self.redis_prefix = redis_at
        self.services: list[Service] = []
        self.log_dir = work_dir / "task-logs" if tree.log_files else None
        self.base_url = ""
        self.http = httpx.Client(timeout=REQUEST_TIMEOUT_SECONDS)

    def _env(self, **values: str) -> dict[str, str]:
        common = {"TICKWORK_REDIS_URL": self.redis_url, "TICKWORK_REDIS_PREFIX": self.redis_prefix}
        if self.log_dir is not None:
            common["TICKWORK_LOG_DIR"] = str(self.log_dir)
        return service_env(**common, **values)

    def migrate(self) -> None:
        done = subprocess.run(
            self.tree.command("db", "upgrade"),
            env=self._env(TICKWORK_DATABASE_URL=self.url),
            cwd=self.work_dir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise BenchFailed(f"tickwork db upgrade failed: {done.stderr.strip()[-800:]}")

    def start(self, api_workers: int) -> None:
        """Start the executor, the agent and the API; wait until each is ready."""
        if self.log_dir is not None:
            self.log_dir.mkdir()
        for name, command, env in (
            ("executor", ["executor"], {"TICKWORK_DATABASE_URL": self.url}),
            ("agent", ["agent", "--concurrency", "2"], {}),
        ):
            port = free_port()
            argv = self.tree.command(*command, "--metrics-port", str(port))
            env = self._env(**env, TICKWORK_METRICS_PORT=str(port))
            self.services.append(
                start_service(name, argv, env, self.work_dir, self.tree.path, port)
            )
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        argv = self.tree.command(
            "api", "--workers", str(api_workers), "--bind", f"127.0.0.1:{port}"
        )
        env = self._env(
            TICKWORK_DATABASE_URL=self.url,
            TICKWORK_API_AUTH="off",
            TICKWORK_API_RATE_LIMIT="0",
            TICKWORK_API_MAX_FOLLOWS="500",
        )
        self.services.append(start_service("api", argv, env, self.work_dir, self.tree.path))
        for port in (self.services[0].metrics_port, self.services[1].metrics_port):
            wait_until(
                lambda port=port: is_ready(port), START_TIMEOUT_SECONDS, "a service", self.services
            )
        wait_until(self._api_ready, START_TIMEOUT_SECONDS, "the API to be ready", self.services)

    def _api_ready(self) -> bool:
        try:
            return self.http.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def executor(self) -> Service:
        return self.services[0]

    @property
    def api(self) -> Service:
        return self.services[2]

    def push(self, project_dir: Path) -> None:
        done = subprocess.run(
            self.tree.command("push", str(project_dir), "--project", PROJECT),
            env={**service_env(), "TICKWORK_ENDPOINT": self.base_url},
            cwd=self.work_dir,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise BenchFailed(f"tickwork push failed: {(done.stdout + done.stderr)[-800:]}")

    def start_attempt(self, workflow: str) -> int:
        body = {"project": PROJECT, "workflow": workflow}
        answer = self.http.post(f"{self.base_url}/api/attempts", json=body)
        if answer.status_code != 201:
            raise BenchFailed(f"POST /api/attempts answered {answer.status_code}: {answer.text}")
        return int(answer.json()["id"])

    def attempt_state(self, attempt_id: int) -> str:
        return str(self.http.get(f"{self.base_url}/api/attempts/{attempt_id}").json()["state"])

    def wait_for_success(self, attempt_id: int, timeout_seconds: float) -> None:
        states: list[str] = []

        def done() -> bool:
            states.append(self.attempt_state(attempt_id))
            return states[-1] in ("success", "error", "killed", "canceled")

        wait_until(done, timeout_seconds, f"attempt {attempt_id} to end", self.services, 0.05)
        if states[-1] != "success":
            raise BenchFailed(f"attempt {attempt_id} ended {states[-1]}")

    def log_files(self, attempt_id: int) -> list[dict[str, Any]]:
        answer = self.http.get(f"{self.base_url}/api/logs/{attempt_id}/files")
        answer.raise_for_status()
        items: list[dict[str, Any]] = answer.json()["items"]
        return items

    def read_log(
        self, attempt_id: int, log_id: str, size: int, sink: Callable[[bytes], None]
    ) -> None:
        """The whole log, page by page, each page's bytes handed to ``sink``."""
        url = f"{self.base_url}/api/logs/{attempt_id}/files/{log_id}"
        for offset in range(0, size, PAGE_BYTES):
            answer = self.http.get(url, params={"offset": offset, "length": PAGE_BYTES})
            if answer.status_code != 200 or len(answer.content) != min(PAGE_BYTES, size - offset):
                raise BenchFailed(
                    f"reading {url} at {offset}: {answer.status_code}, {len(answer.content)} bytes"
                )
            sink(answer.content)

    def close(self) -> None:
        self.http.close()


def write_project(directory: Path, log_bytes: int) -> None:
    """The pushed project: the tasks' program and a workflow for each part."""
    directory.mkdir()
    shutil.copy(BENCH_DIR / "_log_text.py", directory / "_log_text.py")
    workflows = {
        "warm": "sh>: echo warm",
        "big": f"sh>: python3 _log_text.py big {log_bytes}",
        "ticks": (
            f"sh>: python3 _log_text.py ticks {TICK_SETTLE_SECONDS:g} "
            f"{TICK_EVERY_SECONDS:g} {TICK_SECONDS:g}"
        ),
    }
    for name, task in workflows.items():
        (directory / f"{name}.dig").write_text(f"+{name}:\n  {task}\n")


# --- 1 and 2: store and read -------------------------------------------------------------


@dataclass
class StoreResult:
    """The big log: when it was stored, what it cost, and how fast it reads back."""

    log_bytes: int
    task_write_s: float
    time_to_stored_s: float
    time_to_whole_s: float  # the whole log visible, the result maybe not yet applied
    store_bytes: int | None  # growth of task_log_chunks; None where logs are files
    executor_cpu_s: float
    read_seconds: list[float] = field(default_factory=list)
    api_cpu_s: float = 0.0


def relation_bytes(url: str, relation: str) -> int | None:
    """``pg_total_relation_size`` of ``relation``; None if there is no such table."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (relation,)).fetchone()
        if found is None or found[0] is None:
            return None
        row = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (relation,)).fetchone()
        return int(row[0]) if row else None


def store_big_log(cluster: Cluster, log_bytes: int) -> tuple[StoreResult, int, str]:
    """Run ``big`` and wait until its whole log is stored and its result applied."""
    size_before = relation_bytes(cluster.url, "task_log_chunks")
    cpu_before = services_cpu_seconds([cluster.executor])
    attempt_id = cluster.start_attempt("big")
    whole_at: list[float] = []
    found: list[dict[str, Any]] = []

    def stored() -> bool:
        items = cluster.log_files(attempt_id)
        if not items:
            return False
        item = items[0]
        whole = item["size_bytes"] == log_bytes and not item.get("missing_bytes")
        if whole and not whole_at:
            whole_at.append(time.time())
        if whole and item["ended_at"] is not None:
            found.append(item)
            return True
        return False

    wait_until(
        stored, STORE_TIMEOUT_SECONDS, "the big log to be stored", cluster.services, POLL_SECONDS
    )
    stored_at = time.time()
    executor_cpu = services_cpu_seconds([cluster.executor]) - cpu_before
    size_after = relation_bytes(cluster.url, "task_log_chunks")
    item = found[0]
    if item["truncated_bytes"]:
        raise BenchFailed(f"the big log was cut: {item['truncated_bytes']} bytes")
    cluster.wait_for_success(attempt_id, STORE_TIMEOUT_SECONDS)
    log_id = str(item["id"])
    head = cluster.http.get(
        f"{cluster.base_url}/api/logs/{attempt_id}/files/{log_id}", params={"length": 64}
    ).content
    tail = cluster.http.get(
        f"{cluster.base_url}/api/logs/{attempt_id}/files/{log_id}",
        params={"offset": log_bytes - 64},
    ).content
    started = float(head.split(b"\n", 1)[0].split()[1])
    ended = float(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1].split()[1])
    growth = None if size_before is None or size_after is None else size_after - size_before
    result = StoreResult(
        log_bytes=log_bytes,
        task_write_s=ended - started,
        time_to_stored_s=stored_at - started,
        time_to_whole_s=whole_at[0] - started,
        store_bytes=growth,
        executor_cpu_s=executor_cpu,
    )
    return result, attempt_id, log_id


def expected_digest(log_bytes: int) -> str:
    """SHA-256 of the big log's text between its ``start`` and ``end`` lines."""
    digest = hashlib.sha256()
    for block in log_body(log_bytes - mark_bytes()):
        digest.update(block)
    return digest.hexdigest()


class BodyDigest:
    """SHA-256 of the bytes handed to it, but for the first and the last line."""

    def __init__(self, mark_length: int) -> None:
        self.head_length = mark_length
        self.digest = hashlib.sha256()
        self.seen = 0
        self.last = b""

    def __call__(self, data: bytes) -> None:
        skip = max(0, self.head_length - self.seen)
        self.seen += len(data)
        data = self.last + data[skip:]
        cut = data.rfind(b"\n", 0, len(data) - 1) + 1  # keep what may be the last line
        self.digest.update(data[:cut])
        self.last = data[cut:]


def read_back(
    cluster: Cluster, result: StoreResult, attempt_id: int, log_id: str, reads: int
) -> None:
    """Read the whole log ``reads`` times through the API; check the first read."""
    want = expected_digest(result.log_bytes)
    cpu_before = services_cpu_seconds([cluster.api])
    for number in range(reads):
        check = BodyDigest(len(mark_line("start", 0.0))) if number == 0 else (lambda _data: None)
        started = time.perf_counter()
        cluster.read_log(attempt_id, log_id, result.log_bytes, check)
        result.read_seconds.append(time.perf_counter() - started)
        if isinstance(check, BodyDigest) and check.digest.hexdigest() != want:
            raise BenchFailed("the log read back differs from what the task wrote")
    result.api_cpu_s = services_cpu_seconds([cluster.api]) - cpu_before


# --- 3: follow ---------------------------------------------------------------------------


@dataclass
class Follower:
    """One follow stream: the latency of each tick line it received."""

    latencies: list[float] = field(default_factory=list)
    opened: bool = False
    ended: str = ""
    error: str = ""


def follow(host: str, port: int, path: str, follower: Follower) -> None:
    """Read one follow stream to its end, timing each whole ``tick`` line."""
    conn = http.client.HTTPConnection(host, port, timeout=FOLLOW_TIMEOUT_SECONDS)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        if response.status != 200:
            follower.error = f"status {response.status}"
            return
        follower.opened = True
        event, data, carry = "", "", ""
        while True:
            raw = response.readline()
            received = time.time()
            if not raw:
                follower.ended = follower.ended or "closed"
                return
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
            elif not line and event:
                if event == "log":
                    carry += json.loads(data)["text"]
                    *whole, carry = carry.split("\n")
                    for text in whole:
                        parts = text.split()
                        if len(parts) == 3 and parts[0] == "tick":
                            follower.latencies.append(received - float(parts[2]))
                elif event in ("end", "timeout"):
                    follower.ended = event
                    return
                event, data = "", ""
    except (OSError, http.client.HTTPException, ValueError) as exc:
        follower.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def run_followers(cluster: Cluster, count: int) -> list[Follower]:
    """Start ``ticks``, follow it with ``count`` streams, and wait for them all to end."""
    attempt_id = cluster.start_attempt("ticks")
    host, port = cluster.base_url.removeprefix("http://").split(":")
    max_seconds = TICK_SETTLE_SECONDS + TICK_SECONDS + FOLLOW_TIMEOUT_SECONDS
    path = f"/api/logs/{attempt_id}/follow?max_seconds={max_seconds:g}"
    followers = [Follower() for _ in range(count)]
    threads = [
        threading.Thread(target=follow, args=(host, int(port), path, f), daemon=True)
        for f in followers
    ]
    for thread in threads:
        thread.start()
    cluster.wait_for_success(attempt_id, TICK_SETTLE_SECONDS + TICK_SECONDS + 60)
    deadline = time.monotonic() + FOLLOW_TIMEOUT_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return followers


# --- the whole run -----------------------------------------------------------------------


def run_all(
    args: argparse.Namespace, server_url: str, redis_url: str, err: Console
) -> dict[str, Any]:
    tree = Tree.at(Path(args.tree))
    log_bytes = args.mib * MIB
    work_dir = Path(tempfile.mkdtemp(prefix="tickwork-bench-logs-"))
    try:
        out = run_parts(tree, args, log_bytes, server_url, redis_url, work_dir, err)
    except BenchFailed:
        err.print(f"service logs kept in {work_dir}", highlight=False, soft_wrap=True)
        raise
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    shutil.rmtree(work_dir, ignore_errors=True)
    return out


def run_parts(
    tree: Tree,
    args: argparse.Namespace,
    log_bytes: int,
    server_url: str,
    redis_url: str,
    work_dir: Path,
    err: Console,
) -> dict[str, Any]:
    def say(line: str) -> None:
        err.print(line, highlight=False, soft_wrap=True)

    with ExitStack() as stack:
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url, migrate=False))
        cluster = Cluster(tree, url, (redis_url, prefix), work_dir)
        stack.callback(cluster.close)
        cluster.migrate()
        stack.enter_context(running(cluster.services))
        cluster.start(args.api_workers)
        where = "log files" if tree.log_files else "the store"
        say(f"services of {tree.path} ready (logs in {where}; API: {args.api_workers} workers)")
        write_project(work_dir / "project", log_bytes)
        cluster.push(work_dir / "project")
        cluster.wait_for_success(cluster.start_attempt("warm"), START_TIMEOUT_SECONDS)

        stored, attempt_id, log_id = store_big_log(cluster, log_bytes)
        say(
            f"1. {args.mib} MiB log stored {stored.time_to_stored_s:.2f} s after the task "
            f"started (it wrote for {stored.task_write_s:.2f} s)"
        )
        read_back(cluster, stored, attempt_id, log_id, args.reads)
        rates = [log_bytes / 1e6 / s for s in stored.read_seconds]
        say(f"2. read back at {', '.join(f'{r:.0f}' for r in rates)} MB/s")
        followers = run_followers(cluster, args.followers)
        latencies = [v for f in followers for v in f.latencies]
        if latencies:
            say(
                f"3. {len(latencies):,} lines to {args.followers} followers: p50 "
                f"{1000 * percentile(latencies, 0.5):.0f} ms, p99 "
                f"{1000 * percentile(latencies, 0.99):.0f} ms"
            )
        for service in cluster.services:
            service.check_alive()
        return figures(tree, args, stored, followers)


def figures(
    tree: Tree, args: argparse.Namespace, stored: StoreResult, followers: list[Follower]
) -> dict[str, Any]:
    latencies = [v for f in followers for v in f.latencies]
    if not latencies:
        errors = sorted({f.error for f in followers if f.error})[:3]
        raise BenchFailed(f"no follower received a tick line; errors: {errors}")
    mib = stored.log_bytes / MIB
    lines = int(TICK_SECONDS / TICK_EVERY_SECONDS)
    # With log files, the log is a file of its own size.
    store_ratio = 1.0 if stored.store_bytes is None else stored.store_bytes / stored.log_bytes
    return {
        "time_to_stored_s": round(stored.time_to_stored_s, 3),
        "read_mb_per_s": round(
            statistics.median(stored.log_bytes / 1e6 / s for s in stored.read_seconds), 1
        ),
        "follow_latency_p50_ms": round(1000 * percentile(latencies, 0.5), 1),
        "follow_latency_p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "store_bytes_per_log_byte": round(store_ratio, 3),
        "task_write_s": round(stored.task_write_s, 3),
        "stored_after_end_s": round(stored.time_to_stored_s - stored.task_write_s, 3),
        "time_to_whole_s": round(stored.time_to_whole_s, 3),
        "executor_cpu_ms_per_mib": round(1000 * stored.executor_cpu_s / mib, 2),
        "read_seconds": [round(s, 3) for s in stored.read_seconds],
        "api_cpu_ms_per_mib_read": round(
            1000 * stored.api_cpu_s / (mib * len(stored.read_seconds)), 2
        ),
        "follow_latency_max_ms": round(1000 * max(latencies), 1),
        "follow_lines_received": len(latencies),
        "follow_lines_expected": lines * len(followers),
        "followers": len(followers),
        "followers_opened": sum(f.opened for f in followers),
        "followers_ended": sum(f.ended == "end" for f in followers),
        "follower_errors": sorted({f.error for f in followers if f.error})[:3],
        "log_bytes": stored.log_bytes,
        "logs_in": "files" if tree.log_files else "store",
        "tree": str(tree.path),
        "api_workers": args.api_workers,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        default=str(BENCH_DIR.parent),
        help="a checkout to run the services from, with its .venv (default: this one)",
    )
    parser.add_argument("--mib", type=int, default=64, help="size of the big log, in MiB")
    parser.add_argument("--reads", type=int, default=3, help="whole reads of the big log")
    parser.add_argument("--followers", type=int, default=200, help="follow streams")
    parser.add_argument("--api-workers", type=int, default=4, help="tickwork api --workers")
    args = parser.parse_args()
    args.mib, args.reads, args.followers = (
        max(1, args.mib),
        max(1, args.reads),
        max(1, args.followers),
    )
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    out = run_guarded(lambda: run_all(args, server_url, redis_url, err), server_url, redis_url, err)
    if isinstance(out, int):
        return out
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
