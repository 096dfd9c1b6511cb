"""An agent rides out a Redis restart: its liveness stays green while Celery reconnects,
and its loop beats again once Redis is back (the probes of deploy/k8s restart it only
after 15 minutes of a stalled loop). The Redis here is a private redis-server on a port
of its own, killed and started again on the same port; nothing else uses it."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fault._cluster import Cluster
from tests.support.servers import ThrowawayRedis
from tests.support.waiting import wait_until
from tickwork.services.agent.worker import BEAT_SECONDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

OUTAGE_SECONDS = BEAT_SECONDS + 2  # longer than a beat: the loop misses at least one
RECOVERY_TIMEOUT_SECONDS = 45.0


@pytest.fixture
def private_redis() -> Iterator[ThrowawayRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs the redis-server binary to restart a private Redis")
    server = ThrowawayRedis.start(binary)
    try:
        yield server
    finally:
        server.stop()


def _probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as page:
            return page.status, json.loads(page.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_agent_stays_alive_through_a_redis_restart_and_beats_again_after_it(
    postgres_url: str, redis_prefix: str, tmp_path: Path, private_redis: ThrowawayRedis
) -> None:
    binary = shutil.which("redis-server")
    assert binary is not None
    with Cluster(postgres_url, private_redis.url, redis_prefix, tmp_path) as cluster:
        agent = cluster.start_agent("a")
        port = agent.metrics_port
        wait_until("the agent is ready", lambda: _probe(port, "/readyz")[0] == 200, 30.0)

        private_redis.process.kill()
        private_redis.process.wait(timeout=10)
        down_at = time.monotonic()
        while time.monotonic() - down_at < OUTAGE_SECONDS:
            status, body = _probe(port, "/healthz")
            assert status == 200, f"liveness failed while Redis was down: {body}"
            time.sleep(1.0)
        restarted = ThrowawayRedis.start(binary, port=private_redis.port)
        private_redis.process = restarted.process
        back_at = time.monotonic()

        def beat_since_back() -> bool:
            status, body = _probe(port, "/readyz")
            age = body.get("seconds_since_last_pass")
            return status == 200 and age is not None and age < time.monotonic() - back_at

        wait_until(
            "the agent beats again after Redis came back",
            beat_since_back,
            RECOVERY_TIMEOUT_SECONDS,
            poll=0.5,
        )
        assert agent.is_alive()
        shutil.rmtree(restarted.root, ignore_errors=True)
