"""JavaScript's value rules as ``${...}`` expressions see them: text form, truth, numbers."""

from __future__ import annotations

import json
import math
from typing import Any

from tickwork.shared.errors import InvalidExpression


class Undefined:
    """JavaScript's ``undefined``: what ``void`` gives and ``typeof`` names; it renders as
    ``""`` (as ``null`` does) and becomes ``null`` when a whole template gives it."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED = Undefined()
"""The one ``undefined`` value."""


def type_of(value: Any) -> str:
    """JavaScript's ``typeof value``: ``"undefined"``, ``"boolean"``, ``"number"``,
    ``"string"``, or ``"object"`` (null, lists, mappings, moments)."""
    if value is UNDEFINED:
        return "undefined"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"


def is_number(value: Any) -> bool:
    """True for ints and floats (booleans are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def normalize(value: float) -> int | float:
    """JavaScript has one number type: a whole float is shown and compared as an int."""
    return int(value) if math.isfinite(value) and value == int(value) else value


def json_default(value: Any) -> Any:
    """How JSON shows values that are not JSON (a moment becomes its ISO instant)."""
    if value is UNDEFINED:
        return None
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")


def to_json(value: Any) -> str:
    """Compact JSON, as ``JSON.stringify`` writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=json_default)


def to_text(value: Any) -> str:
    """The string form a value takes inside a larger template (JavaScript's rules)."""
    if isinstance(value, str):
        return value
    if value is None or value is UNDEFINED:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(normalize(value))
    if isinstance(value, dict | list | tuple):
        return to_json(value)
    return str(value)


def truthy(value: Any) -> bool:
    """JavaScript truthiness: undefined, null, false, 0, NaN and "" are false."""
    if value is None or value is False or value is UNDEFINED:
        return False
    if is_number(value):
        return bool(value) and not (isinstance(value, float) and math.isnan(value))
    return bool(value != "")


def to_number(value: Any) -> int | float:
    """``Number(value)``; text that is not a number is an error rather than NaN (undefined
    gives NaN, as in JavaScript)."""
    if value is UNDEFINED:
        return math.nan
    if value is None or isinstance(value, bool):
        return int(bool(value))
    if is_number(value):
        return value  # type: ignore[no-any-return]
    try:
        return normalize(float(str(value).strip() or 0))
    except ValueError:
        raise InvalidExpression(f"cannot convert {to_text(value)!r} to a number") from None


def to_int(value: Any, what: str) -> int:
    """A whole number argument (``substring(0, 4)``), or an error naming ``what``."""
    number = to_number(value)
    if not math.isfinite(number) or number != int(number):
        raise InvalidExpression(f"{what} needs a whole number, got {to_text(value)!r}")
    return int(number)
