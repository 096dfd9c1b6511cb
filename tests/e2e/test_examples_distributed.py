"""Every workflow of examples/ runs in the distributed mode: an executor process and two
agent processes on PostgreSQL and Redis (the ``cluster`` fixture), all examples at once.

Each example is submitted as an attempt of its own; the test waits for all of them and
checks that each ended as it does under ``tickwork run`` (success, or error for the two
that fail on purpose) and that its tasks noted what they did, in order and how often.
No example is skipped: ``http_status.dig`` asks a status service this test serves,
``incremental_load.dig`` loads into a throwaway database the project's secrets point it at
and runs a second session once the first has ended, and ``scheduled.dig`` runs one session
by hand (its schedule is covered by test_api_cluster).
"""

from __future__ import annotations

import shutil
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e._examples_database import SECRET_KEY, pg_secrets
from tests.e2e._run import EXAMPLES_DIR, NOTES_DIR, max_running_at_once
from tests.e2e._status_service import serve_status
from tests.fault._cluster import DONE_ATTEMPT_STATES, Cluster
from tests.support.servers import throwaway_postgres_database
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.secrets import SecretBox
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store import secrets as secret_store

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

SESSION_TIME = datetime(2026, 1, 30, tzinfo=UTC)
ALL_DONE_TIMEOUT_SECONDS = 150.0
FAILING_ON_PURPOSE = frozenset({"error_handler", "retry_notify"})

SEQUENTIAL_NOTES: dict[str, list[str]] = {
    "sequence": ["extract", "clean", "enrich", "load"],
    "retry_backoff": ["download attempt 1", "download attempt 2", "download attempt 3", "load"],
    "error_handler": ["extract", "alert: warehouse is read-only for maintenance"],
    "call_and_py": [
        "extract_orders shop_db",
        "validate 3 orders",
        "archive_orders orders-2026-01-30.csv.gz",
        "report 3 orders in orders-2026-01-30.csv.gz",
    ],
    "check": ["export_orders", "check_rows 3", "publish"],
    "delay": ["export", "publish", "report"],
    "scheduled": ["tick"],
    "retry_notify": [
        "call_partner_api run 0",
        "call_partner_api run 1",
        "call_partner_api run 2",
        "notify: command exited with status 1",
    ],
    "branch": ["inspect", "full_refresh", "skip vacuum (2 of 10 changed)"],
    "shared_steps": [
        "build",
        "snapshot orders",
        "announce orders",
        "snapshot customers",
        "announce customers",
    ],
    "poll_until_ready": ["probe 0", "probe 1", "probe 2", "load"],
    "http_status": ["upstream ready with 42 rows"],
    "backfill": ["load 2026-01-30 (previous 2026-01-29, next 2026-01-31)"],
    "sh_output": ["count", "batch b-20260130 from shop_db: 42 rows in 2 tables, first orders"],
    "quality_gate": ["load", "check nulls 2%", "publish"],
    "incremental_load": [
        "load orders after the start, 3 new, 3 in all",
        "orders loaded until 2026-01-30",
        "load orders after 2026-01-30, 3 new, 6 in all",
        "orders loaded until 2026-01-31",
    ],
}
"""What the examples whose tasks run one at a time note, exactly, in order."""

PARALLEL_LIMITS = {"parallel_limit": 2, "fan_out": 3, "pools": 2}
"""Examples with a ``_parallel: {limit: N}`` window or a pool of N slots (``pools``, set
to 2 here): never more than N at once."""


@pytest.fixture
def status_url() -> Iterator[str]:
    with serve_status() as service:
        yield service.url


@pytest.fixture
def orders_database(postgres_server_url: str) -> Iterator[str]:
    """A throwaway database for incremental_load.dig (the example's own is tickwork_examples)."""
    with throwaway_postgres_database(postgres_server_url) as url:
        yield url


def set_secrets(cluster: Cluster, secrets: dict[str, str]) -> None:
    """Store secrets of the cluster's project, encrypted with the agents' key."""
    box = SecretBox(SECRET_KEY)
    with cluster.engine.begin() as conn:
        for name, value in secrets.items():
            encrypted = box.encrypt(value)
            project = cluster.project_dir.name
            secret_store.set_secret(conn, project, name, encrypted, utc_now(), create_project=True)


def submit_example(
    cluster: Cluster,
    workflow: Path,
    params: dict[str, Any],
    session_time: datetime = SESSION_TIME,
) -> int:
    """Create an attempt of one example (copied into the cluster's project); its id."""
    text = textwrap.dedent(workflow.read_text(encoding="utf-8"))
    definition = parse_workflow_text(text, workflow.name, cluster.project_dir)
    request = RunRequest(
        definition=definition,
        project_dir=cluster.project_dir,
        state_dir=cluster.root / "state",
        database_url=cluster.database_url,
        params=params,
        session_time=session_time,
    )
    with cluster.engine.begin() as conn:
        return create_run_attempt(conn, request, datetime.now(UTC)).attempt_id


def wait_for_all(cluster: Cluster, attempts: dict[str, int]) -> dict[str, str]:
    """Wait (bounded) until every attempt ended; each example's final state."""
    deadline = time.monotonic() + ALL_DONE_TIMEOUT_SECONDS
    ended: dict[str, str] = {}
    while len(ended) < len(attempts):
        for name, attempt_id in attempts.items():
            if name not in ended and (state := cluster.attempt_state(attempt_id)) in (
                DONE_ATTEMPT_STATES
            ):
                ended[name] = state
        pending = sorted(set(attempts) - set(ended))
        assert time.monotonic() < deadline, f"still running: {pending}\n{cluster.explain()}"
        time.sleep(0.2)
    return ended


def notes(cluster: Cluster, example: str) -> list[str]:
    path = cluster.project_dir / NOTES_DIR / f"{example}.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_every_example_runs_on_an_executor_and_two_agents(
    cluster: Cluster, status_url: str, orders_database: str
) -> None:
    # Given the examples project and a cluster of an executor and two agents
    shutil.copytree(
        EXAMPLES_DIR,
        cluster.project_dir,
        ignore=shutil.ignore_patterns(".tickwork", "__pycache__"),
        dirs_exist_ok=True,
    )
    set_secrets(cluster, pg_secrets(orders_database))
    with cluster.engine.begin() as conn:  # as `tickwork pools set warehouse 2`
        pool_store.set_pool(conn, "warehouse", 2, None, utc_now())
    cluster.start_executor()
    key = {"TICKWORK_SECRET_KEY": SECRET_KEY}
    cluster.start_agent("agent-1", concurrency=4, env=key)
    cluster.start_agent("agent-2", concurrency=4, env=key)

    # When every example is submitted at once
    workflows = sorted(cluster.project_dir.glob("*.dig"))
    attempts = {
        w.stem: submit_example(
            cluster, w, {"status_url": status_url} if w.stem == "http_status" else {}
        )
        for w in workflows
    }
    ended = wait_for_all(cluster, attempts)
    # and incremental_load's next day once its first session ended
    next_day = SESSION_TIME + timedelta(days=1)
    workflow = cluster.project_dir / "incremental_load.dig"
    next_session = submit_example(cluster, workflow, {}, next_day)
    assert wait_for_all(cluster, {"incremental_load": next_session}) == {
        "incremental_load": "success"
    }, cluster.explain(next_session)

    # Then each ended as under `tickwork run`: success, or error where it fails on purpose
    expected = {name: "error" if name in FAILING_ON_PURPOSE else "success" for name in attempts}
    assert ended == expected, "\n".join(
        cluster.explain(attempts[n]) for n in attempts if ended[n] != expected[n]
    )
    # and the tasks noted what they did, in order and how often
    for name, expected_notes in SEQUENTIAL_NOTES.items():
        assert notes(cluster, name) == expected_notes, (name, cluster.explain(attempts[name]))
    for name, limit in PARALLEL_LIMITS.items():
        assert 1 <= max_running_at_once(notes(cluster, name)) <= limit, notes(cluster, name)
    assert sorted(notes(cluster, "loops")[:3]) == ["load ap", "load eu", "load us"]
    assert notes(cluster, "loops")[3:] == ["poll 0", "poll 1", "publish"]
    assert notes(cluster, "background")[-1] == "load"
    daily = [n for n in notes(cluster, "daily_etl") if n != "refresh_docs events"]
    assert daily == [
        "extract events_20260130",
        "transform events_20260130",
        "load events partition 2026-01-30",
    ]
    assert notes(cluster, "hello")[-2:] == ["count_rows", "report"]
