"""What a person does to runs from the UI: start a workflow, retry an attempt, kill one.

Each runs the REST API's own function (services/api/routes/attempts.py) with its
validation, then says what happened in a flash message on the page it leads to. Actions
that cannot be undone (kill, retry everything) are confirmed first: in the browser by the
form's ``data-confirm``, after which static/actions.js marks the form ``confirmed``;
without script, the server answers an unconfirmed form with a page that asks.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from flask import Blueprint, flash, redirect, render_template, request
from werkzeug.wrappers import Response as WerkzeugResponse

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.routes.attempts import (
    RetryBody,
    SessionTaken,
    StartBody,
    retry_from_body,
    start_from_body,
)
from tickwork.services.api.ui.forms import FormInvalid, api_errors, model_of
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.entries import BadEntry, nested_params, session_time_named
from tickwork.shared.domain.schedule import resolve_timezone, written_timezone
from tickwork.shared.domain.states import KILLABLE_ATTEMPT_STATES
from tickwork.shared.errors import Conflict
from tickwork.shared.store import catalog, history
from tickwork.shared.store.history import AttemptView
from tickwork.shared.store.starts import kill_attempt

blueprint = Blueprint("ui_actions", __name__, url_prefix="/ui")

PARAM_ROWS = 5
"""Empty key/value rows the start form offers (a script may add more)."""
MAX_PARAM_ROWS = 200
MAX_PARAMS_JSON = 1_000_000
"""Characters the params JSON field may hold."""
JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number"}
JSON_KINDS.update({bool: "true or false", type(None): "null"})
RETRY_MODES = ("failed", "all", "from")
CONFIRMED = "yes"


@blueprint.get("/projects/<name>/workflows/<workflow>/start")
def start_form(name: str, workflow: str) -> str:
    """The form that starts a session of the workflow by hand."""
    return _start_page(name, workflow, {"session_time": "now", "params_json": ""}, [], {})


@blueprint.post("/projects/<name>/workflows/<workflow>/start")
def start(name: str, workflow: str) -> WerkzeugResponse | tuple[str, int]:
    """Start the session the form names; on to its attempt, or back to the form."""
    entered = {
        "session_time": request.form.get("session_time", "").strip(),
        "params_json": request.form.get("params_json", ""),
    }
    rows = _param_rows()
    try:
        target = _workflow_target(name, workflow)
        session_time = _session_time(entered["session_time"], target)
        params = _params(entered["params_json"], rows)
        values: dict[str, Any] = {"project": name, "workflow": workflow, "params": params}
        if session_time is not None:
            values["session_time"] = session_time.isoformat()
        body = model_of(StartBody, values)
        with api_errors(), write_transaction() as conn:
            result = start_from_body(conn, body, utc_now())
    except FormInvalid as invalid:
        return _start_page(name, workflow, entered, rows, invalid.errors), 400
    except SessionTaken as taken:
        existing = taken.result
        conflict = {"attempt_id": existing.attempt_id, "session_id": existing.session_id}
        return _start_page(name, workflow, entered, rows, {}, conflict), 409
    flash(f"Started attempt {result.attempt_id} of {name}/{workflow}.", "success")
    return _to_attempt(result.attempt_id)


@blueprint.get("/attempts/<id:attempt_id>/retry")
def retry_form(attempt_id: int) -> str:
    """The retry form: everything, what did not succeed, or from a chosen task."""
    mode = request.args.get("mode", "failed")
    return _retry_page(attempt_id, mode if mode in RETRY_MODES else "failed")


@blueprint.post("/attempts/<id:attempt_id>/retry")
def retry(attempt_id: int) -> WerkzeugResponse | str:
    """A new attempt of the same session, as the form asks; on to the new attempt."""
    mode = request.form.get("mode", "")
    if mode == "all" and request.form.get("confirmed") != CONFIRMED:
        return _retry_page(attempt_id, "all")
    values: dict[str, Any] = {"mode": mode}
    if mode == "from":
        values["from"] = request.form.get("from", "")
    try:
        body = model_of(RetryBody, values)
        with api_errors(), write_transaction() as conn:
            new_id = retry_from_body(conn, attempt_id, body, utc_now())
    except FormInvalid as invalid:
        flash(f"Not retried: {_first_error(invalid)}", "error")
        return _to_attempt(attempt_id)
    except Conflict as conflict:
        flash(f"Not retried: {conflict}", "error")
        return _to_attempt(attempt_id)
    what = {"all": "every task", "failed": "what did not succeed", "from": body.from_task}
    flash(f"Retrying attempt {attempt_id} ({what[mode]}) as attempt {new_id}.", "success")
    return _to_attempt(new_id)


@blueprint.get("/attempts/<id:attempt_id>/kill")
def kill_form(attempt_id: int) -> str:
    """The page that asks before an attempt is killed."""
    return _kill_page(attempt_id)


@blueprint.post("/attempts/<id:attempt_id>/kill")
def kill(attempt_id: int) -> WerkzeugResponse | str:
    """Kill the attempt once confirmed: it moves to ``canceling`` and ends ``killed``."""
    if request.form.get("confirmed") != CONFIRMED:
        return _kill_page(attempt_id)
    try:
        with write_transaction() as conn:
            kill_attempt(conn, attempt_id, utc_now())
    except Conflict as conflict:
        flash(f"Not killed: {conflict}", "error")
    else:
        flash(f"Killing attempt {attempt_id}: its running tasks are being stopped.", "success")
    return _to_attempt(attempt_id)


def _start_page(
    name: str,
    workflow: str,
    values: dict[str, str],
    rows: list[tuple[str, str]],
    errors: dict[str, str],
    conflict: dict[str, int] | None = None,
) -> str:
    """The start form with what was entered, the errors and a conflict it met."""
    target = _workflow_target(name, workflow)
    shown_rows = rows + [("", "")] * max(PARAM_ROWS - len(rows), 1)
    return render_template(
        "ui/actions_start.html",
        project=name,
        workflow=workflow,
        timezone=written_timezone(target["timezone"]),
        zone=target["timezone"],
        last=target["last"],
        schedule=target["schedule"],
        values=values,
        rows=shown_rows,
        errors=errors,
        conflict=conflict,
    )


def _workflow_target(name: str, workflow: str) -> dict[str, Any]:
    """The workflow of the project's latest revision: its zone, schedule and last session."""
    with read_connection() as conn:
        project = catalog.get_project(conn, name)
        revision = catalog.find_revision(conn, int(project.id), None)
        row = catalog.find_workflow(conn, revision.id, workflow)
        last = catalog.last_sessions(conn, [(row.project_id, row.name)])
    config = dict(row.config or {})
    return {
        "timezone": resolve_timezone(str(config.get("timezone", "UTC"))),
        "schedule": config.get("schedule"),
        "last": last.get((row.project_id, row.name)),
    }


def _session_time(raw: str, target: dict[str, Any]) -> datetime | None:
    """The session time the field names, as ``tickwork start --session`` reads it (empty:
    the API's default)."""
    if not raw:
        return None
    last = target["last"]
    try:
        return session_time_named(
            raw, utc_now(), target["timezone"], None if last is None else last.session_time
        )
    except BadEntry as error:
        raise FormInvalid({"session_time": str(error)}) from None


def _param_rows() -> list[tuple[str, str]]:
    """The key/value rows the form sent that hold something, in order."""
    keys = request.form.getlist("param_key")[:MAX_PARAM_ROWS]
    values = request.form.getlist("param_value")[:MAX_PARAM_ROWS]
    rows = [(key.strip(), value) for key, value in zip(keys, values, strict=False)]
    return [(key, value) for key, value in rows if key or value]


def _params(raw_json: str, rows: list[tuple[str, str]]) -> dict[str, Any]:
    """Session params: the JSON object of the ``params_json`` field, then the rows over it
    (a dotted key nests, as ``--param a.b=v`` does; row values are text). FormInvalid
    names the field (``params_json`` or ``params``) and the place that is wrong."""
    base = _params_object(raw_json)
    for number, (key, value) in enumerate(rows, start=1):
        if not key:
            raise FormInvalid({"params": f"row {number}: the value {value[:40]!r} has no key"})
    try:
        return nested_params(rows, into=base)
    except BadEntry as error:
        raise FormInvalid({"params": str(error)}) from None


def _params_object(raw_json: str) -> dict[str, Any]:
    """The JSON object the ``params_json`` field holds (empty: none)."""
    if not raw_json.strip():
        return {}
    if len(raw_json) > MAX_PARAMS_JSON:
        raise FormInvalid({"params_json": f"longer than {MAX_PARAMS_JSON:,} characters"})
    try:
        value = json.loads(raw_json)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise FormInvalid({"params_json": f"not JSON at {where}: {error.msg}"}) from None
    except RecursionError:
        raise FormInvalid({"params_json": "nested too deeply"}) from None
    if not isinstance(value, dict):
        kind = JSON_KINDS.get(type(value), "a value")
        raise FormInvalid({"params_json": f"must be a JSON object ({{...}}), not {kind}"})
    return value


def _retry_page(attempt_id: int, mode: str) -> str:
    """The retry form of an attempt, ``mode`` chosen."""
    with read_connection() as conn:
        attempt = history.get_attempt_view(conn, attempt_id)
        nodes = history.list_task_tree(conn, attempt_id)
    tasks = [{"full_name": n.task.full_name, "state": n.task.state.value} for n in nodes]
    return render_template(
        "ui/actions_retry.html", attempt=_attempt_summary(attempt), tasks=tasks, mode=mode
    )


def _kill_page(attempt_id: int) -> str:
    with read_connection() as conn:
        attempt = history.get_attempt_view(conn, attempt_id)
    return render_template("ui/actions_kill.html", attempt=_attempt_summary(attempt))


def _attempt_summary(attempt: AttemptView) -> dict[str, Any]:
    """What the action pages show of an attempt."""
    return {
        "id": attempt.id,
        "project": attempt.project_name,
        "workflow": attempt.workflow_name,
        "session_time": attempt.session_time,
        "timezone": attempt.timezone,
        "state": attempt.state.value,
        "done": attempt.state.is_done,
        "killable": attempt.state in KILLABLE_ATTEMPT_STATES,
    }


def _first_error(invalid: FormInvalid) -> str:
    field, message = next(iter(invalid.errors.items()))
    return f"{field}: {message}" if field else message


def _to_attempt(attempt_id: int) -> WerkzeugResponse:
    return redirect(f"/ui/attempts/{attempt_id}", code=303)
