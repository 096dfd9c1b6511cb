"""The retention policy: how long finished history is kept, declared once for every
service (the scheduler, the API, ``tickwork db prune``). Its prune is shared/store/retention.py;
this module holds no SQL, so that a command's help can list the settings fast.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tickwork.shared.config import Setting, SettingValues, invalid

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", re.IGNORECASE)
_UNITS = {"d": "days", "": "days", "h": "hours", "m": "minutes", "s": "seconds"}
_OFF = ("0", "off")


def parse_duration(raw: str) -> timedelta | None:
    """``90d``, ``12h``, ``30m``, ``45s`` or a plain number of days; None for ``0`` or
    ``off`` (keep everything). ValueError for anything else."""
    if raw.strip().lower() in _OFF:
        return None
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise ValueError(f"expected a duration such as 90d, 12h or 30m, or off; got {raw!r}")
    number, unit = match.groups()
    duration = timedelta(**{_UNITS[unit.lower()]: float(number)})
    return duration if duration > timedelta(0) else None


def duration_setting(values: Mapping[str, str], name: str) -> timedelta | None:
    """The setting ``name`` as a duration (None: keep for ever); InvalidConfig otherwise."""
    try:
        return parse_duration(values[name])
    except ValueError as exc:
        raise invalid(name, str(exc)) from None


def revisions_setting(values: Mapping[str, str], name: str) -> int | None:
    """The setting ``name`` as a count of revisions (None: all); InvalidConfig otherwise."""
    raw = values[name].strip().lower()
    if raw in _OFF:
        return None
    if not raw.isdigit():
        raise invalid(name, f"expected a whole number of revisions, or off; got {values[name]!r}")
    return int(raw)


RETENTION_SETTINGS = (
    Setting(
        "TICKWORK_RETENTION",
        "90d",
        "how long finished sessions are kept (90d, 12h, 30m; a number is days); 0 or off: all",
        duration_setting,
    ),
    Setting(
        "TICKWORK_LOG_RETENTION",
        "",
        "how long task logs' text is kept; default: TICKWORK_RETENTION; 0 or off: all",
        duration_setting,
    ),
    Setting(
        "TICKWORK_AUDIT_RETENTION",
        "400d",
        "how long the audit log's events are kept (longer than history); 0 or off: all",
        duration_setting,
    ),
    Setting(
        "TICKWORK_KEEP_REVISIONS",
        "10",
        "newest revisions of each project always kept (older: while used); 0 or off: all",
        revisions_setting,
    ),
)
"""The retention settings the scheduler, the API and ``tickwork db prune`` all read."""


@dataclass(frozen=True)
class RetentionPolicy:
    """What a prune removes; None keeps that part of history for ever."""

    history: timedelta | None = timedelta(days=90)
    """Finished sessions whose attempts all ended longer ago than this go, with all of theirs."""
    logs: timedelta | None = timedelta(days=90)
    """Logs of attempts that ended longer ago than this lose their text (their rows stay)."""
    keep_revisions: int | None = 10
    """Each project's newest revisions kept; older ones go once nothing uses them."""
    audit: timedelta | None = timedelta(days=400)
    """Audit events older than this go."""

    @classmethod
    def from_settings(cls, values: SettingValues) -> RetentionPolicy:
        """The policy of :data:`RETENTION_SETTINGS` read from ``values``; InvalidConfig
        naming the variable on a bad value."""
        history = values.value("retention")
        logs = history
        if values.text("log_retention").strip():
            logs = values.value("log_retention")
        return cls(history, logs, values.value("keep_revisions"), values.value("audit_retention"))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> RetentionPolicy:
        """The policy from the ``TICKWORK_*`` variables (or ``environ``)."""
        return cls.from_settings(SettingValues(RETENTION_SETTINGS, environ))

    @property
    def keeps_all_history(self) -> bool:
        """Whether sessions, logs and revisions are all kept for ever."""
        return self.history is None and self.logs is None and self.keep_revisions is None

    @property
    def keeps_everything(self) -> bool:
        """Whether a prune has nothing to do under this policy (the audit log included)."""
        return self.keeps_all_history and self.audit is None

    def describe(self) -> dict[str, Any] | None:
        """What ``GET /api/version`` and the UI say of it: days kept (None for ever) and
        revisions kept; None when everything is kept."""
        if self.keeps_all_history:
            return None
        return {
            "history_days": _days(self.history),
            "log_days": _days(self.logs),
            "keep_revisions": self.keep_revisions,
        }

    def sentence(self) -> str:
        """One line for people: ``History kept 90 days; logs 90 days``."""
        if self.keeps_all_history:
            return "History kept for ever"
        history = f"{_span(self.history)}" if self.history else "for ever"
        logs = f"{_span(self.logs)}" if self.logs else "for ever"
        return f"History kept {history}; logs {logs}"


def _days(span: timedelta | None) -> float | None:
    if span is None:
        return None
    days = span / timedelta(days=1)
    return int(days) if days == int(days) else round(days, 3)


def _span(span: timedelta | None) -> str:
    days = _days(span)
    if days is not None and days >= 1:
        return f"{days:g} day" + ("" if days == 1 else "s")
    hours = (span or timedelta(0)) / timedelta(hours=1)
    return f"{hours:g} hour" + ("" if hours == 1 else "s")
