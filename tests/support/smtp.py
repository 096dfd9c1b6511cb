"""A real SMTP server for ``mail>`` specs: aiosmtpd on a free port, keeping what it got."""

from __future__ import annotations

import email
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope, Session

from tests.support.servers import find_free_port


class Inbox:
    """What the SMTP server received: (recipients, message) in arrival order."""

    def __init__(self) -> None:
        self.envelopes: list[tuple[list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else b""
        self.envelopes.append((list(envelope.rcpt_tos), email.message_from_bytes(content)))
        return "250 OK"


@contextmanager
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    """An SMTP server on 127.0.0.1, its inbox and port; stopped when the block ends."""
    inbox = Inbox()
    port = find_free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()
