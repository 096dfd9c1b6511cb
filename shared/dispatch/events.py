"""Agents' events on their way to the executor: one Redis stream read by a consumer group.

Agents append (``XADD``) started, finished, released and log events to
``<prefix>events``. Executors read them through the group ``executors``: an entry stays
pending until the executor that read it acknowledges it after its transaction committed,
so an executor that dies mid-pass leaves its entries for the next one to claim. Entries
are deleted once acknowledged; the stream is also capped, as a guard.

If Redis loses the stream, the events in it are lost, but not the results: each agent
keeps the results it reported until the executor marked them applied, and sends them
again (see :mod:`services.agent.outbox`); a task whose agent died meanwhile is found
silent by the reaper and runs again (at least once). Results already committed stay.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError, ResponseError

from shared.dispatch.messages import AgentEvent, WorkCommitted, event_from_json, event_to_json

log = logging.getLogger(__name__)

GROUP = "executors"
ACK_CHUNK = 1000
STREAM_CAP = 1_000_000
"""Entries kept at most (approximately); acknowledged entries are deleted long before."""


T = TypeVar("T")

REDIS_RETRY_SECONDS = 0.5
"""How long :func:`retry_redis` waits between tries."""


def retry_redis(action: Callable[[], T], deadline: float) -> T:
    """``action()``, tried again every :data:`REDIS_RETRY_SECONDS` while it raises a
    RedisError, until ``deadline`` (``time.monotonic()``); then its last error is raised."""
    while True:
        try:
            return action()
        except RedisError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(REDIS_RETRY_SECONDS)


class EventStream:
    """The stream under one prefix: agents emit into it, executors read from it."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.key = f"{prefix}events"

    # -- the agents' side --------------------------------------------------------------

    def emit(self, events: Sequence[AgentEvent], *, pipe: Pipeline | None = None) -> None:
        """Append events in order, in one round trip (or as part of ``pipe``, which the
        caller then executes)."""
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if pipe is None else pipe
        for event in events:
            body = json.dumps(event_to_json(event), separators=(",", ":"))
            pipe.xadd(self.key, {"e": body}, maxlen=STREAM_CAP, approximate=True)
        if own:
            pipe.execute()

    def wake(self) -> None:
        """Wake one waiting executor: work was committed (a new attempt, a kill)."""
        self.emit([WorkCommitted()])


class EventReader:
    """An executor's view of the stream: read, then acknowledge after committing."""

    def __init__(self, stream: EventStream, consumer: str) -> None:
        self.stream = stream
        self.client = stream.client
        self.consumer = consumer
        self._backlog = True  # read our own pending entries first (a restart)

    def ensure_group(self) -> None:
        """Create the consumer group (and the stream) unless they exist."""
        try:
            self.client.xgroup_create(self.stream.key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def claim_orphans(self) -> int:
        """Take over every entry other consumers read but never acknowledged (they died);
        called by the executor that just became the active one. How many were claimed."""
        claimed = 0
        start = "0-0"
        for _ in range(1000):
            reply = self.client.xautoclaim(
                self.stream.key, GROUP, self.consumer, min_idle_time=0, start_id=start, count=1000
            )
            start, entries = reply[0], reply[1]
            claimed += len(entries)
            if start in (b"0-0", "0-0"):
                break
        self._backlog = True
        return claimed

    def read(
        self, timeout_seconds: float, count: int = 1000, *, acknowledge: Sequence[bytes] = ()
    ) -> list[tuple[bytes, dict[str, object]]]:
        """Up to ``count`` entries ``(id, body)``, waiting up to the timeout for the first.

        Pending entries of this consumer come first (after a restart or a claim).
        ``acknowledge`` entries are acknowledged first, in the same round trip."""
        try:
            return self._read(timeout_seconds, count, acknowledge)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("the event stream was lost (Redis restarted?); recreating it")
            self.ensure_group()
            self._backlog = True
            return []

    def _read(
        self, timeout_seconds: float, count: int, acknowledge: Sequence[bytes]
    ) -> list[tuple[bytes, dict[str, object]]]:
        if len(acknowledge) > ACK_CHUNK:
            self.acknowledge(acknowledge)
            acknowledge = ()
        if self._backlog:
            pipe = self._pipeline(acknowledge)
            pipe.xreadgroup(GROUP, self.consumer, {self.stream.key: "0"}, count=count)
            entries = self._entries(pipe.execute()[-1])
            acknowledge = ()
            if entries:
                return entries
            self._backlog = False
        block_ms = max(1, int(timeout_seconds * 1000)) if timeout_seconds > 0 else None
        pipe = self._pipeline(acknowledge)
        pipe.xreadgroup(GROUP, self.consumer, {self.stream.key: ">"}, count=count, block=block_ms)
        return self._entries(pipe.execute()[-1])

    def _pipeline(self, acknowledge: Sequence[bytes]) -> Pipeline:
        pipe = self.client.pipeline(transaction=False)
        self.add_acknowledgement(pipe, acknowledge)
        return pipe

    def add_acknowledgement(self, pipe: Pipeline, entry_ids: Sequence[bytes]) -> None:
        """Add acknowledging (and deleting) ``entry_ids`` to ``pipe``."""
        if entry_ids:
            pipe.xack(self.stream.key, GROUP, *entry_ids)
            pipe.xdel(self.stream.key, *entry_ids)

    @staticmethod
    def _entries(reply: object) -> list[tuple[bytes, dict[str, object]]]:
        entries: list[tuple[bytes, dict[str, object]]] = []
        if not reply:
            return entries
        for _stream, rows in reply:  # type: ignore[attr-defined]
            for entry_id, fields in rows:
                raw = fields.get(b"e") if fields else None
                try:
                    body = json.loads(raw) if raw is not None else {}
                except ValueError:
                    body = {}
                entries.append((entry_id, body if isinstance(body, dict) else {}))
        return entries

    def acknowledge(self, entry_ids: Sequence[bytes]) -> None:
        """Acknowledge and delete entries whose effects are committed."""
        for start in range(0, len(entry_ids), ACK_CHUNK):
            pipe = self.client.pipeline(transaction=False)
            self.add_acknowledgement(pipe, entry_ids[start : start + ACK_CHUNK])
            pipe.execute()


def decode(body: dict[str, object]) -> AgentEvent | None:
    """The event an entry holds; None for an entry nobody can read."""
    try:
        return event_from_json(body)
    except ValueError as exc:
        log.warning("dropped an unreadable event: %s", exc)
        return None
