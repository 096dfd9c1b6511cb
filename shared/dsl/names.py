"""What a workflow file may be named: its name (the file's stem) names the workflow in
every list, URL and task name (``+name+task``), so it must be text that can be shown."""

from __future__ import annotations

import unicodedata

MAX_WORKFLOW_NAME_CHARS = 255
# '+' and '^' join the parts of a task's full name.
_JOINERS = "+^/"
UNSHOWABLE_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Cs": "invalid UTF-8",
}
"""Unicode categories that no name may hold, as a problem calls them: they cannot be shown
truly (control characters, line separators, bytes that were not UTF-8) or change how what
follows is shown (zero-width characters, bidi overrides, the BOM)."""


def first_unshowable(text: str) -> tuple[str, str] | None:
    """The first character of ``text`` in :data:`UNSHOWABLE_CATEGORIES`, and what it is."""
    for character in text:
        if what := UNSHOWABLE_CATEGORIES.get(unicodedata.category(character)):
            return character, what
    return None


def workflow_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a workflow, or None if it can."""
    if not 0 < len(name) <= MAX_WORKFLOW_NAME_CHARS:
        return f"a workflow name has 1-{MAX_WORKFLOW_NAME_CHARS} characters"
    for character in name:
        if character in _JOINERS:
            return f"a workflow name cannot contain {character!r}"
    if found := first_unshowable(name):
        character, what = found
        return f"a workflow name cannot contain {what} ({shown(character)})"
    if name[0].isspace() or name[-1].isspace():
        return "a workflow name cannot start or end with whitespace"
    return None


def shown(text: str, *, max_chars: int | None = None) -> str:
    """``text`` safe to show and store: bytes that were not UTF-8 as U+FFFD, characters that
    cannot be shown as escapes (``\\x01``, ``\\u2028``); past ``max_chars`` the middle is
    cut out."""
    text = "".join(_shown_character(ch) for ch in text)
    if max_chars is not None and len(text) > max_chars:
        half = max_chars // 2
        text = f"{text[:half]}…{text[-half:]}"
    return text


def _shown_character(character: str) -> str:
    if unicodedata.category(character) == "Cs":
        return "\ufffd"
    if character.isprintable():
        return character
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
