"""``mail>``: sends an e-mail over SMTP, with settings from params and the project's secrets.

The command names the body file inside the project, or holds the body itself as
``{data: TEXT}`` (Digdag's form; ``body:`` does the same). Params: ``subject`` and ``to``
(required), ``cc``, ``bcc``, ``from``, ``html`` (send the body as HTML), ``attach_files``
(files of the project: a path, or ``{path, filename, content_type}``), ``debug`` (write the
SMTP conversation's steps and the server's answers to the task's log). SMTP settings
``host``, ``port`` (25), ``username``, ``password``, ``tls`` and ``ssl`` (SMTPS) come from
the secrets ``mail.host`` ... first, as in Digdag, then from the params ``mail.host`` ...
or the same keys on the task itself.

``tls`` is Digdag's: left unset, STARTTLS is used whenever the server offers it (JavaMail's
``starttls.enable``, on by default in Digdag); ``tls: true`` requires it (the task fails
against a server that does not offer it); ``tls: false`` never uses it.
"""

from __future__ import annotations

import mimetypes
import smtplib
import ssl
from collections.abc import Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.shared.domain.expressions import render
from tickwork.shared.domain.numbers import whole_number
from tickwork.shared.errors import TickworkError

DEFAULT_PORT = 25
TIMEOUT_SECONDS = 30.0
SMTP_SETTINGS = ("host", "port", "username", "password", "tls", "ssl")
TLS_WHEN_OFFERED = "offered"
"""``tls`` left unset: STARTTLS when the server offers it."""


def run_mail(context: OperatorContext) -> dict[str, Any]:
    """Build the message and send it; an SMTP error fails the task."""
    params = context.message.params
    settings = smtp_settings(params, context.secrets)
    message = build_message(context, params)
    recipients = [a for key in ("to", "cc", "bcc") for a in _addresses(params.get(key), key)]
    debug = context.write_log if _flag(params.get("debug", False)) else None
    _send(settings, message, recipients, debug)
    context.write_log(f"sent {message['Subject']!r} to {len(recipients)} recipient(s)\n")
    return {}


def smtp_settings(params: dict[str, Any], secrets: dict[str, str]) -> dict[str, Any]:
    """The SMTP settings: secrets ``mail.*`` win over params ``mail.*`` and task keys."""
    given = params.get("mail")
    nested: dict[str, Any] = given if isinstance(given, dict) else {}
    settings: dict[str, Any] = {}
    for key in SMTP_SETTINGS:
        for source in (secrets.get(f"mail.{key}"), nested.get(key), params.get(key)):
            if source is not None and source != "":
                settings[key] = source
                break
    if not settings.get("host"):
        raise OperatorFailed("'mail>' needs an SMTP host: the secret mail.host or param mail.host")
    port = whole_number(settings.get("port", DEFAULT_PORT))
    if port is None:
        raise OperatorFailed(f"'mail>' port must be a number, got {settings['port']!r}")
    settings["port"] = port
    settings["ssl"] = _flag(settings.get("ssl", False))
    settings["tls"] = TLS_WHEN_OFFERED if settings.get("tls") is None else _flag(settings["tls"])
    return settings


def build_message(context: OperatorContext, params: dict[str, Any]) -> EmailMessage:
    """The e-mail: headers, the body (text or HTML), and the attachments."""
    subject, sender = params.get("subject"), params.get("from")
    if not subject:
        raise OperatorFailed("'mail>' needs a subject")
    if not _addresses(params.get("to"), "to"):
        raise OperatorFailed("'mail>' needs at least one address in 'to'")
    message = EmailMessage()
    message["Subject"] = str(subject)
    message["From"] = str(sender or "tickwork")
    message["To"] = ", ".join(_addresses(params.get("to"), "to"))
    if params.get("cc"):
        message["Cc"] = ", ".join(_addresses(params.get("cc"), "cc"))
    body = _body(context, params)
    message.set_content(body, subtype="html" if _flag(params.get("html", False)) else "plain")
    for item in _as_list(params.get("attach_files"), "attach_files"):
        _attach(context, message, item)
    return message


def _body(context: OperatorContext, params: dict[str, Any]) -> str:
    if params.get("body") is not None:
        return str(params["body"])
    command = context.message.command
    if isinstance(command, dict) and "data" in command:
        return str(command["data"])  # mail>: {data: TEXT}, rendered with the task
    if not isinstance(command, str) or not command:
        raise OperatorFailed("'mail>' needs a body file (mail>: body.txt) or 'body:'")
    template = _project_file(context, command).read_text(encoding="utf-8")
    # A body file is a template, as in Digdag: ${...} takes the task's params.
    try:
        return str(render(template, params))
    except TickworkError as exc:
        raise OperatorFailed(f"'mail>' file {command!r}: {exc}") from None


def _project_file(context: OperatorContext, name: str) -> Path:
    root = context.project_dir.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise OperatorFailed(f"'mail>' file {name!r} is outside the project")
    if not path.is_file():
        raise OperatorFailed(f"'mail>' file {name!r} does not exist")
    return path


def _attach(context: OperatorContext, message: EmailMessage, item: Any) -> None:
    spec = item if isinstance(item, dict) else {"path": item}
    path = _project_file(context, str(spec.get("path", "")))
    content_type = spec.get("content_type") or mimetypes.guess_type(path.name)[0]
    main, _, sub = (content_type or "application/octet-stream").partition("/")
    message.add_attachment(
        path.read_bytes(),
        maintype=main,
        subtype=sub or "octet-stream",
        filename=str(spec.get("filename") or path.name),
    )


def _send(
    settings: dict[str, Any],
    message: EmailMessage,
    recipients: list[str],
    debug: Callable[[str], None] | None = None,
) -> None:
    host, port = str(settings["host"]), settings["port"]
    note = debug or (lambda _text: None)
    try:
        smtp: smtplib.SMTP
        note(f"mail debug: connecting to {host}:{port}{' over SSL' if settings['ssl'] else ''}\n")
        if settings["ssl"]:
            smtp = smtplib.SMTP_SSL(
                host, port, timeout=TIMEOUT_SECONDS, context=ssl.create_default_context()
            )
        else:
            smtp = smtplib.SMTP(host, port, timeout=TIMEOUT_SECONDS)
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
        raise OperatorFailed(f"'mail>' could not send through {host}:{port}: {exc}") from None


def _addresses(value: Any, key: str) -> list[str]:
    return [str(item) for item in _as_list(value, key)]


def _as_list(value: Any, key: str) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str | dict):
        return [value]
    raise OperatorFailed(f"'mail>' {key} must be a string or a list, got {value!r}")


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)
