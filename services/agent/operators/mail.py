"""``mail>``: sends an e-mail over SMTP, with settings from params and the project's secrets.

The command names the body file inside the project, or holds the body itself as
``{data: TEXT}`` (Digdag's form; ``body:`` does the same). Params: ``subject`` and ``to``
(required), ``cc``, ``bcc``, ``from``, ``html`` (send the body as HTML), ``attach_files``
(files of the project: a path, or ``{path, filename, content_type}``), ``debug`` (write the
SMTP conversation's steps and the server's answers to the task's log). SMTP settings
``host``, ``port`` (25), ``username``, ``password``, ``tls`` and ``ssl`` (SMTPS) come from
the secrets ``mail.host`` ... first, as in Digdag, then from the params ``mail.host`` ...
or the same keys on the task itself; :mod:`tickwork.shared.mail` holds the conversation
(``tls`` as Digdag reads it).
"""

from __future__ import annotations

import mimetypes
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.shared.domain.expressions import render
from tickwork.shared.errors import TickworkError
from tickwork.shared.mail import MailError, flag, read_smtp_settings, secrets_of, send_mail


def run_mail(context: OperatorContext) -> dict[str, Any]:
    """Build the message and send it; an SMTP error fails the task."""
    params = context.message.params
    settings = smtp_settings(params, context.secrets)
    message = build_message(context, params)
    recipients = [a for key in ("to", "cc", "bcc") for a in _addresses(params.get(key), key)]
    debug = context.write_log if flag(params.get("debug", False)) else None
    try:
        send_mail(settings, message, recipients, debug)
    except MailError as exc:
        raise OperatorFailed(f"'mail>' {exc}") from None
    context.write_log(f"sent {message['Subject']!r} to {len(recipients)} recipient(s)\n")
    return {}


def smtp_settings(params: dict[str, Any], secrets: dict[str, str]) -> dict[str, Any]:
    """The SMTP settings: secrets ``mail.*`` win over params ``mail.*`` and task keys."""
    given = params.get("mail")
    nested: dict[str, Any] = given if isinstance(given, dict) else {}
    try:
        return read_smtp_settings([secrets_of(secrets), nested, params], "'mail>'")
    except MailError as exc:
        raise OperatorFailed(str(exc)) from None


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
    message.set_content(body, subtype="html" if flag(params.get("html", False)) else "plain")
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
