"""Triggers: list them beside schedules, pause and resume them, and the webhook that
fires one.

- ``GET /api/triggers?project=`` and ``GET /api/triggers/{id}`` (with its latest firings);
- ``POST /api/triggers/{id}/pause`` · ``/resume`` (an operator's, as for schedules);
- ``POST /api/hooks/{name}/{hook}``: a call of the webhook ``hook`` of project ``name``.
  It needs no token: the call is signed. ``X-Tickwork-Timestamp`` (Unix seconds, within
  five minutes of the server's clock), ``X-Tickwork-Signature: sha256=HEX`` (HMAC-SHA256
  of ``TIMESTAMP.BODY`` under the project secret the webhook names) and
  ``X-Tickwork-Delivery`` (the call's id: the same id again starts nothing more) must be
  given. A bad or missing signature is a 401 and changes nothing; an unknown hook is a 404.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any

from apiflask import APIBlueprint
from flask import request
from pydantic import BaseModel, Field

from tickwork.services.api.body import signed_body
from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import ApiProblem, InvalidBody
from tickwork.services.api.models import RequestQuery
from tickwork.services.api.scope import visible_ids
from tickwork.services.api.times import format_time
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.triggers import TriggerSpec
from tickwork.shared.errors import NotFound
from tickwork.shared.secrets import SecretBox, SecretKeyError
from tickwork.shared.store import triggers as store
from tickwork.shared.store.secrets import read_encrypted_secrets
from tickwork.shared.store.trigger_firing import fire

blueprint = APIBlueprint("triggers", __name__, tag="Triggers")

MAX_CLOCK_SKEW_SECONDS = 300
MAX_DELIVERY_ID_CHARS = 128
UNSIGNED = "the call is not signed with the webhook's secret"


class TriggerQuery(RequestQuery):
    project: str | None = Field(None, max_length=255, description="Project name.")


class TriggerOut(BaseModel):
    """A trigger: what starts its workflow, whether it is paused, when it last fired and
    what it started."""

    id: str
    project: str
    workflow: str
    kind: str = Field(description="after (another workflow's success) or webhook.")
    upstream: str | None = Field(description="PROJECT/WORKFLOW an `after` trigger waits for.")
    hook: str | None = Field(description="A webhook's name: POST /api/hooks/{project}/{hook}.")
    paused: bool
    fired_count: int
    last_fired_at: str | None
    last_attempt_id: str | None
    last_error: str | None


class FiringOut(BaseModel):
    event: str
    attempt_id: str | None
    session_id: str | None
    fired_at: str


class TriggerDetail(TriggerOut):
    firings: list[FiringOut]


class TriggerList(BaseModel):
    items: list[TriggerOut]


class HookOut(BaseModel):
    """The attempt a webhook call started (or had started, for a delivery seen before)."""

    attempt_id: str
    session_id: str
    created: bool


def trigger_item(row: store.TriggerRow) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "project": row.project,
        "workflow": row.workflow,
        "kind": row.kind,
        "upstream": None
        if row.upstream_workflow is None
        else f"{row.upstream_project}/{row.upstream_workflow}",
        "hook": row.hook_name,
        "paused": row.paused_at is not None,
        "fired_count": row.fired_count,
        "last_fired_at": None if row.last_fired_at is None else format_time(row.last_fired_at),
        "last_attempt_id": None if row.last_attempt_id is None else str(row.last_attempt_id),
        "last_error": row.last_error,
    }


@blueprint.get("/api/triggers")
@blueprint.input(TriggerQuery, location="query", arg_name="query")
@blueprint.output(TriggerList)
def list_triggers(query: TriggerQuery) -> dict[str, Any]:
    """Every trigger of the projects the token covers."""
    visible = visible_ids()
    with read_connection() as conn:
        rows = store.list_triggers(
            conn,
            project_ids=None if visible is None else sorted(visible),
            project=query.project,
        )
    return {"items": [trigger_item(r) for r in rows]}


@blueprint.get("/api/triggers/<id:trigger_id>")
@blueprint.output(TriggerDetail)
@blueprint.doc(responses={404: "No such trigger"})
def get_trigger(trigger_id: int) -> dict[str, Any]:
    """One trigger, with its latest firings: what fired, when, what it started."""
    with read_connection() as conn:
        row = store.get_trigger(conn, trigger_id)
        firings = store.list_firings(conn, trigger_id)
    return {
        **trigger_item(row),
        "firings": [
            {
                "event": f["event_key"],
                "attempt_id": None if f["attempt_id"] is None else str(f["attempt_id"]),
                "session_id": None if f["session_id"] is None else str(f["session_id"]),
                "fired_at": format_time(f["fired_at"]),
            }
            for f in firings
        ],
    }


@blueprint.post("/api/triggers/<id:trigger_id>/pause")
@blueprint.output(TriggerOut)
@blueprint.doc(responses={404: "No such trigger"})
def pause_trigger(trigger_id: int) -> dict[str, Any]:
    """Pause: nothing fires it until it is resumed (what would have is not caught up)."""
    with write_transaction() as conn:
        return trigger_item(store.set_paused(conn, trigger_id, True, utc_now()))


@blueprint.post("/api/triggers/<id:trigger_id>/resume")
@blueprint.output(TriggerOut)
@blueprint.doc(responses={404: "No such trigger"})
def resume_trigger(trigger_id: int) -> dict[str, Any]:
    """Resume a paused trigger."""
    with write_transaction() as conn:
        return trigger_item(store.set_paused(conn, trigger_id, False, utc_now()))


@blueprint.post("/api/hooks/<name>/<hook>")
@blueprint.output(HookOut, status_code=201)
@blueprint.doc(
    responses={
        200: "This delivery id was seen before: the attempt it started",
        401: "The call is not signed with the webhook's secret, or its timestamp is stale",
        404: "No such webhook",
        409: "The trigger is paused",
        413: "The body is too large",
        422: "The part of the body the webhook gives as params is not a JSON object",
    }
)
@signed_body
def receive_hook(name: str, hook: str) -> tuple[dict[str, Any], int]:
    """A signed call of a webhook trigger: starts its workflow once per delivery id."""
    body = request.get_data(cache=True)
    timestamp = request.headers.get("X-Tickwork-Timestamp", "")
    signature = request.headers.get("X-Tickwork-Signature", "")
    delivery = request.headers.get("X-Tickwork-Delivery", "")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
        raise ApiProblem(401, f"{UNSIGNED} (X-Tickwork-Timestamp missing or stale)")
    if not delivery or len(delivery) > MAX_DELIVERY_ID_CHARS or not delivery.isprintable():
        raise ApiProblem(401, f"{UNSIGNED} (X-Tickwork-Delivery missing or too long)")
    now = utc_now()
    with write_transaction() as conn:
        trigger = store.find_webhook(conn, name, hook)
        key = _signing_key(conn, trigger)
        expected = (
            "sha256="
            + hmac.new(key.encode(), timestamp.encode() + b"." + body, "sha256").hexdigest()
        )
        if key == "" or not hmac.compare_digest(signature.encode(), expected.encode()):
            raise ApiProblem(401, UNSIGNED)
        assert trigger is not None  # a missing hook has no key
        if trigger.paused_at is not None:
            raise ApiProblem(409, f"the trigger {trigger.id} is paused")
        spec = TriggerSpec.from_config(trigger.config)
        pointer = spec.webhook.params if spec.webhook is not None else None
        params = {
            "hook": {"name": hook, "delivery": delivery, "received_at": format_time(now)},
            **_params(body, pointer),
        }
        result = fire(
            conn,
            trigger,
            event_key=f"delivery:{delivery}",
            session_time=now,
            params=params,
            now=now,
        )
        if result is None:
            row = store.get_trigger(conn, trigger.id)
            raise ApiProblem(409, f"the trigger cannot start its workflow: {row.last_error}")
    answer = {
        "attempt_id": str(result.attempt_id),
        "session_id": str(result.session_id),
        "created": result.created,
    }
    return answer, 201 if result.created else 200


def _signing_key(conn: Any, trigger: store.TriggerRow | None) -> str:
    """The webhook's secret's value; "" when there is no such hook or secret (a 401, as a
    bad signature: the answer says nothing of what exists). A server that cannot read
    secrets is a 503."""
    if trigger is None:
        raise NotFound("no such webhook")
    spec = TriggerSpec.from_config(trigger.config)
    if spec.webhook is None:
        return ""
    cipher = read_encrypted_secrets(conn, trigger.project_id).get(spec.webhook.secret)
    if cipher is None:
        return ""
    try:
        return SecretBox.from_environment().decrypt(cipher, spec.webhook.secret)
    except SecretKeyError as exc:
        raise ApiProblem(503, f"the server cannot read the webhook's secret: {exc}") from None


def _params(body: bytes, pointer: str | None) -> dict[str, Any]:
    """The part of the body the webhook gives as params (none without a pointer)."""
    if pointer is None:
        return {}
    try:
        data = json.loads(body.decode("utf-8")) if body.strip() else None
    except (UnicodeDecodeError, ValueError):
        raise InvalidBody(
            "", "the body is not JSON, but the webhook reads params from it"
        ) from None
    value: Any = data
    for part in pointer.split("/")[1:] if pointer else []:
        step = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            raise InvalidBody(pointer, "the body has nothing here, where the webhook reads params")
    if not isinstance(value, dict):
        raise InvalidBody(pointer, "the webhook's params must be a JSON object")
    return value
