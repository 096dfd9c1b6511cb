"""Numbers as workflow files and ``${...}`` results give them: ``3``, ``3.0`` or ``"3"``.

Digdag reads a number wherever one is expected from a YAML number or from a string that
spells one (authors quote freely, and an expression always renders to a string). The
parser and the executor (for values rendered at run time) both read numbers here.
"""

from __future__ import annotations

import math
import re
from typing import Any

_WHOLE = re.compile(r"\A\s*[-+]?\d+\s*\Z")
_DECIMAL = re.compile(r"\A\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?\s*\Z")


def whole_number(value: Any) -> int | None:
    """``value`` as a whole number (``3``, ``3.0``, ``"3"``, ``" -2 "``), else None.

    Booleans, fractions and text such as ``"3x"`` are not whole numbers.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        return int(value)
    return None


def decimal_number(value: Any) -> float | None:
    """``value`` as a finite decimal number (``1.5``, ``"1.5"``, ``"10"``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) or (isinstance(value, str) and _DECIMAL.fullmatch(value)):
        number = float(value)
    else:
        return None
    return number if math.isfinite(number) else None
