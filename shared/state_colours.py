"""Every state tickwork shows, with its kind and its colour in light and dark schemes: the
one table the web UI's badges, its scripts (through CSS custom properties) and its graph
read. :func:`states_stylesheet` turns it into the stylesheet the UI serves."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tickwork.shared.domain.states import AttemptState, ScheduleState, TaskState


class StateKind(StrEnum):
    """What a state means to someone glancing at it."""

    OK = "ok"  # ended well
    BAD = "bad"  # ended badly, or is failing
    WARN = "warn"  # needs a look: paused, retrying, being stopped
    LIVE = "live"  # running now
    WAIT = "wait"  # waiting its turn
    MUTED = "muted"  # set aside: nothing more will happen


@dataclass(frozen=True)
class StateColour:
    """A state's kind and its colour (CSS) on a light and on a dark background."""

    kind: StateKind
    light: str
    dark: str


# Light colours keep a 4.5:1 contrast on white, dark ones on #14171d.
_KIND_COLOURS = {
    StateKind.OK: ("#1f7a3a", "#5cc47a"),
    StateKind.BAD: ("#b42318", "#ff7b72"),
    StateKind.WARN: ("#9a5b00", "#e3b341"),
    StateKind.LIVE: ("#0b63ce", "#58a6ff"),
    StateKind.WAIT: ("#55607a", "#a3adc2"),
    StateKind.MUTED: ("#5b6475", "#8b949e"),
}


def _colour(kind: StateKind, light: str | None = None, dark: str | None = None) -> StateColour:
    default_light, default_dark = _KIND_COLOURS[kind]
    return StateColour(kind, light or default_light, dark or default_dark)


STATE_COLOURS: dict[str, StateColour] = {
    # Tasks and attempts share most names; a name has one colour wherever it appears.
    "success": _colour(StateKind.OK),
    "error": _colour(StateKind.BAD),
    "killed": _colour(StateKind.BAD, "#8c1d40", "#f778ba"),
    "canceled": _colour(StateKind.MUTED),
    "canceling": _colour(StateKind.WARN, "#a1401a", "#ffa657"),
    "running": _colour(StateKind.LIVE),
    "queued": _colour(StateKind.WAIT, "#3d5a9e", "#8fb2f0"),
    "ready": _colour(StateKind.WAIT, "#3d5a9e", "#8fb2f0"),
    "planned": _colour(StateKind.WAIT),
    "blocked": _colour(StateKind.WAIT),
    "created": _colour(StateKind.WAIT),
    "waiting": _colour(StateKind.WAIT),
    "delayed": _colour(StateKind.WARN),
    "retry_waiting": _colour(StateKind.WARN),
    # Schedules.
    "active": _colour(StateKind.OK),
    "paused": _colour(StateKind.WARN),
    "failing": _colour(StateKind.BAD),
    "removed": _colour(StateKind.MUTED),
}
"""Every state of TaskState, AttemptState and ScheduleState (a spec checks it)."""

STATE_ENUMS: tuple[type[StrEnum], ...] = (TaskState, AttemptState, ScheduleState)

UNKNOWN = _colour(StateKind.MUTED)
"""How a name outside the table shows (a state a newer release wrote)."""


def colour_of(state: str) -> StateColour:
    """The colour of ``state`` (:data:`UNKNOWN` for a name the table lacks)."""
    return STATE_COLOURS.get(state, UNKNOWN)


def states_stylesheet() -> str:
    """CSS defining, for each state NAME, the custom property ``--state-NAME`` (light, and
    dark under ``prefers-color-scheme: dark``) and the badge class ``.state-NAME``."""
    light = "".join(f"  --state-{name}: {c.light};\n" for name, c in STATE_COLOURS.items())
    dark = "".join(f"    --state-{name}: {c.dark};\n" for name, c in STATE_COLOURS.items())
    badges = "".join(f".state-{name} {{ color: var(--state-{name}); }}\n" for name in STATE_COLOURS)
    return (
        "/* State colours, generated from shared/state_colours.py. */\n"
        f":root {{\n{light}}}\n"
        f"@media (prefers-color-scheme: dark) {{\n  :root {{\n{dark}  }}\n}}\n"
        f"{badges}"
    )
