"""``/ui/audit``: the audit log for admins (the page guard holds it to them, by
services/api/auth.py ADMIN_ENDPOINTS), with the filters of ``GET /api/audit`` (the
same query model and the same read), newest first, a page at a time."""

from __future__ import annotations

from flask import Blueprint, render_template, request
from pydantic import ValidationError

from tickwork.services.api.database import read_connection
from tickwork.services.api.errors import InvalidParameter
from tickwork.services.api.paging import cursor_after, next_cursor, page_limit
from tickwork.services.api.routes.audit import AuditQuery
from tickwork.shared.store.audit import list_events

blueprint = Blueprint("ui_audit", __name__, url_prefix="/ui")
FILTERS = ("since", "until", "actor", "action", "project")
PAGE_SIZE = 100


@blueprint.get("/audit")
def audit_page() -> str | tuple[str, int]:
    """Who changed what, from where, and how it ended."""
    given = {name: value for name, value in request.args.items() if value.strip()}
    filters = {name: given.get(name, "") for name in FILTERS}
    try:
        query = AuditQuery.model_validate({"limit": PAGE_SIZE, **given})
        where = query.filters()
        after = cursor_after(query)
    except (ValidationError, InvalidParameter) as exc:
        problem = _problem_text(exc)
        html = render_template("ui/audit.html", events=[], filters=filters, problem=problem)
        return html, 400
    with read_connection() as conn:
        events, more = list_events(conn, where, after=after, limit=page_limit(query))
    return render_template(
        "ui/audit.html",
        events=events,
        filters=filters,
        problem=None,
        next_cursor=next_cursor(more),
    )


def _problem_text(exc: ValidationError | InvalidParameter) -> str:
    if isinstance(exc, InvalidParameter):
        return str(exc.detail)
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}"
