"""``/ui/pools``: every pool with its slots, those in use, the tasks waiting and what is
free, as ``GET /api/pools`` reads them; an admin (of a token without project globs) sets a
pool's slots and deletes one here.

The forms run the REST API's own functions (services/api/routes/pools.py) with its
validation: a value it refuses is shown beside the field it names, and nothing changes.
"""

from __future__ import annotations

import re

from flask import Blueprint, flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from tickwork.services.api.auth import may
from tickwork.services.api.database import read_connection
from tickwork.services.api.routes.pools import (
    BAD_NAME,
    PoolIn,
    remove_pool,
    set_pool_slots,
)
from tickwork.services.api.scope import current_identity
from tickwork.services.api.ui.forms import FormInvalid, filled, model_of
from tickwork.shared.domain.pools import POOL_NAME
from tickwork.shared.store import pools as pool_store

blueprint = Blueprint("ui_pools", __name__, url_prefix="/ui")
SET_FIELDS = ("name", "slots", "description")
SIGNED_NUMBER = re.compile(r"-?[0-9]{1,18}")


def may_change_pools() -> bool:
    """Whether the page offers its forms: sign-in off, or an admin token without globs."""
    identity = current_identity()
    return identity is None or (may(identity.role, "admin") and not identity.projects)


@blueprint.get("/pools")
def pools_page() -> str:
    """Every pool and what it holds now."""
    return _page()


@blueprint.post("/pools")
def set_pool() -> WerkzeugResponse | tuple[str, int]:
    """Set a pool's slots (and description), creating it if there is none."""
    values = filled(request.form, SET_FIELDS)
    name = values.get("name", "")
    errors = {} if POOL_NAME.fullmatch(name) else {"name": BAD_NAME if name else "missing"}
    given: dict[str, object] = {k: v for k, v in values.items() if k != "name"}
    if "slots" in values:
        given["slots"] = _number(values["slots"])
    try:
        body = model_of(PoolIn, given)
    except FormInvalid as invalid:
        return _page(values=values, errors={**errors, **invalid.errors}), 400
    if errors:
        return _page(values=values, errors=errors), 400
    usage, created = set_pool_slots(name, body)
    verb = "Created" if created else "Set"
    flash(f"{verb} pool {usage.name}: {usage.slots} slots, {usage.used} in use.", "success")
    return redirect(url_for("ui_pools.pools_page"), code=303)


@blueprint.post("/pools/<pool>/delete")
def delete_pool(pool: str) -> WerkzeugResponse:
    """Delete a pool: its ready tasks wait until a pool of that name is set again."""
    remove_pool(pool)
    flash(f"Deleted pool {pool}: its tasks wait until it is set again.", "success")
    return redirect(url_for("ui_pools.pools_page"), code=303)


def _number(value: str) -> int | str:
    """A field's whole number, a negative one too (for the model to say it is below 0);
    anything else as it is, for the model to refuse."""
    return int(value) if SIGNED_NUMBER.fullmatch(value) else value


def _page(values: dict[str, str] | None = None, errors: dict[str, str] | None = None) -> str:
    with read_connection() as conn:
        found = pool_store.list_pools(conn)
    return render_template(
        "ui/pools.html",
        pools=found,
        may_change=may_change_pools(),
        values=values or {},
        errors=errors or {},
    )
