"""Services as OS processes for the benchmarks: start, watch, signal and stop them.

Each service runs in a session of its own (its pid is its process group), logging to a
file. :func:`running` stops every service started inside it (SIGTERM to the group, then
SIGKILL) however the block ends. :func:`redis_prefix` gives a Redis key prefix whose keys
are deleted afterwards.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TypeVar

import psycopg
import redis
from rich.console import Console
from sqlalchemy.engine import make_url

STOP_TIMEOUT_SECONDS = 15.0  # after SIGTERM, before SIGKILL
T = TypeVar("T")


class BenchFailed(Exception):
    """A service misbehaved, or work did not end as it should have."""


@dataclass
class Service:
    """One OS process of a benchmark, in a process group of its own."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int | None = None

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the service's log, indented, for an error message."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "    (no log)"
        return "\n".join(f"    {line}" for line in text.splitlines()[-lines:]) or "    (empty log)"

    def check_alive(self) -> None:
        """Raise BenchFailed, with the log's tail, if the process has exited."""
        if self.process.poll() is not None:
            raise BenchFailed(
                f"{self.name} exited with status {self.process.returncode}; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the service's whole process group (pool children too)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def service_env(**values: str) -> dict[str, str]:
    """This process's environment without any TICKWORK_* variable, plus ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    return {**env, **values}


def start_service(
    name: str,
    command: Sequence[str],
    env: dict[str, str],
    log_dir: Path,
    cwd: Path,
    metrics_port: int | None = None,
) -> Service:
    """Start ``command`` in a new session (its own process group), logging to a file."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Service(name, process, log_path, metrics_port)


def start_executors_and_agents(
    services: list[Service],
    database_url: str,
    redis_url: str,
    prefix: str,
    work_dir: Path,
    *,
    executors: int = 1,
    agents: int = 2,
) -> None:
    """Start ``executors`` ``tickwork executor`` processes on ``database_url`` and
    ``agents`` ``tickwork agent --concurrency 1`` processes (no database URL), all under the
    Redis key ``prefix``, logging into ``work_dir``; each is appended to ``services`` as it
    starts, so that it is stopped whatever happens next."""
    common = {"TICKWORK_REDIS_URL": redis_url, "TICKWORK_REDIS_PREFIX": prefix}
    tickwork = str(Path(sys.executable).parent / "tickwork")
    for index in range(1, executors + 1):
        port = free_port()
        env = service_env(
            **common, TICKWORK_DATABASE_URL=database_url, TICKWORK_METRICS_PORT=str(port)
        )
        command = [tickwork, "executor", "--metrics-port", str(port)]
        name = "executor" if executors == 1 else f"executor-{index}"
        services.append(start_service(name, command, env, work_dir, work_dir, port))
    for index in range(1, agents + 1):
        port = free_port()
        env = service_env(**common, TICKWORK_METRICS_PORT=str(port))
        command = [tickwork, "agent", "--concurrency", "1", "--metrics-port", str(port)]
        services.append(start_service(f"agent-{index}", command, env, work_dir, work_dir, port))


def stop_services(services: Sequence[Service]) -> None:
    """SIGTERM every process group, wait for the leaders, then SIGKILL what is left."""
    for service in services:
        service.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for service in services:
        with suppress(subprocess.TimeoutExpired):
            service.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for service in services:  # the leader may be gone and its pool children not
        service.signal_group(signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            service.process.wait(timeout=5)


@contextmanager
def running(services: list[Service]) -> Iterator[list[Service]]:
    """Stop every service appended to ``services`` when the block ends, however it ends."""
    try:
        yield services
    finally:
        stop_services(services)


def wait_until(
    condition: Callable[[], bool],
    timeout_seconds: float,
    what: str,
    services: Sequence[Service],
    interval_seconds: float = 0.1,
) -> None:
    """Poll ``condition`` until it holds; fail if a service dies or the time runs out."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        if condition():
            return
        for service in services:
            service.check_alive()
        if time.monotonic() > deadline:
            raise BenchFailed(f"timed out after {timeout_seconds:.0f} s waiting for {what}")
        time.sleep(interval_seconds)


def read_metrics(port: int | None) -> dict[str, float] | None:
    """A Prometheus text page as ``{"name{labels}": value}``; None if it cannot be read."""
    if port is None:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as page:
            body = page.read().decode()
    except OSError:
        return None
    values: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                values[key] = float(value)
            except ValueError:
                continue
    return values


def metric_total(metrics: dict[str, float] | None, name: str) -> float | None:
    """The sum of a metric over its labels (``name`` or ``name{...}``)."""
    if metrics is None:
        return None
    found = [v for k, v in metrics.items() if k == name or k.startswith(name + "{")]
    return sum(found) if found else None


def is_ready(port: int | None) -> bool:
    """Whether the service's ``/readyz`` answers 200."""
    if port is None:
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as page:
            return bool(page.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


@contextmanager
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix ``tickwork_bench_<hex>:``; its keys are deleted afterwards."""
    prefix = f"tickwork_bench_{secrets.token_hex(4)}:"
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    client.ping()
    try:
        yield prefix
    finally:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                client.delete(*batch)
                batch = []
        if batch:
            client.delete(*batch)
        client.close()


def _interrupt_on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_guarded(run: Callable[[], T], server_url: str, redis_url: str, err: Console) -> T | int:
    """``run()``'s result; an exit status, said in one line, when it fails (1) or is
    interrupted by Ctrl-C or SIGTERM (130), its services stopped and its stores removed."""
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)  # clean up as on Ctrl-C
    try:
        return run()
    except BenchFailed as exc:
        err.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return 1
    except (psycopg.OperationalError, redis.ConnectionError) as exc:
        where = f"PostgreSQL at {make_url(server_url)!r} or Redis at {redis_url}"
        err.print(
            f"error: cannot use {where}: {exc}", highlight=False, markup=False, soft_wrap=True
        )
        return 1
    except KeyboardInterrupt:
        err.print("interrupted; services stopped, database and Redis keys removed")
        return 130
