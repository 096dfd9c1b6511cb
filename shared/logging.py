"""Logging set-up: key=value text on a terminal, JSON lines otherwise."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime

FIELDS_ATTRIBUTE = "fields"
"""A record's attribute (``extra={"fields": {...}}``) whose keys :class:`JsonFormatter`
adds to the object, after its own (an access line's path, status and duration)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        fields = getattr(record, FIELDS_ATTRIBUTE, None)
        if isinstance(fields, dict):
            entry.update((key, value) for key, value in fields.items() if key not in entry)
        return json.dumps(entry, default=str)


LOG_FORMAT_ENV = "TICKWORK_LOG_FORMAT"
"""``json``, ``text`` or ``auto`` (the default: JSON unless stderr is a terminal)."""


def configure_logging(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Send tickwork's logs to stderr: as ``json_lines`` says, else as TICKWORK_LOG_FORMAT
    says, else JSON when stderr is not a terminal."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines is None:
        chosen = os.environ.get(LOG_FORMAT_ENV, "auto").strip().lower()
        json_lines = {"json": True, "text": False}.get(chosen, not sys.stderr.isatty())
    use_json = json_lines
    if use_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
