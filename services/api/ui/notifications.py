"""``/ui/notifications``: the deliveries of the projects' notification rules, newest first
(``failed`` for those whose last try failed), with the filters and the read of
``GET /api/notifications``."""

from __future__ import annotations

from flask import Blueprint, render_template, request
from pydantic import ValidationError

from tickwork.services.api.errors import InvalidParameter
from tickwork.services.api.routes.notifications import DeliveryQuery, read_deliveries

blueprint = Blueprint("ui_notifications", __name__, url_prefix="/ui")
FILTERS = ("project", "rule")
PAGE_SIZE = 100


@blueprint.get("/notifications")
def notifications_page() -> str | tuple[str, int]:
    """What the notification rules sent, where, and how it went."""
    given = {name: value for name, value in request.args.items() if value.strip()}
    filters = {name: given.get(name, "") for name in FILTERS}
    failed = given.get("failed") in ("true", "1", "on")
    try:
        query = DeliveryQuery.model_validate(
            {
                "limit": PAGE_SIZE,
                **{k: v for k, v in given.items() if k != "failed"},
                "failed": failed,
            }
        )
        rows, cursor = read_deliveries(query)
    except (ValidationError, InvalidParameter) as exc:
        problem = str(exc.detail) if isinstance(exc, InvalidParameter) else _first(exc)
        html = render_template(
            "ui/notifications.html", deliveries=[], filters=filters, failed=failed, problem=problem
        )
        return html, 400
    return render_template(
        "ui/notifications.html",
        deliveries=rows,
        filters=filters,
        failed=failed,
        problem=None,
        next_cursor=cursor,
    )


def _first(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
