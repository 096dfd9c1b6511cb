"""The end of a task's log, as every failure report shows it (``tickwork run``, the
client's ``start --wait``/``attempt``, the web UI's attempt page): its last lines, read
from no more than the last :data:`TAIL_BYTES` of the file."""

from __future__ import annotations

TAIL_LINES = 10
"""Most log lines shown under a failed task."""
TAIL_BYTES = 16 * 1024
"""Bytes read from the end of a log to find its last lines."""


def last_lines(data: bytes, *, cut: bool, count: int = TAIL_LINES) -> list[str]:
    """The last ``count`` lines of ``data`` without trailing blank lines; with ``cut``,
    ``data`` starts in the middle of a line, which is left out unless it is the only one."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if cut and len(lines) > 1:
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines[-count:]]
