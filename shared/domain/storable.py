"""What a value must be for the store to hold it, whether it came in JSON or YAML."""

from __future__ import annotations

MAX_INTEGER = 2**63 - 1
"""The largest integer the store holds (a signed 64-bit column, and JSON in PostgreSQL)."""


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text (NUL, lone surrogate), or None if it can."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain lone surrogates (invalid Unicode)"
    return None
