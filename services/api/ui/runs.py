"""The sessions and attempts lists: newest first, filtered by project and workflow (exact
names, or parts of names in any case), state and session time, a keyset page at a time
(a deep page costs what the first does).

The filters live in the query string, so a filtered list is a link to paste; a filter
that cannot be used is said on the page (400), never a server error. Each list has a
``/live`` twin rendering only its table, which ``static/ui.js`` fetches again while
something on it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, render_template, request

from tickwork.services.api import times
from tickwork.services.api.database import read_connection
from tickwork.services.api.errors import ApiProblem
from tickwork.services.api.paging import decode_cursor, next_cursor
from tickwork.services.api.scope import visible_ids
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store import history

blueprint = Blueprint("ui_runs", __name__, url_prefix="/ui")

PAGE_SIZE = 50
"""Rows of a list page."""
NAME_LIMIT = 255
"""Longest project or workflow name a filter takes (as the REST API's)."""


@dataclass(frozen=True)
class ListQuery:
    """What a list shows, read from the query string: its filters and the id to start
    after (None: the first page)."""

    filters: history.RunFilters
    after: int | None


class BadFilter(ValueError):
    """A filter of the query string that cannot be used; its message says why."""


def _name(parameter: str) -> str | None:
    value = request.args.get(parameter, "").strip()
    if len(value) > NAME_LIMIT:
        raise BadFilter(f"{parameter}: at most {NAME_LIMIT} characters")
    return value or None


def _state() -> AttemptState | None:
    value = request.args.get("state", "").strip()
    if not value:
        return None
    try:
        return AttemptState(value)
    except ValueError:
        known = ", ".join(state.value for state in AttemptState)
        raise BadFilter(f"state: {value[:40]!r} is not one of {known}") from None


def _time(parameter: str) -> datetime | None:
    value = request.args.get(parameter, "").strip()
    if not value:
        return None
    try:
        return times.parse_time(value, parameter=parameter)
    except ApiProblem as problem:
        raise BadFilter(problem.detail) from None


def _after() -> int | None:
    cursor = request.args.get("cursor", "").strip()
    if not cursor:
        return None
    try:
        return decode_cursor(cursor)
    except ApiProblem as problem:
        raise BadFilter(problem.detail) from None


def read_query() -> ListQuery:
    """The list's filters from the query string; BadFilter for one that cannot be used."""
    filters = history.RunFilters(
        project=_name("project"),
        workflow=_name("workflow"),
        project_contains=_name("project_contains"),
        workflow_contains=_name("workflow_contains"),
        state=_state(),
        time_from=_time("from"),
        time_to=_time("to"),
        project_ids=visible_ids(),
    )
    if filters.time_from and filters.time_to and filters.time_to <= filters.time_from:
        raise BadFilter("to: must be later than from")
    return ListQuery(filters, _after())


Loader = Callable[[ListQuery], tuple[Sequence[Any], int | None]]
"""Reads one page of a list: its rows and the id to continue after (None: last page)."""


def any_running(items: Sequence[history.AttemptView | history.SessionView]) -> bool:
    """Whether an attempt of ``items`` (or the last attempt of a session) has not ended:
    its row will change by itself, so the page fetches its list again often."""
    for item in items:
        attempt = item.last_attempt if isinstance(item, history.SessionView) else item
        if attempt is not None and not attempt.state.is_done:
            return True
    return False


def _render(template: str, load: Loader) -> tuple[str, int]:
    """The list page ``template``: the page of rows ``load`` reads for the query's
    filters, or, with no rows, the reason the filters cannot be used (400)."""
    states = [state.value for state in AttemptState]
    live_url = f"{request.path.removesuffix('/live')}/live"
    if request.query_string:
        live_url += "?" + request.query_string.decode("ascii", "replace")
    context: dict[str, Any] = {"states": states, "live_url": live_url}
    try:
        query = read_query()
    except BadFilter as problem:
        html = render_template(template, items=[], cursor=None, problem=problem, **context)
        return html, 400
    items, after = load(query)
    cursor = next_cursor(after)
    context["live_active"] = any_running(items)
    html = render_template(template, items=items, cursor=cursor, problem=None, **context)
    return html, 200


def _page_of(list_page: Callable[..., history.Page[Any]]) -> Loader:
    """A loader reading one page of ``list_page`` (the store's sessions or attempts list,
    which take the same filters) in a read connection."""

    def load(query: ListQuery) -> tuple[Sequence[Any], int | None]:
        with read_connection() as conn:
            page = list_page(conn, where=query.filters, after=query.after, limit=PAGE_SIZE)
        return page.items, page.next_after

    return load


@blueprint.get("/sessions")
def sessions_page() -> tuple[str, int]:
    """Sessions, newest first, each with its last attempt."""
    return _render("ui/runs_sessions.html", _page_of(history.list_sessions))


@blueprint.get("/sessions/live")
def sessions_live() -> tuple[str, int]:
    """The sessions page's table alone, for the page to put in place while it runs."""
    return _render("ui/runs_sessions_table.html", _page_of(history.list_sessions))


@blueprint.get("/attempts")
def attempts_page() -> tuple[str, int]:
    """Attempts, newest first."""
    return _render("ui/runs_attempts.html", _page_of(history.list_attempts))


@blueprint.get("/attempts/live")
def attempts_live() -> tuple[str, int]:
    """The attempts page's table alone, for the page to put in place while it runs."""
    return _render("ui/runs_attempts_table.html", _page_of(history.list_attempts))
