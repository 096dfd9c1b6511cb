"""How pages show values: times in the workflow's zone with UTC on hover, durations,
states. Registered as Jinja filters; every template uses these, none formats on its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flask import Flask, request
from markupsafe import Markup, escape

STATE_CLASSES = {
    "success": "ok",
    "error": "bad",
    "killed": "bad",
    "canceled": "muted",
    "canceling": "warn",
    "running": "live",
    "queued": "wait",
    "planned": "wait",
    "blocked": "wait",
    "ready": "wait",
    "retry_waiting": "warn",
    "delayed": "warn",
    "created": "wait",
}


def _zone(name: str | None) -> ZoneInfo | None:
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def when(value: datetime | str | None, zone: str | None = None) -> Markup:
    """A ``<time>`` element: the time in ``zone`` (else as given) to the second, with its
    UTC instant in ``datetime`` and on hover; ``-`` for nothing."""
    if value is None or value == "":
        return Markup("-")
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    shown = moment.astimezone(_zone(zone) or moment.tzinfo).replace(microsecond=0)
    utc = moment.astimezone(UTC).replace(microsecond=0)
    utc_text = utc.isoformat().replace("+00:00", "Z")
    shown_text = utc_text if shown.utcoffset() == timedelta(0) else shown.isoformat()
    # ISO times hold no markup; plain formatting keeps a 2,000-row page fast.
    return Markup(
        f'<time datetime="{utc_text}" title="{utc_text}">{shown_text.replace("T", " ")}</time>'
    )


def duration(seconds: float | None) -> str:
    """``1.2s``, ``3m 04s``, ``2h 05m``; ``-`` for nothing."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def state_badge(state: str | None) -> Markup:
    """A state as a coloured badge (its class says its kind: ok, bad, live, wait, ...)."""
    name = str(state or "-")
    kind = STATE_CLASSES.get(name, "muted")
    return Markup(f'<span class="state state-{kind}">{escape(name)}</span>')


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
    app.add_template_filter(duration, "duration")
    app.add_template_filter(state_badge, "state")
