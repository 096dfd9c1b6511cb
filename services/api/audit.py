"""Recording each change asked of the API or the web UI in the audit log
(shared/store/audit.py).

Every route that changes something has an action in :data:`ACTIONS` (a spec holds every
non-GET route to it). A change that commits writes its row in the same transaction
(:func:`tickwork.services.api.database.write_transaction` calls :func:`pending_event`);
one refused (401, 403) or failed writes its row after the answer is made
(:func:`record_unrecorded`). A row names the token (``env:...`` or a store token's name;
``local`` when the server takes no tokens, ``unknown`` when the token was not valid), the
action and its target, the project, a summary of what was sent with every secret masked
(never a token: the Authorization header and the sign-in form's token are not read
here), the client's address as the server saw it and its user agent, and the outcome.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from flask import Response, g, request
from werkzeug.exceptions import HTTPException

from tickwork.services.api.extensions import api_config
from tickwork.shared.clock import utc_now
from tickwork.shared.errors import StoreUnavailable
from tickwork.shared.store.audit import AuditEvent, record
from tickwork.shared.store.owners import project_of

if TYPE_CHECKING:  # (auth reads the store through database, which calls this module)
    from tickwork.services.api.auth import Identity

log = logging.getLogger(__name__)

ACTIONS: dict[str, str] = {
    "projects.push_project": "project.push",
    "projects.remove_project": "project.delete",
    "secrets.set_secret": "secret.set",
    "secrets.delete_secret": "secret.delete",
    "schedules.pause_schedule": "schedule.pause",
    "schedules.resume_schedule": "schedule.resume",
    "schedules.skip_schedule": "schedule.skip",
    "schedules.backfill_schedule": "schedule.backfill",
    "attempts.start": "attempt.start",
    "attempts.kill": "attempt.kill",
    "attempts.retry": "attempt.retry",
    "tokens.create_token": "token.create",
    "tokens.revoke_token": "token.revoke",
    "notifications.test_rule": "notification.test",
    "triggers.pause_trigger": "trigger.pause",
    "triggers.resume_trigger": "trigger.resume",
    "triggers.receive_hook": "trigger.webhook",
    "pools.set_pool": "pool.set",
    "pools.delete_pool": "pool.delete",
    "ui_pools.set_pool": "pool.set",
    "ui_pools.delete_pool": "pool.delete",
    "ui_schedules.pause_trigger": "trigger.pause",
    "ui_schedules.resume_trigger": "trigger.resume",
    "ui_auth.login_submit": "ui.sign_in",
    "ui_auth.logout": "ui.sign_out",
    "ui_schedules.pause": "schedule.pause",
    "ui_schedules.resume": "schedule.resume",
    "ui_schedules.skip": "schedule.skip",
    "ui_schedules.backfill": "schedule.backfill",
    "ui_actions.start": "attempt.start",
    "ui_actions.retry": "attempt.retry",
    "ui_actions.kill": "attempt.kill",
}
"""The audit action of each route that changes something, by endpoint."""

MASKED = "***"
SECRET_WORDS = ("value", "secret", "token", "password", "csrf")
"""A member whose name holds one of these is masked (a secret's value, a sign-in token)."""
MAX_PARAMS_BYTES = 2048
MAX_READ_BYTES = 64 * 1024
"""A body larger than this is summarised by its size alone, never read here."""
MAX_TEXT = 200
RECORDED_KEY = "audit_recorded"
REFUSED_KEY = "audit_refused"


def mark_refused() -> None:
    """This request was refused though its status does not say so (a 404 that hides
    another project's id from a token limited to projects)."""
    setattr(g, REFUSED_KEY, True)


def audited_action() -> str | None:
    """The action of this request if it is a change the audit log records; else None."""
    if request.endpoint is None or request.method in ("GET", "HEAD", "OPTIONS"):
        return None
    return ACTIONS.get(request.endpoint)


ARMED_KEY = "audit_armed"


def arm_audit() -> None:
    """The request's hooks are done and its route runs: its writes are the change."""
    g.audit_armed = True


def pending_event(
    conn: Any, status: int = 200, outcome: str = "ok", *, read_body: bool = True
) -> AuditEvent | None:
    """The event of this request if it is an audited change not yet recorded; else None.
    ``read_body``: summarise the body the route has read (else only its size: the body of
    a refused or failed request may be unread, hostile or still arriving)."""
    action = audited_action()
    if action is None or g.get(RECORDED_KEY):
        return None
    if read_body and not g.get(ARMED_KEY):
        return None  # a hook's own write (a token's last use), not the change
    body = _json_body() if read_body else {}
    target, project = _target(conn, body)
    return AuditEvent(
        at=utc_now(),
        actor=_actor(),
        action=action,
        target=target,
        project=project,
        params=_params(read_body),
        client_address=request.remote_addr,
        user_agent=request.user_agent.string or None,
        status=status,
        outcome=outcome,
    )


def mark_recorded() -> None:
    """This request's event is in the log (its change committed with it)."""
    g.audit_recorded = True


def record_unrecorded(response: Response, write: Callable[[Callable[[Any], None]], None]) -> None:
    """After the answer: record this request's change if no transaction did (it was
    refused, failed or changed nothing), with its status and outcome. ``write(fn)`` runs
    ``fn(conn)`` in a transaction of its own. A store that cannot be reached loses the row,
    with a warning, not the answer."""
    status = response.status_code
    if status == 429 or audited_action() is None or g.get(RECORDED_KEY):
        return
    refused = status in (401, 403) or g.get(REFUSED_KEY)
    outcome = "refused" if refused else "ok" if status < 400 else "failed"

    # A route that ran got past every check of the request (its token, its size, its
    # media type): its body can be summarised. One refused before that is never read.
    read_body = bool(g.get(ARMED_KEY))

    def write_row(conn: Any) -> None:
        event = pending_event(conn, status, outcome, read_body=read_body)
        if event is not None:
            record(conn, event)

    try:
        write(write_row)
    except StoreUnavailable as exc:
        log.warning("audit: could not record %s %s: %s", request.method, request.path, exc)
    mark_recorded()


def _actor() -> str:
    identity: Identity | None = g.get("identity") or g.get("ui_identity")
    if identity is not None:
        return identity.name
    return "unknown" if api_config().auth_enabled else "local"


def _target(conn: Any, body: Mapping[str, Any]) -> tuple[str, str | None]:
    """What the change is about, in words (``attempt 42``), and its project's name."""
    args: Mapping[str, Any] = request.view_args or {}
    for argument in ("attempt_id", "schedule_id"):
        if argument in args:
            kind = argument.removesuffix("_id")
            return f"{kind} {args[argument]}", project_of(conn, argument, args[argument])
    endpoint = request.endpoint or ""
    if endpoint.startswith("tokens."):
        return f"token {args.get('name') or body.get('name', '?')}", None
    if endpoint.startswith("ui_auth."):
        return "web UI", None
    if endpoint.startswith(("pools.", "ui_pools.")):  # every project's: none of them
        return f"pool {args.get('pool') or _form_member('name') or '?'}", None
    if "key" in args:
        return f"secret {args['key']}", str(args["name"])
    if "workflow" in args:
        return f"workflow {args['workflow']}", str(args["name"])
    if "name" in args:
        return f"project {args['name']}", str(args["name"])
    project, workflow = body.get("project"), body.get("workflow")
    if isinstance(project, str) and isinstance(workflow, str):
        return f"workflow {workflow}", project
    return request.path, None


def _form_member(name: str) -> str | None:
    """A member of the page's form (a small one, once the route has run: a refused
    request's body is never read), else None."""
    small = (request.content_length or 0) <= MAX_READ_BYTES
    if not g.get(ARMED_KEY) or not small:
        return None
    if request.mimetype != "application/x-www-form-urlencoded":
        return None
    try:
        value = request.form.get(name)
    except HTTPException:
        return None
    return value[:MAX_TEXT] if value else None


def _json_body() -> dict[str, Any]:
    body = _read_body()
    return body if isinstance(body, dict) else {}


def _read_body() -> Any:
    """The JSON body if it is small and readable (the request checks refuse the others
    before a route runs; this runs after them, on refused requests too); else None."""
    if not request.is_json or (request.content_length or 0) > MAX_READ_BYTES:
        return None
    try:
        return request.get_json(silent=True)
    except (RecursionError, HTTPException):
        return None


def _params(read_body: bool) -> dict[str, Any]:
    """What was sent, secrets masked, cut to a summary."""
    summary: dict[str, Any] = {}
    if request.args:
        summary["query"] = _masked(request.args.to_dict())
    small = (request.content_length or 0) <= MAX_READ_BYTES
    if not read_body:
        if request.content_length:
            summary["body_bytes"] = request.content_length
    elif request.is_json:
        summary["body"] = _masked(_read_body())
    elif request.mimetype == "application/x-www-form-urlencoded" and small:
        try:
            summary["form"] = _masked(request.form.to_dict())
        except HTTPException:
            summary["form"] = None
    elif request.content_length:
        summary["body_bytes"] = request.content_length
    text = json.dumps(summary, default=str)
    if len(text) > MAX_PARAMS_BYTES:
        return {"truncated": True, "members": sorted(_members(summary))}
    return summary


def _masked(value: Any, depth: int = 0) -> Any:
    if isinstance(value, dict):
        return {
            str(k): MASKED if _is_secret(str(k)) else _masked(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_masked(v, depth + 1) for v in value[:20]]
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] + "..."
    return value


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _members(summary: Mapping[str, Any]) -> set[str]:
    found: set[str] = set()
    for part, value in summary.items():
        if isinstance(value, dict):
            found.update(f"{part}.{name}" for name in value)
    return found
