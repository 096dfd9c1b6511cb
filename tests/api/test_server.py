"""``tickwork api``: gunicorn really serves the app, stops on SIGTERM, and refuses to start
without tokens or on a database that is not migrated."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api._server import (
    STOP_SECONDS,
    TICKWORK,
    TOKEN,
    environment,
    serving,
    wait_until_healthy,
)
from tests.support.servers import find_free_port

pytestmark = pytest.mark.slow


@pytest.fixture
def migrated_url(migrated_postgres_url: str) -> str:
    return migrated_postgres_url


@pytest.fixture
def server(migrated_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    with serving(migrated_url, tmp_path) as started:
        yield started


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


def test_tickwork_api_says_the_database_is_out_of_reach_with_its_own_exit_status() -> None:
    # A database no server answers for is an outage (5), not bad input (2).
    url = f"postgresql+psycopg://postgres@127.0.0.1:{find_free_port()}/postgres"
    env = environment(url, TICKWORK_API_AUTH="off")
    result = subprocess.run([*TICKWORK, "api"], env=env, capture_output=True, timeout=60)
    assert result.returncode == 5, result.stderr.decode()
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1
    assert "Traceback" not in result.stderr.decode()
