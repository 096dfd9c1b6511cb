"""Per-test PostgreSQL databases, made one test ahead and dropped behind the tests' backs.

CREATE DATABASE and DROP DATABASE wait on the server's disk (WAL, fsync): from a tenth of a
second on an idle machine to a second or two on a busy one, twice per test. Background
threads do that while the tests run, so the wait overlaps the tests' own work instead of
adding to it. Each test still gets a database of its own.

DROP DATABASE is the slower: it forces a checkpoint of the whole server (PostgreSQL 15),
seconds when the disk is busy. Drops run several at once, so that they share checkpoints.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy.engine import make_url

from tests.support.servers import create_postgres_database, drop_postgres_database, with_database

DATABASE_SECONDS = 120.0  # the longest a CREATE or DROP DATABASE may take
DROP_THREADS = 4
MAX_PENDING_DROPS = 16  # past this, giving a database back waits for the oldest drop


class DatabaseSupply:
    """Hands out new databases (empty, or copies of ``template``), keeping ``ahead`` more
    made in a background thread, and drops the ones given back in other threads."""

    def __init__(self, server_url: str, template: str | None = None, *, ahead: int = 1) -> None:
        self.server_url = server_url
        self.template = template
        self.ahead = ahead
        self._creating = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tickwork-create-db")
        self._dropping = ThreadPoolExecutor(DROP_THREADS, thread_name_prefix="tickwork-drop-db")
        self._made: deque[Future[str]] = deque()
        self._dropped: list[Future[None]] = []

    def take(self) -> str:
        """The SQLAlchemy URL of a new database that nobody else is given."""
        while len(self._made) <= self.ahead:
            self._made.append(
                self._creating.submit(create_postgres_database, self.server_url, self.template)
            )
        name = self._made.popleft().result(timeout=DATABASE_SECONDS)
        return with_database(self.server_url, name)

    def give_back(self, url: str) -> None:
        """Drop the database ``url`` names (connections left open to it are closed), soon."""
        name = make_url(url).database
        assert name is not None and name.startswith("tickwork_test_"), url
        # Only drops still running or failed are kept, for close() to wait on or report.
        self._dropped = [d for d in self._dropped if not d.done() or d.exception() is not None]
        if len(self._dropped) >= MAX_PENDING_DROPS:
            concurrent.futures.wait(self._dropped[:1], timeout=DATABASE_SECONDS)
        self._dropped.append(self._dropping.submit(drop_postgres_database, self.server_url, name))

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A new database's URL, dropped once the block ends."""
        url = self.take()
        try:
            yield url
        finally:
            self.give_back(url)

    def close(self) -> None:
        """Drop the databases made ahead, wait for every drop, and stop the thread; raise the
        first error a CREATE or DROP met (a database may be left on the server then)."""
        errors: list[BaseException] = []
        while self._made:
            try:
                self.give_back(with_database(self.server_url, self._made.popleft().result()))
            except Exception as exc:
                errors.append(exc)
        for dropped in self._dropped:
            try:
                dropped.result(timeout=DATABASE_SECONDS)
            except Exception as exc:
                errors.append(exc)
        self._creating.shutdown(wait=True)
        self._dropping.shutdown(wait=True)
        if errors:
            raise errors[0]
