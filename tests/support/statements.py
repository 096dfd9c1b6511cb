"""The SQL statements an engine runs, recorded for specs that count or order them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event


class StatementLog:
    """The SQL statements an engine runs while the log is open, in order, each on one
    line (runs of whitespace made one space)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: list[str] = []

    def _record(self, *args: Any) -> None:
        self.statements.append(" ".join(args[2].split()))  # (conn, cursor, statement, ...)

    def __enter__(self) -> StatementLog:
        event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *_exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)

    def count(self, text: str) -> int:
        """How many statements held ``text``."""
        return sum(text in statement for statement in self.statements)
