"""Checkpointing a SQLite store's write-ahead log from a thread of its own, off the
writer's path.

In WAL mode a commit only appends pages to the log. Once the log passes
``wal_autocheckpoint`` pages (1,000), the commit that crossed it also copies the log into
the database file and syncs both (``synchronous=NORMAL``) before it returns: a few to a few
tens of milliseconds on a busy disk, paid by one pass of the executor every sixty or so
chained tasks, and more the busier the disk. A :class:`LogCheckpointer` copies the log
every :data:`CHECKPOINT_EVERY_SECONDS` instead, from its own connection, so the log rarely
reaches that size and commits rarely copy. What a commit makes durable is unchanged: the
log is synced before it is copied, as before.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine

from tickwork.shared.store.dialects import dialect_of

log = logging.getLogger(__name__)

CHECKPOINT_EVERY_SECONDS = 0.05
"""How often the log is copied: a chain of short tasks on a 2-core machine appends about
800 pages to it in that time, under the 1,000 at which a commit would copy it itself."""


class LogCheckpointer:
    """A thread that checkpoints ``engine``'s database every ``every_seconds`` until
    :meth:`close`; nothing at all where the database checkpoints on its own (PostgreSQL).
    Use it as a context manager."""

    def __init__(self, engine: Engine, every_seconds: float = CHECKPOINT_EVERY_SECONDS) -> None:
        self.engine = engine
        self.every_seconds = every_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once; not where the database needs none)."""
        if self._thread is not None or not dialect_of(self.engine).checkpoint(self.engine):
            return
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether its thread checkpoints (it was started, on a database that needs it)."""
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread and wait for a checkpoint under way to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> LogCheckpointer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.wait(self.every_seconds):
            try:
                dialect_of(self.engine).checkpoint(self.engine)
            except Exception as exc:  # the driver's own errors too: commits copy it meanwhile
                log.debug("checkpoint failed: %s", exc)
