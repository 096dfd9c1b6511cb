"""What wakes log followers: PostgreSQL ``NOTIFY`` on the log channel, heard by one
listening connection per process and shared by every follower in it.

The executor notifies an attempt's id when a pass stored chunks of its logs or ended it
(:func:`tickwork.shared.store.logs.notify_log_readers`). A follower waits here for its attempt's
counter to move, so it reads the store once per change (and once in a while should a
notice be missed), not once per poll. Where nothing listens (SQLite, or the listening
connection is down) :attr:`LogNotices.listening` is false and followers poll instead.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from tickwork.shared.store.engine import libpq_url
from tickwork.shared.store.logs import LOG_CHANNEL

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
FORGET_AFTER_SECONDS = 600.0
"""An attempt not heard of for this long is forgotten (its counter starts again)."""


class LogNotices:
    """The counters of the attempts whose logs changed, moved by notifications.

    ``database_url`` names the PostgreSQL store (None: nothing to listen to). The
    listening thread starts with the first :meth:`wait`."""

    def __init__(self, database_url: str | None) -> None:
        self.conninfo = None if database_url is None else libpq_url(database_url)
        self._cond = threading.Condition()
        self._counts: dict[int, tuple[int, float]] = {}  # attempt -> (count, last heard)
        self._listening = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def listening(self) -> bool:
        """Whether notifications arrive now (else followers poll)."""
        return self._listening

    def count(self, attempt_id: int) -> int:
        """How many notices of ``attempt_id`` were heard (a follower's starting point)."""
        with self._cond:
            return self._counts.get(attempt_id, (0, 0.0))[0]

    def wait(self, attempt_id: int, seen: int, timeout_seconds: float) -> int:
        """Wait until a notice of ``attempt_id`` beyond ``seen`` comes, or the timeout;
        the count then. Returns at once while nothing listens."""
        self._start()
        deadline = time.monotonic() + timeout_seconds
        with self._cond:
            while self._listening and self._counts.get(attempt_id, (0, 0.0))[0] <= seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._counts.get(attempt_id, (0, 0.0))[0]

    def heard(self, payloads: list[str]) -> None:
        """Count the notices of these payloads (attempt ids) and wake their followers."""
        now = time.monotonic()
        with self._cond:
            for payload in payloads:
                if payload.isdigit():
                    attempt = int(payload)
                    count = self._counts.get(attempt, (0, 0.0))[0]
                    self._counts[attempt] = (count + 1, now)
            if len(self._counts) > 10_000:
                self._forget_before(now - FORGET_AFTER_SECONDS)
            self._cond.notify_all()

    def _forget_before(self, moment: float) -> None:
        for attempt, (_, heard) in list(self._counts.items()):
            if heard < moment:
                del self._counts[attempt]

    def close(self) -> None:
        """Stop listening (within a second)."""
        self._stop.set()
        self._set_listening(False)

    def _start(self) -> None:
        if self.conninfo is None or self._thread is not None:
            return
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="log-notices", daemon=True)
                self._thread.start()
                # The first follower waits a moment for the connection rather than polling.
                self._cond.wait_for(lambda: self._listening, timeout=1.0)

    def _set_listening(self, listening: bool) -> None:
        with self._cond:
            self._listening = listening
            self._cond.notify_all()  # followers waiting on a lost connection poll again

    def _run(self) -> None:
        assert self.conninfo is not None
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {LOG_CHANNEL}")
                    self._set_listening(True)
                    while not self._stop.is_set():
                        notices = list(conn.notifies(timeout=1.0, stop_after=100))
                        if notices:
                            self.heard([n.payload for n in notices])
            except (psycopg.Error, OSError) as exc:
                log.debug("log notices reconnecting: %s", exc)
            self._set_listening(False)
            self._stop.wait(RECONNECT_SECONDS)
