"""A failing attempt is told to a webhook once, signed; an executor that dies between the
send and its record sends it once more, marked as a possible duplicate.

Real processes: an executor and an agent (tests/fault/_cluster.py), and a receiver on a
local port. The project's rule sends ``failed`` events to the receiver, signed with a
project secret the executor decrypts with ``TICKWORK_SECRET_KEY``. The second run starts
the executor at the crash point ``after-notify-send``: it exits right after the first
send, before recording it; the executor started after it finds the claim run out and
sends the same delivery again.
"""

from __future__ import annotations

import http.server
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from tests.fault._cluster import Cluster
from tests.support.servers import serve_http
from tests.support.waiting import wait_until
from tickwork.services.executor import notifier as notifier_module
from tickwork.services.executor.notifier import sign
from tickwork.shared.clock import utc_now
from tickwork.shared.dispatch.celery_dispatch import CRASH_AFTER_NOTIFY
from tickwork.shared.dsl.notifications import parse_rules
from tickwork.shared.secrets import SecretBox
from tickwork.shared.store import notifications as store
from tickwork.shared.store import secrets as secret_store
from tickwork.shared.store.projects import ensure_local_project
from tickwork.shared.store.tables import projects

pytestmark = [pytest.mark.slow]

KEY = Fernet.generate_key().decode()
SIGNING_KEY = "webhook-signing-key"
FAILING = """\
+fails:
  sh>: exit 3
"""
DELIVERY_TIMEOUT_SECONDS = 60.0


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: ClassVar[list[tuple[dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.got.append((dict(self.headers.items()), body))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.got = []
    with serve_http(_Receiver) as url:
        yield url


def add_rule(cluster: Cluster, url: str) -> None:
    """The cluster's project tells ``failed`` to ``url``, signed with its secret (set
    before anything runs, so the rule is there when the attempt ends)."""
    rules = parse_rules(
        f"rules:\n  - name: hook\n    when: failed\n    webhook:\n"
        f"      url: {url}/hook\n      signing_secret: hook.key\n"
    )
    now = utc_now()
    with cluster.engine.begin() as conn:
        project_id = ensure_local_project(conn, cluster.project_dir, now)
        name = conn.execute(
            sa.select(projects.c.name).where(projects.c.id == project_id)
        ).scalar_one()
        store.replace_rules(conn, project_id, rules, now)
        secret_store.set_secret(conn, name, "hook.key", SecretBox(KEY).encrypt(SIGNING_KEY), now)


def deliveries(cluster: Cluster) -> list[store.DeliveryRow]:
    with cluster.engine.connect() as conn:
        return store.list_deliveries(conn)


def check_signed(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    expected = "sha256=" + sign(SIGNING_KEY, headers["X-Tickwork-Timestamp"], body)
    assert headers["X-Tickwork-Signature"] == expected
    parsed: dict[str, Any] = json.loads(body)
    return parsed


@pytest.mark.timeout(120)
def test_a_failing_attempt_is_told_once_to_a_webhook_with_a_valid_signature(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path, receiver: str
) -> None:
    with Cluster(postgres_url, redis_url, redis_prefix, tmp_path) as cluster:
        cluster.start_executor({"TICKWORK_SECRET_KEY": KEY})
        cluster.start_agent("a")
        add_rule(cluster, receiver)
        attempt = cluster.submit("fails", FAILING)
        assert cluster.wait_for_attempt_end(attempt, 60) == "error"
        wait_until("the webhook gets the failure", lambda: len(_Receiver.got) >= 1, 30)
        time.sleep(2 * notifier_module.PASS_SECONDS)  # nothing more comes
        ((headers, body),) = _Receiver.got
        payload = check_signed(headers, body)
        assert (payload["event"], payload["attempt_id"]) == ("failed", attempt)
        assert payload["failed_tasks"][0]["task"].endswith("+fails")
        (delivery,) = deliveries(cluster)
        assert (delivery.state, delivery.tries, delivery.possible_duplicate) == ("sent", 1, False)


@pytest.mark.timeout(150)
def test_an_executor_dying_between_send_and_record_sends_once_more_marked_as_a_duplicate(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path, receiver: str
) -> None:
    with Cluster(postgres_url, redis_url, redis_prefix, tmp_path) as cluster:
        crashing = cluster.start_executor(
            {"TICKWORK_SECRET_KEY": KEY, "TICKWORK_CRASH_POINT": CRASH_AFTER_NOTIFY}
        )
        cluster.start_agent("a")
        add_rule(cluster, receiver)
        cluster.submit("fails", FAILING)
        crashing.wait_exit(60)
        assert len(_Receiver.got) == 1  # sent, then the process died before recording it

        cluster.start_executor({"TICKWORK_SECRET_KEY": KEY})
        wait_until(
            "the delivery is recorded as sent",
            lambda: [d.state for d in deliveries(cluster)] == ["sent"],
            DELIVERY_TIMEOUT_SECONDS,
            poll=0.5,
        )
        first, second = (check_signed(h, b) for h, b in _Receiver.got)
        assert first["delivery_id"] == second["delivery_id"]
        assert (first["possible_duplicate"], second["possible_duplicate"]) == (False, True)
        (delivery,) = deliveries(cluster)
        assert (delivery.tries, delivery.possible_duplicate) == (2, True)
