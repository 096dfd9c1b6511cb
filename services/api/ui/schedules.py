"""The schedules' pages: every schedule, one schedule with its next and missed times, and
its controls (pause, resume, skip, backfill with a preview of the sessions it creates).

The pages render the records of shared/store/schedule_reads.py, the reads the REST API
serialises. The controls run the REST API's own functions (services/api/routes/schedules.py)
with its validation; a value it refuses is shown beside the field it names, and nothing
changes.
"""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as WerkzeugResponse

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.paging import decode_cursor, encode_cursor
from tickwork.services.api.routes.schedules import (
    BackfillIn,
    SkipIn,
    plan_backfill,
    skip_session_times,
)
from tickwork.services.api.scope import visible_ids
from tickwork.services.api.ui.forms import FormInvalid, api_errors, filled, model_of, whole_number
from tickwork.shared.clock import utc_now
from tickwork.shared.display import time_text
from tickwork.shared.domain.schedule_policies import MissedReason
from tickwork.shared.store import schedule_reads
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store import triggers as trigger_store
from tickwork.shared.store.schedule_reads import ScheduleFilters, ScheduleSummary
from tickwork.shared.store.schedules import ScheduleRow

blueprint = Blueprint("ui_schedules", __name__, url_prefix="/ui")

PAGE_SIZE = 50
PROJECT_CHOICES = 500
PAUSED_CHOICES = {"yes": True, "no": False}
SKIP_FIELDS = ("to", "count")
BACKFILL_FIELDS = ("from", "to", "count")

MISSED_REASONS = {
    MissedReason.CATCHUP: "dropped by the catch-up policy (the scheduler was down or behind)",
    MissedReason.OVERLAP: "skipped by the overlap policy (the session before was still running)",
    MissedReason.SKIPPED: "skipped by hand",
    MissedReason.EDITED: "the schedule was changed while they were due",
}


@blueprint.get("/schedules")
def schedule_list() -> str:
    """Active schedules, newest first, a page at a time: ``project`` (only its), ``q``
    (part of a project or workflow name, any case), ``paused`` (``yes`` or ``no``)."""
    project = request.args.get("project") or None
    q = request.args.get("q", "").strip()[:255]
    paused = request.args.get("paused", "")
    cursor = request.args.get("cursor")
    visible = visible_ids()
    filters = ScheduleFilters(
        project=project, q=q or None, paused=PAUSED_CHOICES.get(paused), project_ids=visible
    )
    with read_connection() as conn:
        page = schedule_reads.list_schedule_page(
            conn, filters, after=decode_cursor(cursor) if cursor else None, limit=PAGE_SIZE
        )
        names = schedule_reads.scheduled_project_names(conn, PROJECT_CHOICES, visible)
        found_triggers = trigger_store.list_triggers(
            conn, project_ids=None if visible is None else sorted(visible), project=project
        )
    return render_template(
        "ui/schedules.html",
        items=page.items,
        triggers=found_triggers,
        project=project,
        q=q,
        paused=paused if paused in PAUSED_CHOICES else "",
        project_names=names,
        cursor=None if page.next_after is None else encode_cursor(page.next_after),
    )


@blueprint.post("/triggers/<id:trigger_id>/pause")
def pause_trigger(trigger_id: int) -> WerkzeugResponse:
    """Pause a trigger: nothing fires it until it is resumed."""
    with write_transaction() as conn:
        row = trigger_store.set_paused(conn, trigger_id, True, utc_now())
    flash(f"Paused the trigger of {row.project}/{row.workflow}.", "success")
    return redirect(url_for("ui_schedules.schedule_list") + "#triggers", code=303)


@blueprint.post("/triggers/<id:trigger_id>/resume")
def resume_trigger(trigger_id: int) -> WerkzeugResponse:
    """Resume a paused trigger."""
    with write_transaction() as conn:
        row = trigger_store.set_paused(conn, trigger_id, False, utc_now())
    flash(f"Resumed the trigger of {row.project}/{row.workflow}.", "success")
    return redirect(url_for("ui_schedules.schedule_list") + "#triggers", code=303)


@blueprint.get("/schedules/<id:schedule_id>")
def schedule_page(schedule_id: int) -> str:
    """One schedule: its times, state, missed times and controls."""
    return _detail_page(schedule_id)


@blueprint.post("/schedules/<id:schedule_id>/pause")
def pause(schedule_id: int) -> WerkzeugResponse:
    """Pause the schedule: the session times due from now on do not run."""
    with write_transaction() as conn:
        row = schedule_store.get_schedule(conn, schedule_id)
        changed = schedule_store.pause_schedule(conn, schedule_id, utc_now())
    name = _name(row)
    flash(f"Paused {name}." if changed else f"{name} was already paused.", "success")
    return _back_to(schedule_id)


@blueprint.post("/schedules/<id:schedule_id>/resume")
def resume(schedule_id: int) -> WerkzeugResponse:
    """Resume the schedule; with ``replay`` the times due while it was paused run too."""
    replay = request.form.get("replay") == "yes"
    with write_transaction() as conn:
        row = schedule_store.get_schedule(conn, schedule_id)
        changed = schedule_store.resume_schedule(conn, schedule_id, utc_now(), replay=replay)
    name = _name(row)
    if not changed:
        flash(f"{name} was not paused.", "success")
    elif replay:
        flash(f"Resumed {name}; the times due while it was paused run now.", "success")
    else:
        flash(f"Resumed {name}; the times due while it was paused were skipped.", "success")
    return _back_to(schedule_id)


@blueprint.post("/schedules/<id:schedule_id>/skip")
def skip(schedule_id: int) -> WerkzeugResponse | tuple[str, int]:
    """Skip the upcoming session times before a time, or the next ``count`` of them."""
    values = filled(request.form, SKIP_FIELDS)
    try:
        body = model_of(SkipIn, _numbers(values))
        with api_errors(), write_transaction() as conn:
            row, skipped = skip_session_times(conn, schedule_id, body, utc_now())
    except FormInvalid as invalid:
        return _detail_page(schedule_id, form="skip", values=values, errors=invalid.errors), 400
    if skipped:
        zone = row.timezone
        flash(
            f"Skipped {len(skipped)} session time{'s' if len(skipped) != 1 else ''} of "
            f"{_name(row)}: {_shown(skipped[0], zone)} to {_shown(skipped[-1], zone)}.",
            "success",
        )
    else:
        flash(f"Nothing to skip: {_name(row)} has no session time before then.", "success")
    return _back_to(schedule_id)


@blueprint.get("/schedules/<id:schedule_id>/backfill")
def backfill_preview(schedule_id: int) -> str | tuple[str, int]:
    """The sessions a backfill would create (a dry run), with a button that runs it."""
    values = filled(request.args, BACKFILL_FIELDS)
    parallel = request.args.get("parallel") == "yes"
    try:
        body = model_of(BackfillIn, {**_numbers(values), "parallel": parallel, "dry_run": True})
        with api_errors(), read_connection() as conn:
            row, plan = plan_backfill(conn, schedule_id, body, utc_now())
    except FormInvalid as invalid:
        return _detail_page(schedule_id, form="backfill", values=values, errors=invalid.errors), 400
    return render_template(
        "ui/schedules_backfill.html",
        schedule=ScheduleSummary(row, None),
        values=values,
        parallel=parallel,
        created=plan.created,
        existing=plan.existing,
    )


@blueprint.post("/schedules/<id:schedule_id>/backfill")
def backfill(schedule_id: int) -> WerkzeugResponse | tuple[str, int]:
    """Create the backfill's sessions (those that exist already are kept)."""
    values = filled(request.form, BACKFILL_FIELDS)
    parallel = request.form.get("parallel") == "yes"
    try:
        body = model_of(BackfillIn, {**_numbers(values), "parallel": parallel})
        with api_errors(), write_transaction() as conn:
            row, plan = plan_backfill(conn, schedule_id, body, utc_now())
    except FormInvalid as invalid:
        return _detail_page(schedule_id, form="backfill", values=values, errors=invalid.errors), 400
    flash(
        f"Backfill of {_name(row)}: created {len(plan.created)}, {len(plan.existing)} existed.",
        "success",
    )
    return _back_to(schedule_id)


def _detail_page(
    schedule_id: int,
    *,
    form: str | None = None,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> str:
    """The schedule's page; ``form`` names the form whose ``values`` were refused."""
    with read_connection() as conn:
        detail = schedule_reads.get_schedule_detail(conn, schedule_id)
    return render_template(
        "ui/schedules_detail.html",
        schedule=detail.summary,
        next_times=detail.next_times,
        missed=detail.missed,
        missed_reasons=MISSED_REASONS,
        form=form,
        values=values or {},
        errors=errors or {},
    )


def _numbers(values: dict[str, str]) -> dict[str, object]:
    """The form's values with ``count`` as a number (when it is one)."""
    found: dict[str, object] = dict(values)
    if "count" in values:
        found["count"] = whole_number(values["count"])
    return found


def _name(row: ScheduleRow) -> str:
    return f"{row.project_name}/{row.workflow_name}"


def _shown(instant: datetime, zone: str) -> str:
    """A session time in the schedule's zone, to the second, as a message says it."""
    return time_text(instant, zone, sep=" ")


def _back_to(schedule_id: int) -> WerkzeugResponse:
    return redirect(url_for("ui_schedules.schedule_page", schedule_id=schedule_id), code=303)
