"""Reading a value of a closed set (a ``StrEnum``) where it enters: unknown is an error."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from tickwork.shared.errors import UnknownValue

E = TypeVar("E", bound=StrEnum)


def choices_text(kind: type[StrEnum]) -> str:
    """The values of ``kind`` as a message lists them: ``all | latest | none``."""
    return " | ".join(member.value for member in kind)


def parse_choice(kind: type[E], value: object, where: str) -> E:
    """``value`` as a member of ``kind``; :class:`UnknownValue` naming ``where`` (the field
    or row it was read from) and the values allowed when it is none of them."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    message = f"{where} must be one of {choices_text(kind)}, got {value!r}"
    raise UnknownValue(message)
