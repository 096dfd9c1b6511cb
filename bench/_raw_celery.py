"""The raw Celery baseline of bench/dispatch.py: its two workers, and its fan-out and chain.

Two ``celery worker`` processes (prefork, one pool process each) load
bench/_raw_celery_app.py, which has tickwork's agents' Celery settings. They stay up for
the whole run, idle between parts, so that bench/dispatch.py can alternate their runs with
tickwork's. Each run is one child process of that module (the client): a fan-out of no-op
tasks waited for through the result backend, or a chain whose links each send the next.
The workers' CPU is read around each client, from their process groups (as a service's
CPU is read for tickwork's services, with :func:`services_cpu_seconds`).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _services import BenchFailed, Service, service_env, start_service, wait_until

BENCH_DIR = Path(__file__).resolve().parent
BIN_DIR = Path(sys.executable).parent
WORKERS = 2  # each with one pool process, as tickwork's agents run with --concurrency 1
FANOUT_WARMUP_TASKS = 20
CHAIN_WARMUP_LINKS = 10
START_TIMEOUT_SECONDS = 60.0


def group_cpu_seconds(pgid: int) -> float:
    """User and system CPU seconds of the live processes in process group ``pgid``, with
    what their reaped children had used."""
    total_ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # the process has gone
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # from the state on: field 3 is [0]
        if int(fields[2]) == pgid:
            total_ticks += sum(int(value) for value in fields[11:15])  # utime .. cstime
    return total_ticks / os.sysconf("SC_CLK_TCK")


def services_cpu_seconds(services: Sequence[Service]) -> float:
    """The summed CPU seconds of the services' process groups."""
    return sum(group_cpu_seconds(service.process.pid) for service in services)


@dataclass(frozen=True)
class RawResult:
    """A raw Celery fan-out: how long sending took and how long until the last result."""

    tasks: int
    publish_seconds: float
    wall_seconds: float
    worker_cpu_ms_per_task: float  # both workers' process groups, warm-up included

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_seconds


@dataclass(frozen=True)
class RawChain:
    """A raw Celery chain: each link's start and end in its worker (unix seconds)."""

    links: list[tuple[float, float]]
    wall_seconds: float  # the client's first send to the last link's result
    worker_cpu_ms_per_link: float  # both workers' process groups, warm-up chain included

    def hops(self) -> list[float]:
        """Seconds from each link's end to the next one's end, as tickwork's hops."""
        return [after[1] - before[1] for before, after in itertools.pairwise(self.links)]

    def dispatch(self) -> list[float]:
        """Seconds from each link's end to the next one's start: sending, the broker and a
        worker's pool process taking it."""
        return [after[0] - before[1] for before, after in itertools.pairwise(self.links)]


class RawCelery:
    """The raw workers, running; each run is a client process of bench/_raw_celery_app.py."""

    def __init__(self, workers: list[Service], env: dict[str, str], timeout: float) -> None:
        self.workers = workers
        self.env = env
        self.timeout = timeout

    @classmethod
    def start(
        cls, services: list[Service], redis_url: str, prefix: str, work_dir: Path, timeout: float
    ) -> RawCelery:
        """Start the workers, appending each to ``services``, and wait until both consume.
        ``timeout`` bounds each batch of the client (a fan-out or a chain)."""
        ready_dir = work_dir / "raw-ready"
        ready_dir.mkdir()
        pythonpath = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
        env = service_env(
            TICKWORK_REDIS_URL=redis_url,
            TICKWORK_REDIS_PREFIX=prefix,
            TICKWORK_BENCH_READY_DIR=str(ready_dir),
            PYTHONPATH=pythonpath,
        )
        workers = []
        for index in range(1, WORKERS + 1):
            command = [
                *(str(BIN_DIR / "celery"), "--app", "_raw_celery_app", "worker"),
                *("--pool", "prefork", "--concurrency", "1", "--prefetch-multiplier", "1"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
                *("--hostname", f"raw{index}@%h", "--loglevel", "WARNING"),
            ]
            worker = start_service(f"raw-worker-{index}", command, env, work_dir, work_dir)
            services.append(worker)
            workers.append(worker)
        wait_until(
            lambda: len(list(ready_dir.iterdir())) >= WORKERS,
            START_TIMEOUT_SECONDS,
            "the raw Celery workers to be ready",
            workers,
        )
        return cls(workers, env, timeout)

    def run_fanout(self, tasks: int) -> RawResult:
        """Send ``tasks`` no-op tasks (after a warm-up) and wait for every result."""
        found, cpu_seconds = self._run_client("--tasks", str(tasks))
        ((publish, wall),) = found["rounds"]
        cpu_ms = 1000 * cpu_seconds / (FANOUT_WARMUP_TASKS + tasks)
        return RawResult(tasks, publish, wall, cpu_ms)

    def run_chain(self, links: int) -> RawChain:
        """Run a chain of ``links`` links (after a short one) and read each link's times."""
        found, cpu_seconds = self._run_client("--tasks", "0", "--chain", str(links))
        times = [(start, end) for start, end in found["chain_times"]]
        cpu_ms = 1000 * cpu_seconds / (CHAIN_WARMUP_LINKS + links)
        return RawChain(times, found["chain_wall_seconds"], cpu_ms)

    def _run_client(self, *arguments: str) -> tuple[dict[str, Any], float]:
        """Run the client with ``arguments``; (its JSON, the workers' CPU seconds)."""
        command = [
            *(sys.executable, str(BENCH_DIR / "_raw_celery_app.py"), *arguments),
            *("--warmup", str(FANOUT_WARMUP_TASKS), "--chain-warmup", str(CHAIN_WARMUP_LINKS)),
            *("--timeout", str(self.timeout)),
        ]
        cpu_before = services_cpu_seconds(self.workers)
        try:
            done = subprocess.run(
                command,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=2 * self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BenchFailed("the raw Celery client did not finish in time") from None
        if done.returncode != 0:
            raise BenchFailed(f"the raw Celery client failed: {done.stderr.strip()[-800:]}")
        cpu_seconds = services_cpu_seconds(self.workers) - cpu_before
        for worker in self.workers:
            worker.check_alive()
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return found, cpu_seconds
