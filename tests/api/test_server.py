"""``tickwork api``: gunicorn really serves the app, stops on SIGTERM, and refuses to start
without tokens or on a database that is not migrated."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.store.engine import create_store_engine
from shared.store.migrate import upgrade_database

pytestmark = pytest.mark.slow

TOKEN = "server-admin-token"
START_SECONDS = 30
STOP_SECONDS = 30
TICKWORK = [sys.executable, "-c", "from services.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(TICKWORK_DATABASE_URL=database_url, **extra)
    return env


@pytest.fixture
def migrated_url(postgres_url: str) -> str:
    engine = create_store_engine(postgres_url)
    upgrade_database(engine)
    engine.dispose()
    return postgres_url


@pytest.fixture
def server(migrated_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    env = environment(
        migrated_url, TICKWORK_API_TOKENS=f"admin:{TOKEN}", PROMETHEUS_MULTIPROC_DIR=str(tmp_path)
    )
    command = [*TICKWORK, "api", "--bind", f"127.0.0.1:{port}", "--workers", "2"]
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
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the API did not answer /healthz within {START_SECONDS}s")


def test_tickwork_api_serves_with_gunicorn_and_stops_on_sigterm(
    server: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, base_url = server
    # Given a started server
    wait_until_healthy(base_url, process)
    # Then it serves the API with tokens, from either worker
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for _ in range(6):
        assert httpx.get(f"{base_url}/api/projects", headers=auth, timeout=5).status_code == 200
    assert httpx.get(f"{base_url}/api/projects", timeout=5).status_code == 401
    assert httpx.get(f"{base_url}/readyz", timeout=5).status_code == 200
    # and its metrics are summed over the workers
    metrics = httpx.get(f"{base_url}/metrics", timeout=5).text
    assert 'endpoint="/api/projects",method="GET",status="200"} 6.0' in metrics
    # When it gets SIGTERM
    process.send_signal(signal.SIGTERM)
    # Then it stops, having written JSON access lines
    process.wait(timeout=STOP_SECONDS)
    output = process.stdout.read().decode() if process.stdout else ""
    assert '"path": "/api/projects"' in output
    assert "Traceback" not in output


def test_tickwork_api_refuses_to_start_with_auth_on_and_no_tokens(migrated_url: str) -> None:
    result = subprocess.run(
        [*TICKWORK, "api"], env=environment(migrated_url), capture_output=True, timeout=60
    )
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1
    assert "TICKWORK_API_TOKENS" in lines[0]


def test_tickwork_api_refuses_a_database_that_is_not_migrated(postgres_url: str) -> None:
    env = environment(postgres_url, TICKWORK_API_AUTH="off")
    result = subprocess.run([*TICKWORK, "api"], env=env, capture_output=True, timeout=60)
    assert result.returncode == 2
    assert "tickwork db upgrade" in result.stderr.decode()
