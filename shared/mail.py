"""Sending a mail over SMTP: the settings (``host``, ``port``, ``username``, ``password``,
``tls``, ``ssl``) and the conversation, for ``mail>`` on agents and for notification rules
on the executor.

``tls`` is Digdag's: left unset, STARTTLS is used whenever the server offers it (JavaMail's
``starttls.enable``, on by default in Digdag); ``tls: true`` requires it; ``tls: false``
never uses it.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Callable, Mapping, Sequence
from email.message import EmailMessage
from typing import Any

from tickwork.shared.domain.numbers import whole_number
from tickwork.shared.errors import TickworkError

DEFAULT_PORT = 25
TIMEOUT_SECONDS = 30.0
SMTP_SETTINGS = ("host", "port", "username", "password", "tls", "ssl")
TLS_WHEN_OFFERED = "offered"
"""``tls`` left unset: STARTTLS when the server offers it."""


class MailError(TickworkError):
    """Settings that cannot be used, or a server that refused or could not be reached."""


def secrets_of(secrets: Mapping[str, str]) -> dict[str, str]:
    """The ``mail.*`` secrets as settings (``mail.host`` -> ``host``)."""
    return {k.removeprefix("mail."): v for k, v in secrets.items() if k.startswith("mail.")}


def read_smtp_settings(sources: Sequence[Mapping[str, Any]], who: str) -> dict[str, Any]:
    """Each setting from the first of ``sources`` that has it (not empty); ``who`` (such as
    ``'mail>'``) names the user in errors."""
    settings: dict[str, Any] = {}
    for key in SMTP_SETTINGS:
        for source in sources:
            value = source.get(key)
            if value is not None and value != "":
                settings[key] = value
                break
    if not settings.get("host"):
        raise MailError(f"{who} needs an SMTP host: the secret mail.host or param mail.host")
    port = whole_number(settings.get("port", DEFAULT_PORT))
    if port is None:
        raise MailError(f"{who} port must be a number, got {settings['port']!r}")
    settings["port"] = port
    settings["ssl"] = flag(settings.get("ssl", False))
    settings["tls"] = TLS_WHEN_OFFERED if settings.get("tls") is None else flag(settings["tls"])
    return settings


def flag(value: Any) -> bool:
    """A setting's truth: ``true``/``yes``/``1`` as text, or the value's own."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def send_mail(
    settings: Mapping[str, Any],
    message: EmailMessage,
    recipients: list[str],
    debug: Callable[[str], None] | None = None,
    *,
    timeout: float = TIMEOUT_SECONDS,
) -> None:
    """Send ``message`` to ``recipients`` through the server ``settings`` name; ``debug``
    is told each step of the conversation. MailError when it cannot."""
    host, port = str(settings["host"]), settings["port"]
    note = debug or (lambda _text: None)
    try:
        smtp: smtplib.SMTP
        note(f"mail debug: connecting to {host}:{port}{' over SSL' if settings['ssl'] else ''}\n")
        if settings["ssl"]:
            smtp = smtplib.SMTP_SSL(
                host, port, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
        with smtp:
            code, greeting = smtp.ehlo()
            note(f"mail debug: EHLO {code} {greeting.decode(errors='replace')}\n")
            tls = settings["tls"]
            if tls is True or (tls == TLS_WHEN_OFFERED and smtp.has_extn("starttls")):
                code, answer = smtp.starttls(context=ssl.create_default_context())
                note(f"mail debug: STARTTLS {code} {answer.decode(errors='replace')}\n")
            elif tls == TLS_WHEN_OFFERED:
                note("mail debug: the server offers no STARTTLS: sending without TLS\n")
            if settings.get("username"):
                code, answer = smtp.login(
                    str(settings["username"]), str(settings.get("password", ""))
                )
                note(f"mail debug: AUTH {code} {answer.decode(errors='replace')}\n")
            refused = smtp.send_message(message, to_addrs=recipients)
            note(f"mail debug: sent; refused recipients: {refused or 'none'}\n")
    except (smtplib.SMTPException, OSError) as exc:
        raise MailError(f"could not send through {host}:{port}: {exc}") from None
