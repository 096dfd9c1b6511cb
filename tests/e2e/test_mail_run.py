"""``mail>`` in a whole ``tickwork run``: the workflow's mail reaches a real SMTP server
(aiosmtpd on a free port), with the session's values rendered into it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._run import Project
from tests.support.smtp import Inbox, smtp_server

pytestmark = pytest.mark.e2e


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    with smtp_server() as server:
        yield server


def test_a_workflow_mails_its_report_after_the_task_before_it(
    tmp_path: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    # Given a workflow that counts rows, then mails the count from a body file
    project = Project.empty(tmp_path)
    project.write("report.txt", "rows loaded on ${session_date}: ${rows}\n")
    project.write(
        "daily.dig",
        """
        +count:
          sh>: echo rows=42 > "$TICKWORK_OUTPUT"
        +notify:
          mail>: report.txt
          subject: Daily load ${session_date}
          to: [team@example.test]
          from: tickwork@example.test
        """,
    )

    # When it runs with the SMTP server given as params
    run = project.run(
        "daily.dig", "-t", "2026-11-30", "-p", "mail.host=127.0.0.1", "-p", f"mail.port={port}"
    )

    # Then the mail arrived once, rendered with the session and the stored count
    assert run.exit_code == 0, run.explain()
    assert len(inbox.envelopes) == 1
    recipients, message = inbox.envelopes[0]
    assert recipients == ["team@example.test"]
    assert message["Subject"] == "Daily load 2026-11-30"
    body = message.get_payload(decode=True)
    assert isinstance(body, bytes)
    assert body.decode().strip() == "rows loaded on 2026-11-30: 42"


def test_a_mail_body_given_as_data_is_rendered_with_the_session(
    tmp_path: Path, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    project = Project.empty(tmp_path)
    project.write(
        "daily.dig",
        """
        +notify:
          mail>:
            data: "done on ${session_date}"
          subject: Done
          to: [team@example.test]
          debug: true
        """,
    )
    run = project.run(
        "daily.dig", "-t", "2026-11-30", "-p", "mail.host=127.0.0.1", "-p", f"mail.port={port}"
    )
    assert run.exit_code == 0, run.explain()
    ((_, message),) = inbox.envelopes
    body = message.get_payload(decode=True)
    assert isinstance(body, bytes) and body.decode().strip() == "done on 2026-11-30"
