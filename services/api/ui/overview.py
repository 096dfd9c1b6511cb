"""The overview at ``/ui/``: what runs now, what failed in the last day and where, what the
schedules do next, which schedules need attention, and the times they missed.

Each section shows a bounded number of rows and links to the list that holds the rest.
"""

from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, render_template

from tickwork.services.api.database import read_connection
from tickwork.services.api.scope import visible_ids
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.schedule_policies import MissedReason
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store import dashboard, history

blueprint = Blueprint("ui_overview", __name__, url_prefix="/ui")

SECTION_ROWS = 20
"""Most rows a section shows; a "more" link leads to the rest."""
FAILURE_WINDOW = timedelta(hours=24)
"""How far back the overview looks for failures."""
MISSED_REASONS = {
    MissedReason.CATCHUP.value: "dropped by the catch-up policy",
    MissedReason.OVERLAP.value: "skipped by the overlap policy: a session was still running",
    MissedReason.SKIPPED.value: "skipped by a user ahead of time",
    MissedReason.EDITED.value: "the schedule changed while they were due",
}
"""What each reason a time was missed means, in a sentence."""


@blueprint.get("/")
def overview() -> str:
    """The overview page."""
    return _render("ui/overview.html")


@blueprint.get("/overview/live")
def overview_live() -> str:
    """The overview's sections alone, for the page to put in place while something runs."""
    return _render("ui/overview_sections.html")


def _render(template: str) -> str:
    since = utc_now() - FAILURE_WINDOW
    visible = visible_ids()  # a token limited to projects sees only theirs
    running_filters = history.RunFilters(state=AttemptState.RUNNING, project_ids=visible)
    with read_connection() as conn:
        running = history.list_attempts(conn, where=running_filters, limit=SECTION_ROWS)
        failures = dashboard.recent_failures(conn, since, SECTION_ROWS + 1, visible)
        next_runs = dashboard.next_runs(conn, SECTION_ROWS + 1, visible)
        troubled = dashboard.troubled_schedules(conn, SECTION_ROWS + 1, visible)
        missed = dashboard.recent_missed(conn, SECTION_ROWS + 1, visible)
    return render_template(
        template,
        rows=SECTION_ROWS,
        running=running.items,
        more_running=running.next_after is not None,
        failures=failures,
        next_runs=next_runs,
        troubled=troubled,
        missed=missed,
        missed_reasons=MISSED_REASONS,
    )
