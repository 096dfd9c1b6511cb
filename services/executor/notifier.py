"""The executor's notification sender: a thread that sends the deliveries the store holds.

Every second it records ``running_longer`` events that came due, claims due deliveries
(each by one sender, whatever the number of executors), sends each, and records how it
went. A send runs in a thread of its own under an overall deadline, so a target that
hangs, drips its answer or never answers holds neither the executor's passes nor this
loop for longer than :data:`SEND_DEADLINE_SECONDS`. A failed send is tried again with
back-off (5 s doubling to an hour, 8 sends), then given up as failed.

Targets:

- ``webhook``: the event as a JSON body (at most :data:`MAX_BODY_BYTES`), POSTed with
  ``X-Tickwork-Delivery`` (the delivery's id: a receiver drops a repeat by it),
  ``X-Tickwork-Event``, ``X-Tickwork-Timestamp`` and, with ``signing_secret``,
  ``X-Tickwork-Signature: sha256=HEX``: HMAC-SHA256 with the secret's value over
  ``TIMESTAMP.BODY``;
- ``slack``: a Slack incoming webhook's ``{"text": ...}``, one readable line;
- ``mail``: through the project's ``mail.*`` secrets, as ``mail>`` sends.

Redirects are not followed (a 3xx is a failed send): a target may not send the body on to
another host. ``${secret:name}`` in a URL is filled from the project's secrets when it is
sent, which needs ``TICKWORK_SECRET_KEY``; no secret reaches a delivery's record (its error
names the target's kind, never its URL).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from email.message import EmailMessage
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.shared.clock import utc_now
from tickwork.shared.dispatch.celery_dispatch import CRASH_AFTER_NOTIFY, CRASH_EXIT_CODE
from tickwork.shared.domain.notifications import Target, TargetKind
from tickwork.shared.mail import MailError, read_smtp_settings, secrets_of, send_mail
from tickwork.shared.secrets import (
    SecretBox,
    SecretKeyError,
    fill_secrets,
    replace_secret_references,
    secret_references,
)
from tickwork.shared.store import notifications as store
from tickwork.shared.store.engine import read_only
from tickwork.shared.store.secrets import read_encrypted_secrets

log = logging.getLogger(__name__)

PASS_SECONDS = 1.0
LONG_RUNS_EVERY_SECONDS = 15.0
SEND_DEADLINE_SECONDS = 15.0
"""The longest one send may take, connecting and answering included."""
SOCKET_TIMEOUT_SECONDS = 10.0
"""The longest wait for one read or write of a send (the deadline bounds the whole)."""
CLAIM_SECONDS = SEND_DEADLINE_SECONDS + 5.0
"""How long a claimed delivery is a sender's: past it, another may send it again."""
MAX_BODY_BYTES = 64 * 1024
MAX_ANSWER_BYTES = 1024
USER_AGENT = "tickwork-notifications"

_MARKER = "~notification-secret~"


class SendFailed(Exception):
    """A send that did not reach its target, or that the target refused; the message
    names no secret."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Notifier:
    """Sends the store's due deliveries in a thread of its own (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        *,
        crash_point: str = "",
        secret_box: Callable[[], SecretBox] = SecretBox.from_environment,
    ) -> None:
        self.engine = engine
        self.crash_point = crash_point
        self.secret_box = secret_box
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notifier", daemon=True)
        self._long_runs_at = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        self._stop.set()
        if wait and self._thread.is_alive():
            self._thread.join(timeout=SEND_DEADLINE_SECONDS + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_pass(utc_now())
            except SQLAlchemyError as exc:
                log.warning("notification pass failed (retrying in %.0fs): %s", PASS_SECONDS, exc)
            self._stop.wait(PASS_SECONDS)

    def run_pass(self, now: datetime) -> int:
        """Record due long-run events, then send what is due; how many were sent."""
        # Reads first: on SQLite a write transaction takes the store's one writer lock.
        if time.monotonic() - self._long_runs_at >= LONG_RUNS_EVERY_SECONDS:
            with read_only(self.engine) as conn:
                watched = store.watches_long_runs(conn)
            if watched:
                with self.engine.begin() as conn:
                    store.record_long_runs(conn, now)
            self._long_runs_at = time.monotonic()
        with read_only(self.engine) as conn:
            if not store.has_due(conn, now):
                return 0
        with self.engine.begin() as conn:
            claimed = store.claim_due(conn, now, CLAIM_SECONDS)
        sent = 0
        for delivery in claimed:
            status, error = self._send(delivery)
            if self.crash_point == CRASH_AFTER_NOTIFY:
                log.error("crash point %s: exiting", CRASH_AFTER_NOTIFY)
                os._exit(CRASH_EXIT_CODE)
            with self.engine.begin() as conn:
                state = store.record_outcome(conn, delivery, utc_now(), status=status, error=error)
            level = logging.INFO if error is None else logging.WARNING
            log.log(
                level,
                "notification %s delivery_id=%d rule=%s event=%s try=%d%s",
                state,
                delivery.id,
                delivery.rule_name,
                delivery.event,
                delivery.tries,
                "" if error is None else f" error={error}",
            )
            sent += error is None
        return sent

    def _send(self, delivery: store.DeliveryRow) -> tuple[int | None, str | None]:
        """Send under the deadline; the answer's status and the error (None: sent)."""
        outcome: list[tuple[int | None, str | None]] = []

        def attempt() -> None:
            try:
                outcome.append((self._deliver(delivery), None))
            except SendFailed as exc:
                outcome.append((exc.status, str(exc)))
            except Exception as exc:  # a bug must not stop the sender: record it
                log.exception("notification delivery_id=%d failed unexpectedly", delivery.id)
                outcome.append((None, f"unexpected error: {type(exc).__name__}"))

        worker = threading.Thread(target=attempt, name=f"notify-{delivery.id}", daemon=True)
        worker.start()
        worker.join(SEND_DEADLINE_SECONDS)
        if not outcome:
            return None, f"no answer within {SEND_DEADLINE_SECONDS:.0f}s"
        return outcome[0]

    def _deliver(self, delivery: store.DeliveryRow) -> int | None:
        target = Target.from_config(delivery.target)
        secrets = self._secrets(delivery, target)
        body = _payload(delivery)
        if target.kind is TargetKind.MAIL:
            _send_mail(target, body, secrets)
            return None
        url = _filled(target.url or "", secrets)
        if target.kind is TargetKind.SLACK:
            data = json.dumps({"text": _summary(body)}).encode()
            return _post(url, data, {}, target.kind.value)
        data = json.dumps(body, sort_keys=True).encode()
        if len(data) > MAX_BODY_BYTES:
            body["failed_tasks"] = body.get("failed_tasks", [])[:1]
            data = json.dumps(body, sort_keys=True).encode()[:MAX_BODY_BYTES]
        timestamp = str(int(time.time()))
        headers = {
            "X-Tickwork-Delivery": str(delivery.id),
            "X-Tickwork-Event": delivery.event,
            "X-Tickwork-Timestamp": timestamp,
        }
        if target.signing_secret is not None:
            key = secrets.get(target.signing_secret)
            if key is None:
                raise SendFailed(f"the signing secret {target.signing_secret!r} is not set")
            headers["X-Tickwork-Signature"] = "sha256=" + sign(key, timestamp, data)
        return _post(url, data, headers, target.kind.value)

    def _secrets(self, delivery: store.DeliveryRow, target: Target) -> dict[str, str]:
        """The project secrets the target needs, decrypted; none when it needs none."""
        names = secret_references(target.url or "")
        if target.signing_secret is not None:
            names.add(target.signing_secret)
        wanted_mail = target.kind is TargetKind.MAIL
        if not names and not wanted_mail:
            return {}
        try:
            box = self.secret_box()
        except SecretKeyError as exc:
            raise SendFailed(f"cannot read the project's secrets: {exc}") from None
        with self.engine.connect() as conn:
            encrypted = read_encrypted_secrets(conn, delivery.project_id)
        values: dict[str, str] = {}
        for name, cipher in encrypted.items():
            if name in names or (wanted_mail and name.startswith("mail.")):
                try:
                    values[name] = box.decrypt(cipher, name)
                except SecretKeyError as exc:
                    raise SendFailed(str(exc)) from None
        missing = sorted(secret_references(target.url or "") - values.keys())
        if missing:
            raise SendFailed(f"secret {missing[0]!r} is not set for this project")
        return values


def sign(key: str, timestamp: str, body: bytes) -> str:
    """The hex HMAC-SHA256 a webhook's ``X-Tickwork-Signature`` carries."""
    return hmac.new(key.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def _payload(delivery: store.DeliveryRow) -> dict[str, Any]:
    return {
        **delivery.payload,
        "rule": delivery.rule_name,
        "delivery_id": delivery.id,
        "possible_duplicate": delivery.possible_duplicate,
    }


def _filled(url: str, secrets: dict[str, str]) -> str:
    return str(fill_secrets(replace_secret_references(url, _MARKER), _MARKER, secrets))


SUMMARIES = {
    "failed": "failed",
    "sla_missed": "missed its SLA",
    "recovered": "succeeded again after a failure",
    "running_longer": "is still running",
    "test": "sent a test notification",
}


def _summary(body: dict[str, Any]) -> str:
    """One readable line of the event: what, where, which attempt, the first failure."""
    what = SUMMARIES.get(str(body.get("event")), str(body.get("event")))
    line = (
        f"tickwork: {body.get('project')}/{body.get('workflow')} {what} "
        f"(attempt {body.get('attempt_id')}, session {body.get('session_time')})"
    )
    failed = body.get("failed_tasks") or []
    if failed:
        first = failed[0]
        line += f": {first.get('task')}: {first.get('message') or 'failed'}"
    if body.get("possible_duplicate"):
        line += " [possible duplicate]"
    return line


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx


_OPENER = urllib.request.build_opener(_NoRedirects())


def _post(url: str, data: bytes, headers: dict[str, str], kind: str) -> int:
    """POST ``data`` as JSON; the status of a 2xx answer, else SendFailed naming ``kind``
    (never the URL, which may hold a secret)."""
    if not url.startswith(("http://", "https://")):
        raise SendFailed(f"the {kind} URL is not an http:// or https:// URL")
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("User-Agent", USER_AGENT)
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with _OPENER.open(request, timeout=SOCKET_TIMEOUT_SECONDS) as answer:
            answer.read(MAX_ANSWER_BYTES)
            status = int(answer.status)
    except urllib.error.HTTPError as exc:
        where = " (redirects are not followed)" if 300 <= exc.code < 400 else ""
        raise SendFailed(f"the {kind} target answered {exc.code}{where}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SendFailed(
            f"the {kind} target could not be reached: {type(reason).__name__}"
        ) from None
    return status


def _send_mail(target: Target, body: dict[str, Any], secrets: dict[str, str]) -> None:
    try:
        settings = read_smtp_settings([secrets_of(secrets)], "a mail rule")
    except MailError as exc:
        raise SendFailed(str(exc)) from None
    message = EmailMessage()
    message["Subject"] = target.subject or _summary(body)[:200]
    message["From"] = str(secrets.get("mail.from") or f"tickwork@{settings['host']}")
    message["To"] = ", ".join(target.to)
    message.set_content(_summary(body) + "\n\n" + json.dumps(body, indent=2, sort_keys=True))
    try:
        send_mail(settings, message, list(target.to), timeout=SOCKET_TIMEOUT_SECONDS)
    except MailError as exc:
        raise SendFailed(str(exc)) from None
