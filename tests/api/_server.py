"""A real ``tickwork api`` process for the API's tests: started, probed, killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.servers import find_free_port
from tests.support.waiting import wait_until

TOKEN = "server-admin-token"
START_SECONDS = 30
STOP_SECONDS = 30
TICKWORK = [sys.executable, "-c", "from tickwork.services.compose.commands import main; main()"]


def environment(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(TICKWORK_DATABASE_URL=database_url, **extra)
    return env


@contextmanager
def serving(
    database_url: str, tmp_path: Path, *options: str, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``tickwork api --workers 2 OPTIONS`` with an admin token; killed afterwards."""
    port = find_free_port()
    env = environment(
        database_url,
        TICKWORK_API_TOKENS=f"admin:{TOKEN}",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
        **env,
    )
    command = [*TICKWORK, "api", "--bind", f"127.0.0.1:{port}", "--workers", "2", *options]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_SECONDS)


def wait_until_healthy(base_url: str, process: subprocess.Popen[bytes]) -> None:
    def healthy() -> bool:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        try:
            return httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until("the API answers /healthz", healthy, START_SECONDS, poll=0.2)
