"""The examples pushed over REST run on a cluster of separate processes: API (gunicorn),
scheduler, executor and two agents, on PostgreSQL and Redis.

A session started by hand and a session the scheduler fired both succeed, as the API
reports them; the agents got the project's files from Redis, not from a shared directory.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e._run import EXAMPLES_DIR
from tests.fault._cluster import Cluster
from tickwork.shared.dsl.archive import pack_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

ADMIN_TOKEN = "e2e-admin-token"
READ_TOKEN = "e2e-read-token"
RUN_TIMEOUT_SECONDS = 90.0


def _client(cluster: Cluster, token: str = ADMIN_TOKEN) -> httpx.Client:
    port = cluster.services["api"].metrics_port
    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10.0,
    )


def _wait_for_success(api: httpx.Client, attempt_id: str, cluster: Cluster) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while True:
        attempt: dict[str, Any] = api.get(f"/api/attempts/{attempt_id}").json()
        if attempt["state"] in ("success", "error", "killed", "canceled"):
            assert attempt["state"] == "success", cluster.explain(int(attempt_id))
            return attempt
        assert time.monotonic() < deadline, (
            f"attempt {attempt_id} still {attempt['state']}\n{cluster.explain(int(attempt_id))}"
        )
        time.sleep(0.2)


def _scheduled_session(api: httpx.Client, cluster: Cluster) -> dict[str, Any]:
    """The first session the scheduler fired for examples/scheduled.dig, once it ended."""
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while True:
        page = api.get("/api/sessions", params={"project": "examples", "workflow": "scheduled"})
        assert page.status_code == 200, page.text
        done = [
            s
            for s in page.json()["items"]
            if s["last_attempt"] and s["last_attempt"]["state"] not in ("created", "running")
        ]
        if done:
            return done[-1]
        assert time.monotonic() < deadline, f"no scheduled session ended\n{cluster.explain()}"
        time.sleep(0.2)


def test_examples_pushed_over_rest_run_by_hand_and_by_schedule_on_separate_processes(
    cluster: Cluster,
) -> None:
    # Given a cluster of separate processes: API, scheduler, executor and two agents
    cluster.start_api(f"admin:{ADMIN_TOKEN},read:{READ_TOKEN}")
    cluster.start_scheduler()
    cluster.start_executor()
    cluster.start_agent("agent-1", concurrency=2)
    cluster.start_agent("agent-2", concurrency=2)
    api = _client(cluster)

    # When the examples are pushed over REST, new schedules starting two minutes ago
    since = (datetime.now(UTC) - timedelta(minutes=2)).isoformat()
    pushed = api.put(
        "/api/projects/examples",
        params={"revision": "v1", "schedule_from": since},
        content=pack_project(EXAMPLES_DIR),
        headers={"Content-Type": "application/gzip"},
    )
    assert pushed.status_code == 201, pushed.text
    assert "hello" in pushed.json()["workflows"]

    # and a session of hello is started by hand
    started = api.post("/api/attempts", json={"project": "examples", "workflow": "hello"})
    assert started.status_code == 201, started.text
    attempt_id = started.json()["id"]

    # Then the manual session succeeds, every task of it having run on an agent
    attempt = _wait_for_success(api, attempt_id, cluster)
    assert attempt["workflow"] == "hello"
    tasks = api.get(f"/api/attempts/{attempt_id}/tasks").json()["items"]
    assert {t["state"] for t in tasks} == {"success"}
    assert any(t["full_name"] == "+hello+count_rows" for t in tasks)

    # and the scheduler fired scheduled.dig, whose session succeeded too
    session = _scheduled_session(api, cluster)
    assert session["last_attempt"]["state"] == "success", cluster.explain(
        int(session["last_attempt"]["id"])
    )

    # and the same start again names the existing attempt
    again = api.post(
        "/api/attempts",
        json={"project": "examples", "workflow": "hello", "session_time": attempt["session_time"]},
    )
    assert again.status_code == 409, again.text
    assert again.json()["attempt_id"] == attempt_id

    # and a read-only token may look but not start anything
    reader = _client(cluster, READ_TOKEN)
    assert reader.get(f"/api/attempts/{attempt_id}").status_code == 200
    refused = reader.post("/api/attempts", json={"project": "examples", "workflow": "hello"})
    assert refused.status_code == 403, refused.text
