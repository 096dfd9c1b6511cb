"""A real SMTP server for ``mail>`` specs: aiosmtpd on a free port, keeping what it got."""

from __future__ import annotations

import email
import ipaddress
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from email.message import Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.servers import find_free_port


class Inbox:
    """What the SMTP server received: (recipients, message) in arrival order."""

    def __init__(self) -> None:
        self.envelopes: list[tuple[list[str], Message]] = []
        self.over_tls: list[bool] = []  # whether each came after STARTTLS

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else b""
        self.envelopes.append((list(envelope.rcpt_tos), email.message_from_bytes(content)))
        self.over_tls.append(session.ssl is not None)
        return "250 OK"


@contextmanager
def smtp_server(tls_context: ssl.SSLContext | None = None) -> Iterator[tuple[Inbox, int]]:
    """An SMTP server on 127.0.0.1, its inbox and port; stopped when the block ends. With
    ``tls_context`` it offers STARTTLS with that context's certificate."""
    inbox = Inbox()
    port = find_free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, tls_context=tls_context)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by its own key, and that key, as PEM files in
    ``directory`` (a client trusts it with ``SSL_CERT_FILE``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def server_tls_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """A server's TLS context presenting the certificate at ``cert_path``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context
