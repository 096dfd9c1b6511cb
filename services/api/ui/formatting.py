"""How pages show values, as Jinja filters over the formatters of shared/display.py:
times in the workflow's zone with UTC on hover, durations, sizes, states (their colours
come from shared/state_colours.py, served as /ui/states.css). Every template uses these;
none formats on its own."""

from __future__ import annotations

import hashlib
from datetime import datetime
from functools import cache
from urllib.parse import urlencode

from flask import Blueprint, Flask, Response, request
from markupsafe import Markup, escape
from werkzeug.wrappers import Response as WerkzeugResponse

from tickwork.shared.clock import utc_now
from tickwork.shared.display import (
    as_instant,
    duration_text,
    running_for_text,
    size_text,
    time_text,
    utc_text,
)
from tickwork.shared.state_colours import states_stylesheet

blueprint = Blueprint("ui_formatting", __name__, url_prefix="/ui")


def when(value: datetime | str | None, zone: str | None = None) -> Markup:
    """A ``<time>`` element: the time in ``zone`` (else as given) to the second, with its
    UTC instant in ``datetime`` and on hover, and the zone in ``data-zone`` when one is
    given (a script may show the time in another zone); ``-`` for nothing."""
    if value is None or value == "":
        return Markup("-")
    instant = as_instant(value)
    utc, shown = utc_text(instant), time_text(instant, zone, sep=" ")
    zone_attribute = f' data-zone="{escape(zone)}"' if zone else ""
    # ISO times hold no markup; plain formatting keeps a 2,000-row page fast.
    return Markup(f'<time datetime="{utc}" title="{utc}"{zone_attribute}>{shown}</time>')


def when_text(value: datetime | str | None, zone: str | None = None) -> str:
    """The text :func:`when` shows, as plain text (for a ``title`` or a label)."""
    if value is None or value == "":
        return "-"
    return time_text(as_instant(value), zone, sep=" ")


def running_for(start: datetime | str | float | None) -> str:
    """How long a running thing that started at ``start`` has been running (``3m 04s``)."""
    return running_for_text(start, utc_now())


def state_badge(state: str | None) -> Markup:
    """A state as a badge; its class ``state-NAME`` takes the state's colour."""
    name = str(state or "-")
    return Markup(f'<span class="state state-{escape(name)}">{escape(name)}</span>')


@cache
def _stylesheet() -> tuple[bytes, str]:
    body = states_stylesheet().encode()
    return body, hashlib.sha256(body).hexdigest()[:16]


@blueprint.get("/states.css")
def states_css() -> WerkzeugResponse:
    """The state colours as a stylesheet: ``--state-NAME`` and ``.state-NAME``."""
    body, digest = _stylesheet()
    response = Response(body, mimetype="text/css")
    response.set_etag(digest)
    response.cache_control.public = True
    response.cache_control.max_age = 3600
    return response.make_conditional(request)


def query_with(**changes: object) -> str:
    """This page's query string with ``changes`` applied (``None`` drops a key): how a
    page links to itself with another filter or page, keeping the rest."""
    values = {key: value for key, value in request.args.items()}
    for key, value in changes.items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = str(value)
    return urlencode(values)


def register(app: Flask) -> None:
    """Make the filters and helpers available to every template."""
    app.add_template_global(query_with, "query_with")
    app.add_template_filter(when, "when")
    app.add_template_filter(when_text, "when_text")
    app.add_template_filter(duration_text, "duration")
    app.add_template_filter(size_text, "size")
    app.add_template_filter(running_for, "running_for")
    app.add_template_filter(state_badge, "state")
    app.register_blueprint(blueprint)
