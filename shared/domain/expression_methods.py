"""The methods ``${...}`` expressions may call on values: strings, lists, numbers, moments.

Each is a plain Python function over the value and its arguments, named as JavaScript
names it (``s.toUpperCase()``, ``items.join(',')``, ``moment(t).add(1, 'days')``).
Anything else is an error naming the method and the kind of value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tickwork.shared.domain.jsvalues import is_number, to_int, to_json, to_number, to_text
from tickwork.shared.domain.moments import Moment
from tickwork.shared.errors import InvalidExpression

MAX_STRING_LENGTH = 1_000_000
"""The longest string ``repeat``/``padStart``/``padEnd`` may build."""

Method = Callable[..., Any]


def _sized(length: int) -> int:
    if length > MAX_STRING_LENGTH:
        raise InvalidExpression(f"a string of {length} characters is over {MAX_STRING_LENGTH}")
    return length


def _index(size: int, value: Any, what: str) -> int:
    """A JavaScript slice index: negatives count from the end, then clamped."""
    index = to_int(value, what)
    return max(0, size + index) if index < 0 else min(index, size)


def _substring(s: str, start: Any, end: Any = None) -> str:
    a = min(max(to_int(start, "substring"), 0), len(s))
    b = len(s) if end is None else min(max(to_int(end, "substring"), 0), len(s))
    return s[min(a, b) : max(a, b)]


def _substr(s: str, start: Any, length: Any = None) -> str:
    a = _index(len(s), start, "substr")
    n = len(s) - a if length is None else max(0, to_int(length, "substr"))
    return s[a : a + n]


def _slice(s: str | list[Any], start: Any = 0, end: Any = None) -> Any:
    a = _index(len(s), start, "slice")
    b = len(s) if end is None else _index(len(s), end, "slice")
    return s[a:b]


def _split(s: str, separator: Any = None, limit: Any = None) -> list[str]:
    if separator is None:
        parts = [s]
    elif to_text(separator) == "":
        parts = list(s)
    else:
        parts = s.split(to_text(separator))
    return parts if limit is None else parts[: max(0, to_int(limit, "split"))]


def _pad(s: str, length: Any, filler: Any = " ", *, start: bool) -> str:
    width = _sized(to_int(length, "padStart/padEnd"))
    fill = to_text(filler)
    if width <= len(s) or not fill:
        return s
    padding = (fill * (width // len(fill) + 1))[: width - len(s)]
    return padding + s if start else s + padding


def _repeat(s: str, count: Any) -> str:
    times = to_int(count, "repeat")
    if times < 0:
        raise InvalidExpression("repeat needs a count >= 0")
    _sized(len(s) * times)
    return s * times


def _index_of(target: str | list[Any], item: Any) -> int:
    if isinstance(target, str):
        return target.find(to_text(item))
    return target.index(item) if item in target else -1


def _last_index_of(target: str | list[Any], item: Any) -> int:
    if isinstance(target, str):
        return target.rfind(to_text(item))
    return len(target) - 1 - target[::-1].index(item) if item in target else -1


def _replace(s: str, old: str, new: str, count: int) -> str:
    found = s.count(old) if count < 0 else min(count, s.count(old))
    _sized(len(s) + found * (len(new) - len(old)))  # checked before the string is built
    return s.replace(old, new, count)


def _to_fixed(number: Any, digits: Any = 0) -> str:
    places = to_int(digits, "toFixed")
    if not 0 <= places <= 100:
        raise InvalidExpression("toFixed needs 0 to 100 digits")
    return f"{to_number(number):.{places}f}"


STRING_METHODS: dict[str, Method] = {
    "toUpperCase": lambda s: s.upper(),
    "toLowerCase": lambda s: s.lower(),
    "trim": lambda s: s.strip(),
    "trimStart": lambda s: s.lstrip(),
    "trimEnd": lambda s: s.rstrip(),
    "substring": _substring,
    "substr": _substr,
    "slice": _slice,
    "split": _split,
    "replace": lambda s, a, b: _replace(s, to_text(a), to_text(b), 1),
    "replaceAll": lambda s, a, b: _replace(s, to_text(a), to_text(b), -1),
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "includes": lambda s, x: to_text(x) in s,
    "startsWith": lambda s, x: s.startswith(to_text(x)),
    "endsWith": lambda s, x: s.endswith(to_text(x)),
    "charAt": lambda s, i: _substr(s, i, 1) if 0 <= to_int(i, "charAt") < len(s) else "",
    "concat": lambda s, *xs: sized_text(s + "".join(to_text(x) for x in xs)),
    "padStart": lambda s, n, f=" ": _pad(s, n, f, start=True),
    "padEnd": lambda s, n, f=" ": _pad(s, n, f, start=False),
    "repeat": _repeat,
    "toString": lambda s: s,
}

LIST_METHODS: dict[str, Method] = {
    "join": lambda xs, sep=",": sized_text(to_text(sep).join(to_text(x) for x in xs)),
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "includes": lambda xs, x: x in xs,
    "slice": _slice,
    "concat": lambda xs, *more: _sized_list([*xs, *(y for m in more for y in _as_list(m))]),
    "toString": lambda xs: ",".join(to_text(x) for x in xs),
}

NUMBER_METHODS: dict[str, Method] = {
    "toFixed": _to_fixed,
    "toString": to_text,
}

MOMENT_METHODS: dict[str, Method] = {
    "add": lambda m, n, unit=None: m.add(n, unit),
    "subtract": lambda m, n, unit=None: m.add(n, unit, sign=-1),
    "format": lambda m, pattern=None: m.format() if pattern is None else m.format(to_text(pattern)),
    "tz": lambda m, zone=None: _zone_name(m) if zone is None else m.in_zone(zone),
    "utc": lambda m: m.in_zone("UTC"),
    "startOf": lambda m, unit: m.start_of(unit),
    "endOf": lambda m, unit: m.end_of(unit),
    "unix": lambda m: m.unix(),
    "valueOf": lambda m: m.value_of(),
    "toISOString": lambda m: m.to_iso_string(),
    "toJSON": lambda m: m.to_json(),
    "toString": lambda m: m.format(),
    "clone": lambda m: m,
    "year": lambda m: m.local().year,
    "month": lambda m: m.local().month - 1,  # 0-based, as in JavaScript
    "date": lambda m: m.local().day,
    "day": lambda m: (m.local().weekday() + 1) % 7,  # 0 is Sunday
    "hour": lambda m: m.local().hour,
    "minute": lambda m: m.local().minute,
    "second": lambda m: m.local().second,
    "isBefore": lambda m, other: m.at < _moment_arg(other, "isBefore").at,
    "isAfter": lambda m, other: m.at > _moment_arg(other, "isAfter").at,
    "isSame": lambda m, other: m.at == _moment_arg(other, "isSame").at,
}


METHOD_NAMES = frozenset({*STRING_METHODS, *LIST_METHODS, *NUMBER_METHODS, *MOMENT_METHODS})
"""Every method name some value has: any other is refused when the workflow is parsed."""


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _sized_list(items: list[Any]) -> list[Any]:
    _sized(len(items))
    return items


def sized_text(text: str) -> str:
    """``text``, or InvalidExpression when it is longer than :data:`MAX_STRING_LENGTH`."""
    _sized(len(text))
    return text


def _zone_name(moment: Moment) -> str:
    return str(getattr(moment.zone, "key", None) or moment.format("Z"))


def _moment_arg(value: Any, method: str) -> Moment:
    if not isinstance(value, Moment):
        raise InvalidExpression(f"{method} needs a moment, got {to_text(value)!r}")
    return value


def _kind(value: Any) -> tuple[str, dict[str, Method]]:
    if isinstance(value, Moment):
        return "a moment", MOMENT_METHODS
    if isinstance(value, str):
        return "a string", STRING_METHODS
    if isinstance(value, list | tuple):
        return "a list", LIST_METHODS
    if is_number(value):
        return "a number", NUMBER_METHODS
    return ("null" if value is None else "a mapping or boolean"), {}


def call_method(target: Any, name: str, args: list[Any], path: str) -> Any:
    """``target.name(*args)``, for the methods above; ``path`` names the target in errors."""
    kind, methods = _kind(target)
    method = methods.get(name)
    if method is None:
        known = ", ".join(sorted(methods)) or "none"
        raise InvalidExpression(
            f"'{path}' is {kind}, which has no method '{name}' (its methods: {known})"
        )
    value = list(target) if isinstance(target, tuple) else target
    try:
        return method(value, *args)
    except TypeError:
        raise InvalidExpression(f"wrong number of arguments to '{path}.{name}()'") from None


def json_stringify(value: Any) -> str:
    """``JSON.stringify``: compact JSON; a moment is written as its ISO instant."""
    return to_json(value)
