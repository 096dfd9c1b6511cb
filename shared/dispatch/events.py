"""Agents' events on their way to the executors: Redis streams read by a consumer group.

Agents append (``XADD``) started, finished, released and log events of a task to the
stream of its attempt's partition, ``<prefix>events:<partition>`` (the partition travels
in the task's message; a message without one, from an executor before partitions, sends
them to the single ``<prefix>events`` of old, which the holder of partition 0 reads too).
Executors read the streams of the partitions they hold through the group ``executors``:
an entry stays pending until the executor that read it acknowledges it after its
transaction committed, so an executor that dies mid-pass leaves its entries for the next
holder of the partition to claim. Entries are deleted once acknowledged; each stream is
also capped, as a guard.

If Redis loses a stream, the events in it are lost, but not the results: each agent
keeps the results it reported until the executor marked them applied, and sends them
again (see :mod:`tickwork.services.agent.outbox`); a task whose agent died meanwhile is found
silent by the reaper and runs again (at least once). Results already committed stay.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError, ResponseError

from tickwork.shared.dispatch.messages import (
    AgentEvent,
    WorkCommitted,
    event_from_json,
    event_to_json,
)

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


EntryRef = tuple[str, bytes]
"""An entry of a stream: the stream's key and the entry's id in it."""


def stream_key(prefix: str, partition: int | None) -> str:
    """The key of a partition's stream; ``None``: the single stream of old."""
    return f"{prefix}events" if partition is None else f"{prefix}events:{int(partition)}"


class EventStream:
    """One stream under a prefix (a partition's, or the single one of old): agents emit
    into it, executors read from it."""

    def __init__(self, client: Redis, prefix: str, partition: int | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.partition = partition
        self.key = stream_key(prefix, partition)

    def of_partition(self, partition: int | None) -> EventStream:
        """The stream of ``partition`` under the same prefix and client."""
        if partition == self.partition:
            return self
        return EventStream(self.client, self.prefix, partition)

    # -- the agents' side --------------------------------------------------------------

    def emit(self, events: Sequence[AgentEvent], *, pipe: Pipeline | None = None) -> None:
        """Append events in order, in one round trip (or as part of ``pipe``, which the
        caller then executes)."""
        self.emit_to(self.key, events, pipe=pipe)

    def emit_to(
        self, key: str, events: Sequence[AgentEvent], *, pipe: Pipeline | None = None
    ) -> None:
        """:meth:`emit` into the stream ``key``."""
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if pipe is None else pipe
        for event in events:
            body = json.dumps(event_to_json(event), separators=(",", ":"))
            pipe.xadd(key, {"e": body}, maxlen=STREAM_CAP, approximate=True)
        if own:
            pipe.execute()

    def wake(self) -> None:
        """Wake the executor reading this stream: work was committed (a new attempt, a
        kill)."""
        self.emit([WorkCommitted()])


PipelineStep = Callable[[Pipeline], None]
"""Adds commands to a pipeline that is about to be sent."""


class EventReader:
    """An executor's view of the streams it reads (``stream``'s alone unless told others
    with :meth:`follow`): read, then acknowledge after committing.

    ``execute`` sends the pipeline of a read (default: :meth:`Pipeline.execute`); one
    that calls scripts by digest passes its own (see :meth:`LeaseStore.execute
    <tickwork.shared.dispatch.leases.LeaseStore.execute>`)."""

    def __init__(
        self,
        stream: EventStream,
        consumer: str,
        *,
        execute: Callable[[Pipeline], list[Any]] | None = None,
    ) -> None:
        self.stream = stream
        self.client = stream.client
        self.consumer = consumer
        self._execute: Callable[[Pipeline], list[Any]] = execute or Pipeline.execute
        self.keys: tuple[str, ...] = (stream.key,)
        self._backlog = True  # read our own pending entries first (a restart)

    def follow(self, keys: Sequence[str]) -> list[str]:
        """Read the streams ``keys`` from now on (their groups made sure of); the keys not
        read before (claim their orphans next)."""
        new = [key for key in keys if key not in self.keys]
        self.keys = tuple(keys)
        self._ensure_groups(self.keys)
        self._backlog = True
        return new

    def ensure_group(self) -> None:
        """Create the consumer group (and the stream) of each stream read unless they exist."""
        self._ensure_groups(self.keys)

    def _ensure_groups(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                self.client.xgroup_create(key, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def wake(self) -> None:
        """Wake this reader's wait: a wake-up on the first stream it reads (none when it
        reads none: it looks again soon anyway)."""
        if self.keys:
            self.stream.emit_to(self.keys[0], [WorkCommitted()])

    def reread(self) -> None:
        """Read this consumer's pending entries first at the next read (the last ones
        read could not be handled)."""
        self._backlog = True

    def claim_orphans(self, keys: Sequence[str] | None = None) -> int:
        """Take over every entry of ``keys`` (default: the streams read) that other
        consumers read but never acknowledged (they died, or gave the partition up);
        called by the executor that just took the streams. How many were claimed."""
        claimed = 0
        for key in self.keys if keys is None else keys:
            claimed += self._claim(key)
        self._backlog = True
        return claimed

    def _claim(self, key: str) -> int:
        claimed = 0
        start = "0-0"
        for _ in range(1000):
            reply = self.client.xautoclaim(
                key, GROUP, self.consumer, min_idle_time=0, start_id=start, count=1000
            )
            start, entries = reply[0], reply[1]
            claimed += len(entries)
            if start in (b"0-0", "0-0"):
                break
        return claimed

    def read(
        self,
        timeout_seconds: float,
        count: int = 1000,
        *,
        acknowledge: Sequence[EntryRef] = (),
        also: PipelineStep | None = None,
    ) -> list[tuple[EntryRef, dict[str, object]]]:
        """Up to ``count`` entries ``(id, body)``, waiting up to the timeout for the first.

        Pending entries of this consumer come first (after a restart or a claim).
        ``acknowledge`` entries are acknowledged first, and the commands ``also`` adds
        sent, in the same round trip."""
        try:
            return self._read(timeout_seconds, count, acknowledge, also)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("the event stream was lost (Redis restarted?); recreating it")
            self.ensure_group()
            self._backlog = True
            return []

    def _read(
        self,
        timeout_seconds: float,
        count: int,
        acknowledge: Sequence[EntryRef],
        also: PipelineStep | None,
    ) -> list[tuple[EntryRef, dict[str, object]]]:
        if len(acknowledge) > ACK_CHUNK:
            self.acknowledge(acknowledge)
            acknowledge = ()
        if not self.keys:  # no stream to read (no partition held): wait all the same
            if acknowledge or also is not None:
                self._execute(self._pipeline(acknowledge, also))
            time.sleep(max(0.0, timeout_seconds))
            return []
        if self._backlog:
            pipe = self._pipeline(acknowledge, also)
            backlog: dict[Any, Any] = dict.fromkeys(self.keys, "0")
            pipe.xreadgroup(GROUP, self.consumer, backlog, count=count)
            entries = self._entries(self._execute(pipe)[-1])
            acknowledge, also = (), None
            if entries:
                return entries
            self._backlog = False
        block_ms = max(1, int(timeout_seconds * 1000)) if timeout_seconds > 0 else None
        pipe = self._pipeline(acknowledge, also)
        streams: dict[Any, Any] = dict.fromkeys(self.keys, ">")
        pipe.xreadgroup(GROUP, self.consumer, streams, count=count, block=block_ms)
        return self._entries(self._execute(pipe)[-1])

    def _pipeline(self, acknowledge: Sequence[EntryRef], also: PipelineStep | None) -> Pipeline:
        pipe = self.client.pipeline(transaction=False)
        self.add_acknowledgement(pipe, acknowledge)
        if also is not None:
            also(pipe)
        return pipe

    def add_acknowledgement(self, pipe: Pipeline, entries: Sequence[EntryRef]) -> None:
        """Add acknowledging (and deleting) ``entries`` to ``pipe``."""
        by_key: dict[str, list[bytes]] = {}
        for key, entry_id in entries:
            by_key.setdefault(key, []).append(entry_id)
        for key, ids in by_key.items():
            pipe.xack(key, GROUP, *ids)
            pipe.xdel(key, *ids)

    @staticmethod
    def _entries(reply: object) -> list[tuple[EntryRef, dict[str, object]]]:
        entries: list[tuple[EntryRef, dict[str, object]]] = []
        if not reply:
            return entries
        for stream, rows in reply:  # type: ignore[attr-defined]
            key = stream.decode() if isinstance(stream, bytes) else str(stream)
            for entry_id, fields in rows:
                raw = fields.get(b"e") if fields else None
                try:
                    body = json.loads(raw) if raw is not None else {}
                except ValueError:
                    body = {}
                entries.append(((key, entry_id), body if isinstance(body, dict) else {}))
        return entries

    def acknowledge(self, entries: Sequence[EntryRef]) -> None:
        """Acknowledge and delete entries whose effects are committed."""
        for start in range(0, len(entries), ACK_CHUNK):
            pipe = self.client.pipeline(transaction=False)
            self.add_acknowledgement(pipe, entries[start : start + ACK_CHUNK])
            pipe.execute()


def decode(body: dict[str, object]) -> AgentEvent | None:
    """The event an entry holds; None for an entry nobody can read."""
    try:
        return event_from_json(body)
    except ValueError as exc:
        log.warning("dropped an unreadable event: %s", exc)
        return None
