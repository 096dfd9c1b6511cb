"""``mail>`` against a real SMTP server (aiosmtpd on a free port): headers, recipients, the
body from a project file, ``{data: ...}`` or ``body:``, HTML, attachments, SMTP settings
from secrets winning over params, STARTTLS as Digdag uses it (whenever offered unless
``tls: false``; required with ``tls: true``), and ``debug``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.smtp import Inbox, self_signed_certificate, server_tls_context, smtp_server
from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.services.agent.operators.mail import run_mail
from tickwork.shared.dispatch.messages import TaskMessage


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    with smtp_server() as server:
        yield server


PARAMS = {"subject": "Daily", "to": ["a@x.test"], "from": "bot@x.test"}


def at(port: int) -> dict[str, str]:
    """The secrets of the SMTP server on ``port``."""
    return {"mail.host": "127.0.0.1", "mail.port": str(port)}


def run(
    tmp_path: Path, command: str | None, params: dict[str, Any], secrets: dict[str, str]
) -> None:
    message = TaskMessage(1, 1, 1, "+wf+mail", "mail", command, params, str(tmp_path))
    with (tmp_path / "task.log").open("w") as log_file:
        run_mail(OperatorContext(message, log_file, tmp_path / "task.log", secrets=secrets))


def test_the_body_file_goes_to_every_recipient(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    (tmp_path / "body.txt").write_text("the report is ready\n")
    params = {"subject": "Daily", "to": ["a@x.test"], "cc": "c@x.test", "bcc": ["b@x.test"]}
    params["from"] = "bot@x.test"
    run(tmp_path, "body.txt", params, {"mail.host": "127.0.0.1", "mail.port": str(port)})
    ((recipients, received),) = inbox.envelopes
    assert sorted(recipients) == ["a@x.test", "b@x.test", "c@x.test"]
    assert (received["Subject"], received["From"], received["To"]) == (
        "Daily",
        "bot@x.test",
        "a@x.test",
    )
    assert received["Cc"] == "c@x.test" and received["Bcc"] is None
    assert received.get_payload(decode=True).decode().strip() == "the report is ready"
    assert "sent 'Daily' to 3 recipient(s)" in (tmp_path / "task.log").read_text()


def test_html_body_and_an_attachment(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    params = {
        "subject": "s",
        "to": "a@x.test",
        "body": "<b>hi</b>",
        "html": True,
        "attach_files": [{"path": "data.csv", "filename": "report.csv"}],
        "mail": {"host": "127.0.0.1", "port": port},
    }
    run(tmp_path, None, params, {})
    ((_, received),) = inbox.envelopes
    parts = list(received.walk())
    html = next(p for p in parts if p.get_content_type() == "text/html")
    attached = next(p for p in parts if p.get_filename() == "report.csv")
    assert html.get_payload(decode=True).decode().strip() == "<b>hi</b>"
    assert attached.get_payload(decode=True) == b"a,b\n1,2\n"


def test_the_secret_host_wins_over_the_param(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    params = {"subject": "s", "to": "a@x.test", "body": "b", "host": "unreachable.invalid"}
    run(tmp_path, None, params, {"mail.host": "127.0.0.1", "mail.port": str(port)})
    assert len(inbox.envelopes) == 1


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"to": "a@x.test", "body": "b"}, "needs a subject"),
        ({"subject": "s", "body": "b"}, "at least one address"),
        ({"subject": "s", "to": "a@x.test"}, "needs a body file"),
    ],
)
def test_missing_options_fail_clearly(
    tmp_path: Path, params: dict[str, Any], error: str, smtp: tuple[Inbox, int]
) -> None:
    _, port = smtp
    with pytest.raises(OperatorFailed, match=error):
        run(tmp_path, None, params, {"mail.host": "127.0.0.1", "mail.port": str(port)})


def test_no_host_fails_naming_the_secret(tmp_path: Path) -> None:
    with pytest.raises(OperatorFailed, match=r"SMTP host: the secret mail.host"):
        run(tmp_path, None, {"subject": "s", "to": "a@x.test", "body": "b"}, {})


def test_a_body_file_outside_the_project_is_refused(
    tmp_path: Path, smtp: tuple[Inbox, int]
) -> None:
    _, port = smtp
    params = {"subject": "s", "to": "a@x.test"}
    with pytest.raises(OperatorFailed, match="outside the project"):
        run(
            tmp_path, "../../etc/passwd", params, {"mail.host": "127.0.0.1", "mail.port": str(port)}
        )


def test_the_body_may_be_given_as_data_in_the_command(
    tmp_path: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    message = TaskMessage(
        1, 1, 1, "+wf+mail", "mail", {"data": "inline body"}, PARAMS, str(tmp_path)
    )
    with (tmp_path / "task.log").open("w") as log_file:
        context = OperatorContext(message, log_file, tmp_path / "task.log", secrets=at(port))
        run_mail(context)
    ((_, received),) = inbox.envelopes
    assert received.get_payload(decode=True).decode().strip() == "inline body"


def test_debug_writes_the_smtp_conversation_to_the_log(
    tmp_path: Path, smtp: tuple[Inbox, int]
) -> None:
    _, port = smtp
    run(tmp_path, None, {**PARAMS, "body": "hi", "debug": True}, at(port))
    log = (tmp_path / "task.log").read_text()
    assert f"mail debug: connecting to 127.0.0.1:{port}" in log
    assert "mail debug: EHLO 250" in log and "offers no STARTTLS" in log
    assert "refused recipients: none" in log


def test_tls_true_requires_starttls(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    with pytest.raises(OperatorFailed, match="STARTTLS extension not supported"):
        run(tmp_path, None, {**PARAMS, "body": "hi"}, {**at(port), "mail.tls": "true"})
    assert inbox.envelopes == []


@pytest.fixture
def tls_smtp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Inbox, int]]:
    """A server offering STARTTLS with a certificate this process trusts."""
    cert_path, key_path = self_signed_certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))
    with smtp_server(server_tls_context(cert_path, key_path)) as server:
        yield server


def test_starttls_is_used_when_offered_unless_tls_is_false(
    tmp_path: Path, tls_smtp: tuple[Inbox, int]
) -> None:
    inbox, port = tls_smtp
    run(tmp_path, None, {**PARAMS, "body": "by default"}, at(port))
    run(tmp_path, None, {**PARAMS, "body": "refused"}, {**at(port), "mail.tls": "false"})
    assert inbox.over_tls == [True, False]
