"""Notification deliveries, from the event to the target: one delivery per rule and event,
sent by the executor's notifier to a real HTTP receiver on a local port, signed with
HMAC-SHA256, tried again with back-off when the target fails, never following a redirect,
never held by a target that does not answer, and never keeping a secret in its record."""

from __future__ import annotations

import hmac
import http.server
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import Message
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlalchemy import Engine

from tests.support.servers import serve_http
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.services.executor import notifier as notifier_module
from tickwork.services.executor.notifier import Notifier, sign
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.notifications import Event
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.dsl.notifications import parse_rules
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.secrets import SecretBox
from tickwork.shared.store import notifications as store
from tickwork.shared.store import secrets as secret_store
from tickwork.shared.store.sessions import AttemptFacts, attempt_facts
from tickwork.shared.store.tables import attempts, notification_deliveries, sessions

KEY = Fernet.generate_key().decode()
BOX = SecretBox(KEY)
SIGNING_KEY = "s3cret-signing-key"
HOOK_TOKEN = "hook-token-9f8e"


@dataclass(frozen=True)
class Received:
    path: str
    headers: Message
    body: bytes


class _Receiver(http.server.BaseHTTPRequestHandler):
    """``/ok`` answers 204, ``/fail`` 500, ``/moved`` a 302 to ``/ok``, ``/hang`` nothing
    for 4 s."""

    got: ClassVar[list[Received]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.got.append(Received(self.path, self.headers, body))
        if self.path.startswith("/hang"):
            time.sleep(4)
        status = {"/fail": 500, "/moved": 302}.get(self.path.split("?")[0], 204)
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/ok")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def receiver_url() -> Iterator[str]:
    with serve_http(_Receiver) as url:
        yield url


@pytest.fixture
def receiver(receiver_url: str) -> str:
    _Receiver.got = []
    return receiver_url


def rules_text(url: str) -> str:
    return f"""\
rules:
  - name: ops
    when: [failed, recovered]
    webhook:
      url: {url}
      signing_secret: ops.key
"""


def start_attempt(engine: Engine, tmp_path: Path, rules: str) -> tuple[int, int]:
    """An attempt of a local project whose rules are ``rules``; (attempt id, project id)."""
    definition = parse_workflow_text("+t:\n  echo>: hi\n", "daily.dig", tmp_path)
    now = utc_now()
    request = RunRequest(
        definition=definition,
        project_dir=tmp_path,
        state_dir=tmp_path / "state",
        database_url="unused",
        params={},
        session_time=now.replace(microsecond=0),
    )
    with engine.begin() as conn:
        outcome = create_run_attempt(conn, request, now)
        project_id = conn.execute(
            sa.select(sessions.c.project_id).where(sessions.c.id == outcome.session_id)
        ).scalar_one()
        store.replace_rules(conn, project_id, parse_rules(rules), now)
        for name, value in (("ops.key", SIGNING_KEY), ("hook.token", HOOK_TOKEN)):
            secret_store.set_secret(
                conn, _project_name(conn, project_id), name, BOX.encrypt(value), now
            )
    return outcome.attempt_id, project_id


def _project_name(conn: sa.Connection, project_id: int) -> str:
    from tickwork.shared.store.tables import projects

    return str(
        conn.execute(sa.select(projects.c.name).where(projects.c.id == project_id)).scalar_one()
    )


def end_attempt(engine: Engine, attempt_id: int, state: AttemptState, at: datetime) -> int:
    with engine.begin() as conn:
        conn.execute(
            sa.update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(state=state.value, finished_at=at)
        )
        return store.record_attempt_end(conn, facts_of(conn, attempt_id), state, at)


def facts_of(conn: sa.Connection, attempt_id: int) -> AttemptFacts:
    facts = attempt_facts(conn, attempt_id)
    assert facts is not None
    return facts


def deliveries(engine: Engine) -> list[store.DeliveryRow]:
    with engine.connect() as conn:
        return store.list_deliveries(conn, limit=100)


def notifier(engine: Engine) -> Notifier:
    return Notifier(engine, secret_box=lambda: BOX)


def test_a_failed_attempt_sends_one_webhook_signed_with_the_rule_s_secret(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    attempt_id, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/ok"))
    assert end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now()) == 1
    # the same event recorded again (a retried transaction, a second executor) adds nothing
    with engine.begin() as conn:
        facts = facts_of(conn, attempt_id)
        assert store.record_attempt_end(conn, facts, AttemptState.ERROR, utc_now()) == 0

    assert notifier(engine).run_pass(utc_now()) == 1
    assert notifier(engine).run_pass(utc_now()) == 0

    (got,) = _Receiver.got
    timestamp = got.headers["X-Tickwork-Timestamp"]
    expected = "sha256=" + sign(SIGNING_KEY, timestamp, got.body)
    assert hmac.compare_digest(got.headers["X-Tickwork-Signature"], expected)
    body = json.loads(got.body)
    assert (body["event"], body["attempt_id"], body["rule"]) == ("failed", attempt_id, "ops")
    assert body["possible_duplicate"] is False
    assert got.headers["X-Tickwork-Delivery"] == str(body["delivery_id"])
    (delivery,) = deliveries(engine)
    assert (delivery.state, delivery.tries, delivery.last_status) == ("sent", 1, 204)


def test_recovered_is_told_only_after_a_failure(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    first, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/ok"))
    now = utc_now()
    assert end_attempt(engine, first, AttemptState.SUCCESS, now) == 0  # nothing to recover from
    second, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/ok"))
    assert end_attempt(engine, second, AttemptState.ERROR, now + timedelta(seconds=1)) == 1
    third, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/ok"))
    assert end_attempt(engine, third, AttemptState.SUCCESS, now + timedelta(seconds=2)) == 1
    assert [d.event for d in deliveries(engine)] == ["recovered", "failed"]


def test_a_target_that_fails_is_tried_again_with_back_off_then_given_up(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    attempt_id, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/fail"))
    end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now())
    now = utc_now()
    notifier(engine).run_pass(now)
    (delivery,) = deliveries(engine)
    assert (delivery.state, delivery.tries, delivery.last_status) == ("pending", 1, 500)
    assert delivery.last_error == "the webhook target answered 500"
    assert delivery.next_try_at >= now + timedelta(seconds=store.FIRST_RETRY_SECONDS - 1)
    assert notifier(engine).run_pass(now) == 0 and len(_Receiver.got) == 1  # not due yet
    later = now
    for _ in range(store.MAX_TRIES - 1):
        later += timedelta(seconds=store.MAX_RETRY_SECONDS)
        notifier(engine).run_pass(later)
    (delivery,) = deliveries(engine)
    assert (delivery.state, delivery.tries) == ("failed", store.MAX_TRIES)
    assert len(_Receiver.got) == store.MAX_TRIES


def test_a_redirect_is_not_followed(engine: Engine, tmp_path: Path, receiver: str) -> None:
    attempt_id, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/moved"))
    end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now())
    notifier(engine).run_pass(utc_now())
    assert [r.path for r in _Receiver.got] == ["/moved"]
    (delivery,) = deliveries(engine)
    assert delivery.last_error == "the webhook target answered 302 (redirects are not followed)"


def test_a_target_that_never_answers_does_not_hold_the_sender(
    engine: Engine, tmp_path: Path, receiver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notifier_module, "SEND_DEADLINE_SECONDS", 1.0)
    attempt_id, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/hang"))
    end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now())
    started = time.monotonic()
    notifier(engine).run_pass(utc_now())
    assert time.monotonic() - started < 5
    (delivery,) = deliveries(engine)
    assert (delivery.state, delivery.last_error) == ("pending", "no answer within 1s")


def test_a_secret_in_the_url_is_filled_when_sent_and_kept_out_of_the_record(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    rules = rules_text(f"{receiver}/fail?token=${{secret:hook.token}}")
    attempt_id, _ = start_attempt(engine, tmp_path, rules)
    end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now())
    notifier(engine).run_pass(utc_now())
    assert _Receiver.got[0].path == f"/fail?token={HOOK_TOKEN}"
    with engine.connect() as conn:
        record = json.dumps(
            [dict(r._mapping) for r in conn.execute(sa.select(notification_deliveries))],
            default=str,
        )
    assert HOOK_TOKEN not in record and SIGNING_KEY not in record


def test_a_claim_that_ran_out_unrecorded_is_sent_again_marked_possible_duplicate(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    attempt_id, _ = start_attempt(engine, tmp_path, rules_text(f"{receiver}/ok"))
    end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now())
    now = utc_now()
    with engine.begin() as conn:  # a sender claimed it, and died before recording
        assert len(store.claim_due(conn, now, 30)) == 1
        assert store.claim_due(conn, now, 30) == []  # held: no other sender takes it
    notifier(engine).run_pass(now + timedelta(seconds=31))
    (got,) = _Receiver.got
    assert json.loads(got.body)["possible_duplicate"] is True
    (delivery,) = deliveries(engine)
    assert (delivery.state, delivery.tries, delivery.possible_duplicate) == ("sent", 2, True)


def test_a_signing_secret_that_is_not_set_fails_the_send_naming_it(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    rules = rules_text(f"{receiver}/ok").replace("ops.key", "missing.key")
    attempt_id, _ = start_attempt(engine, tmp_path, rules)
    end_attempt(engine, attempt_id, AttemptState.ERROR, utc_now())
    notifier(engine).run_pass(utc_now())
    assert _Receiver.got == []
    (delivery,) = deliveries(engine)
    assert delivery.last_error == "the signing secret 'missing.key' is not set"


def test_a_test_event_goes_to_one_named_rule(engine: Engine, tmp_path: Path, receiver: str) -> None:
    _, project_id = start_attempt(engine, tmp_path, rules_text(f"{receiver}/ok"))
    with engine.begin() as conn:
        added = store.record_event(
            conn,
            project_id=project_id,
            workflow_name=None,
            event=Event.TEST,
            event_key="test:1",
            payload={"event": "test"},
            now=utc_now(),
            only_rule="ops",
        )
    assert added == 1
    notifier(engine).run_pass(utc_now())
    assert json.loads(_Receiver.got[0].body)["event"] == "test"


def test_an_attempt_running_longer_than_the_rule_allows_is_told_once(
    engine: Engine, tmp_path: Path, receiver: str
) -> None:
    rules = (
        f"rules:\n  - name: slow\n    when: running_longer\n    longer_than: 1m\n"
        f"    slack:\n      url: {receiver}/ok\n"
    )
    attempt_id, _ = start_attempt(engine, tmp_path, rules)
    now = utc_now()
    with engine.begin() as conn:
        conn.execute(
            sa.update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(state="running", created_at=now - timedelta(minutes=2))
        )
    assert notifier(engine).run_pass(now) == 1
    assert notifier(engine).run_pass(now + timedelta(seconds=30)) == 0  # told once
    (got,) = _Receiver.got
    assert "is still running" in json.loads(got.body)["text"]
