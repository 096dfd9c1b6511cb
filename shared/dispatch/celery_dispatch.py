"""The executor's side of the distributed seam: Celery messages out, Redis events in.

``publish`` runs after the transaction that made the tasks QUEUED committed (the outbox
rule); in one round trip it refreshes the project archives the tasks run in (see
:mod:`tickwork.shared.dispatch.archives`; one Redis lost is put back before any message goes) and
leaves a short-lived ``queued`` mark on each lease key; then it sends one Celery message
per task to the task's queue (standard protocol-2 messages, written by one producer in
kombu's publish batches: one Redis round trip per :data:`PUBLISH_BATCH_SIZE` messages),
and has the marks kept for long with its next round trip: a QUEUED task whose key is
empty lost its message, and the reaper publishes it again. Events come from the
streams (see :mod:`tickwork.shared.dispatch.events`); log chunks among them go to the loop with
the rest, which stores them in its pass (a short task's only chunk in its result's
transaction), so that an event is acknowledged only once what it carried is committed.
Once the loop committed a pass, every result it applied or refused gets the ``applied``
mark on its lease key, so that the agent holding it (see :mod:`tickwork.services.agent.outbox`)
forgets it; right after Redis lost its keys the lease states are withheld from the
reaper for a while (see :mod:`tickwork.shared.dispatch.keyspace`).

Acknowledgements, ``applied`` marks and the confirmations of ``queued`` marks never take
a round trip of their own: they go with the next read of the streams (never before a
publish's messages, which they would delay), so that a pass that applies results and
publishes nothing costs one round trip to Redis, and one that publishes costs three (its
read, its marks with the archives' refresh, its messages). The lease scripts in these
pipelines are called by digest, without asking Redis first whether it has them (see
:meth:`LeaseStore.execute <tickwork.shared.dispatch.leases.LeaseStore.execute>`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from celery.utils.nodenames import anon_nodename
from redis.client import Pipeline
from redis.exceptions import RedisError

from tickwork.shared.dispatch.archives import ArchiveSource, RedisArchives
from tickwork.shared.dispatch.celery_app import TASK_NAME, RedisSettings, make_celery
from tickwork.shared.dispatch.events import (
    STREAM_CAP,
    EntryRef,
    EventReader,
    EventStream,
    decode,
    stream_key,
)
from tickwork.shared.dispatch.keyspace import SETTLE_MS, KeyspaceWatch
from tickwork.shared.dispatch.leases import APPLIED, CANCELED, QUEUED, LeaseState, LeaseStore
from tickwork.shared.dispatch.messages import (
    TaskEvent,
    TaskFinished,
    TaskMessage,
)
from tickwork.shared.domain.partitions import DEFAULT_PARTITION_COUNT, partition_of

log = logging.getLogger(__name__)

QUEUED_MARK_TTL_MS = 24 * 3600 * 1000
"""How long a published message is trusted to be in its queue; after that a task still
queued is published again (a duplicate is harmless)."""
PENDING_MARK_TTL_MS = 60 * 1000
"""How long a queued mark lasts before its message is confirmed sent."""
CANCELED_MARK_TTL_MS = 3600 * 1000
APPLIED_MARK_TTL_MS = 3600 * 1000
"""How long an ``applied`` mark refuses duplicates of a finished task's message."""
CRASH_EXIT_CODE = 86
CRASH_AFTER_COMMIT = "after-commit-before-publish"
"""A fault test's crash point: the tasks' QUEUED state committed, nothing in Redis yet."""
CRASH_AFTER_MARK = "after-mark-before-send"
"""A fault test's crash point: the tasks' queued marks left in Redis, no message sent."""
CRASH_AFTER_NOTIFY = "after-notify-send"
"""A fault test's crash point: a notification sent, its outcome not recorded yet."""
CRASH_POINTS = (CRASH_AFTER_COMMIT, CRASH_AFTER_MARK, CRASH_AFTER_NOTIFY)
PUBLISH_BATCH_SIZE = 500
"""Messages one Redis round trip sends, at most."""
PRODUCER_WAIT = 10.0
"""Seconds to wait for a producer from Celery's pool (one is taken, and kept)."""


AttemptsOfTasks = Callable[[Sequence[int]], dict[int, int]]
"""The attempt of each task id (those found): how old-format events find their partition."""


def _task_id_of(body: dict[str, object]) -> int | None:
    task_id = body.get("task_id")
    return task_id if isinstance(task_id, int) else None


def _batch_of(producer: Any) -> AbstractContextManager[Any]:
    """The producer's publish batch (kombu 5.7 and later), or nothing to enter."""
    batch = getattr(producer, "batch", None)
    return contextlib.nullcontext() if batch is None else batch(PUBLISH_BATCH_SIZE)


class CeleryDispatcher:
    """Publishes task messages with Celery and reads agents' events from Redis.

    ``consumer`` names this executor in the event stream's group. ``archive_source``
    reads a pushed project's archive from the store, to put it in Redis for the agents
    (without it, tasks of pushed projects fail on the agent). ``crash_point``
    (one of :data:`CRASH_POINTS`) exits the process there (a fault test's crash point).
    ``settle_ms`` is how long the reaper learns nothing of leases after Redis lost its
    keys (see :mod:`tickwork.shared.dispatch.keyspace`). ``partition_count`` is how many partitions
    attempts are spread over; it reads the streams of all of them until
    :meth:`follow_partitions` says which. With ``attempts_of_tasks``, the events read
    from the single stream of old are moved to their partitions' streams rather than
    applied here (an executor that may not hold their partitions).
    """

    def __init__(
        self,
        redis: RedisSettings,
        consumer: str,
        *,
        crash_point: str = "",
        archive_source: ArchiveSource | None = None,
        settle_ms: int = SETTLE_MS,
        partition_count: int = DEFAULT_PARTITION_COUNT,
        attempts_of_tasks: AttemptsOfTasks | None = None,
    ) -> None:
        self.redis = redis
        self.partition_count = partition_count
        self.attempts_of_tasks = attempts_of_tasks
        self.app = make_celery(redis)
        self.client = redis.client()
        self.leases = LeaseStore(self.client, redis.prefix)
        self.stream = EventStream(self.client, redis.prefix)
        self.reader = EventReader(self.stream, consumer, execute=self.leases.execute)
        self.kill_channel = f"{redis.prefix}kill"
        self.crash_point = crash_point
        self.archives = RedisArchives(self.client, redis.prefix)
        self.archive_source = archive_source
        self._delivered: list[EntryRef] = []  # read, not yet applied
        self._applied: list[EntryRef] = []  # applied and committed, not yet acknowledged
        self._delivered_results: list[tuple[int, int]] = []  # (task id, token) of results
        self._settled_results: list[tuple[int, int]] = []  # committed, not yet marked
        self._confirming: list[tuple[int, int]] = []  # sent, queued mark not yet kept long
        self._interrupted_at: float | None = None  # wall time of the last Redis failure seen
        self._sending: tuple[list[tuple[int, int]], ...] = ([], [])  # marks in a read's pipe
        self.keyspace = KeyspaceWatch(self.client, redis.prefix, settle_ms)
        self.queues_seen: set[str] = set()
        self._declared: set[str] = set()  # queues whose bindings this process made
        self._producer: Any = None  # kept from the first send until an error or close
        self._origin = anon_nodename()  # who sent the messages, in their headers
        self.reader.follow(self._stream_keys(range(partition_count)))
        self._claimed: set[str] = set()  # streams whose orphans were claimed since followed

    def _crash_at(self, point: str) -> None:
        if self.crash_point == point:
            log.error("crash point %s: exiting", point)
            os._exit(CRASH_EXIT_CODE)

    def take_over(self) -> int:
        """This executor became the active one: claim what others read and left."""
        self.reader.ensure_group()
        return self.reader.claim_orphans()

    def _stream_keys(self, partitions: Sequence[int] | range) -> list[str]:
        """The streams of ``partitions``; the holder of partition 0 also reads the single
        stream of old (agents of a release before partitions, during an upgrade)."""
        keys = [stream_key(self.redis.prefix, p) for p in partitions]
        return [*keys, stream_key(self.redis.prefix, None)] if 0 in partitions else keys

    def follow_partitions(self, partitions: Sequence[int]) -> int:
        """Read the event streams of ``partitions`` only, from the next poll on; claim what
        others read and left in the streams taken since the last call that succeeded (a
        call that failed on Redis claims them the next time). How many were claimed."""
        keys = self._stream_keys(sorted(partitions))
        self.reader.follow(keys)
        new = [key for key in keys if key not in self._claimed]
        claimed = self.reader.claim_orphans(new) if new else 0
        self._claimed = set(keys)
        return claimed

    def flush_acknowledgements(self) -> None:
        """Send the acknowledgements and ``applied`` marks due now (before partitions are
        given up, so that their next holder finds nothing pending already applied)."""
        if self._applied or self._settled_results or self._confirming:
            self._send_due(self.client.pipeline(transaction=False))

    def publish(self, messages: Sequence[TaskMessage]) -> None:
        """Mark each task queued for a short while, send its message, then keep the mark.

        The mark is left before the message goes out, so that losing Redis at any moment
        loses the mark too (the reaper then publishes the message again); it is kept for
        long only where it survived the sending, with the next read of the streams, not a
        round trip of its own. Dying between the two costs the task
        :data:`PENDING_MARK_TTL_MS` of waiting at most, not a lost message; the reaper
        sends it again sooner, once the mark is older than its grace and still unconfirmed.
        The marks go in one round trip of their own, the messages in another: the
        acknowledgements and marks due wait for the read that follows, not to delay the
        messages.
        """
        if not messages:
            return
        self._crash_at(CRASH_AFTER_COMMIT)
        marks = [(m.task_id, m.lease_token) for m in messages]
        pipe = self.client.pipeline(transaction=False)
        digests = self.archives.refresh(self._archives_of(messages), pipe)
        self.leases.mark(marks, QUEUED, PENDING_MARK_TTL_MS, pipe=pipe)
        replies = self.leases.execute(pipe)
        if digests and self.archive_source is not None:
            self.archives.put_missing(digests, replies[: len(digests)], self.archive_source)
        self._crash_at(CRASH_AFTER_MARK)
        now = time.time()
        try:
            self._send(messages, now)
        except Exception:
            # Redis may have lost the queues' bindings (it restarted): declare again.
            self._declared.clear()
            raise
        self.queues_seen.update(m.queue for m in messages)
        self._confirming += marks

    def _send(self, messages: Sequence[TaskMessage], now: float) -> None:
        """Send the messages on the producer this dispatcher keeps; kombu's batch sends
        their ``LPUSH``es as pipelines of PUBLISH_BATCH_SIZE. Each is the standard Celery
        message, made and sent by Celery's own ``create_task_message`` and
        ``send_task_message``: what ``send_task`` does, without checking a producer out of
        the pool, routing and making a result object for every message."""
        amqp = self.app.amqp
        producer = self._held_producer()
        try:
            with _batch_of(producer):
                for message in messages:
                    partition = partition_of(message.attempt_id, self.partition_count)
                    body = {
                        **message.to_json(),
                        "dispatched_at": now,
                        "event_partition": partition,
                    }
                    name = f"{message.task_id}.{message.lease_token}"
                    # A queue is declared with its first message only (Celery would check
                    # its binding with every message): messages go straight to its list.
                    declared = message.queue in self._declared
                    self._declared.add(message.queue)
                    task_message = amqp.create_task_message(
                        name,
                        TASK_NAME,
                        args=[body],
                        kwargs={},
                        origin=self._origin,
                        # What Celery logs of the message: never its params (they may hold
                        # secrets), and no time spent formatting them.
                        argsrepr=f"{message.full_name} task {name}",
                        kwargsrepr="{}",
                    )
                    amqp.send_task_message(
                        producer,
                        TASK_NAME,
                        task_message,
                        queue=message.queue,
                        declare=[] if declared else None,
                    )
        except BaseException:
            self._release_producer()  # the next send checks one out of the pool again
            raise

    def _held_producer(self) -> Any:
        """The producer messages are sent on, checked out of Celery's pool once."""
        if self._producer is None:
            self._producer = self.app.producer_pool.acquire(block=True, timeout=PRODUCER_WAIT)
        return self._producer

    def _release_producer(self) -> None:
        """Give the kept producer back to Celery's pool (after a failed send, or at close)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):  # it goes back to the pool even broken
                producer.release()

    def _archives_of(self, messages: Sequence[TaskMessage]) -> set[str]:
        """The archives these tasks run in, to be refreshed in Redis, or put back where it
        lost them, with the publish's marks (none without an archive source)."""
        digests = {m.archive_digest for m in messages if m.archive_digest}
        if digests and self.archive_source is None:
            log.error("no archive source: tasks of pushed projects cannot get their files")
            return set()
        return digests

    def poll_events(self, timeout_seconds: float) -> list[TaskEvent]:
        """Events from the streams, log chunks among them."""
        events: list[TaskEvent] = []
        applied, self._applied = self._applied, []
        try:
            entries = self.reader.read(timeout_seconds, acknowledge=applied, also=self._add_marks)
        except RedisError:
            self._put_back(applied, self._sending)
            raise
        finally:
            self._sending = ([], [])
        try:
            entries = self._route_old_events(entries)
        except BaseException:
            self.reader.reread()  # the entries read stay pending: read them again
            raise
        for entry_id, body in entries:
            self._delivered.append(entry_id)
            event = decode(body)
            if event is not None:
                events.append(event)
            if isinstance(event, TaskFinished):
                self._delivered_results.append((event.task_id, event.lease_token))
        return events

    def _route_old_events(
        self, entries: list[tuple[EntryRef, dict[str, object]]]
    ) -> list[tuple[EntryRef, dict[str, object]]]:
        """Move the task events read from the single stream of old (agents of a release
        before partitions) to their partitions' streams; the entries left to apply here.

        Sent on and acknowledged in one round trip: dying between the two sends an
        event twice, which changes nothing (results apply once per token)."""
        old_key = self.stream.key
        if self.attempts_of_tasks is None or not any(ref[0] == old_key for ref, _ in entries):
            return entries
        moving = {
            ref: (task_id, body)
            for ref, body in entries
            if ref[0] == old_key and (task_id := _task_id_of(body)) is not None
        }
        attempts = self.attempts_of_tasks(sorted({task_id for task_id, _ in moving.values()}))
        pipe = self.client.pipeline(transaction=False)
        for task_id, body in moving.values():
            attempt = attempts.get(task_id)
            if attempt is None:
                log.warning("dropped an event of an unknown task task_id=%d", task_id)
                continue
            key = stream_key(self.redis.prefix, partition_of(attempt, self.partition_count))
            raw = json.dumps(body, separators=(",", ":"))
            pipe.xadd(key, {"e": raw}, maxlen=STREAM_CAP, approximate=True)
        self.reader.add_acknowledgement(pipe, list(moving))
        pipe.execute()
        return [(ref, body) for ref, body in entries if ref not in moving]

    def acknowledge(self) -> None:
        """The events polled so far are committed: acknowledge them, and mark their
        results applied, with the next read of the streams, not a round trip of
        their own. Should this process die first, the next executor applies them again,
        and refuses them as stale."""
        self._applied += self._delivered
        self._delivered = []
        self._settled_results += self._delivered_results
        self._delivered_results = []

    def _send_due(self, pipe: Pipeline) -> None:
        """Add the acknowledgements, ``applied`` marks and confirmations due to ``pipe``
        and execute it; the marks are kept for the next round trip if Redis cannot be
        reached."""
        applied, self._applied = self._applied, []
        self.reader.add_acknowledgement(pipe, applied)
        self._add_marks(pipe)
        try:
            self.leases.execute(pipe)
        except RedisError:
            self._put_back(applied, self._sending)
            raise
        finally:
            self._sending = ([], [])

    def _add_marks(self, pipe: Pipeline) -> None:
        """Add the ``applied`` marks and the confirmations of queued marks due to ``pipe``
        (remembered until it was sent, to be put back should it fail)."""
        settled, self._settled_results = self._settled_results, []
        confirming, self._confirming = self._confirming, []
        self._sending = (settled, confirming)
        # Over a key of the same token whatever holds it (a second run of a message that
        # was published again is stopped), never over a newer token's.
        self.leases.mark(settled, APPLIED, APPLIED_MARK_TTL_MS, replace=True, pipe=pipe)
        self.leases.confirm(confirming, QUEUED, QUEUED_MARK_TTL_MS, pipe)

    def _put_back(
        self, applied: list[EntryRef], sending: tuple[list[tuple[int, int]], ...]
    ) -> None:
        """Acknowledgements and marks whose pipeline failed are due again."""
        self._applied = applied + self._applied
        settled, confirming = sending
        self._settled_results = settled + self._settled_results
        self._confirming = confirming + self._confirming

    def redeliver(self) -> None:
        """Read the unacknowledged events again on the next poll."""
        self._delivered = []
        self._delivered_results = []
        self.reader.claim_orphans()

    def revoke(self, tasks: Sequence[tuple[int, int]]) -> None:
        """Mark the leases canceled (a queued message is then refused, a running agent
        fails its next extension) and tell agents to check at once."""
        if not tasks:
            return
        self.leases.mark(tasks, CANCELED, CANCELED_MARK_TTL_MS, replace=True)
        self.client.publish(self.kill_channel, json.dumps([task_id for task_id, _ in tasks]))

    def note_interruption(self) -> None:
        """Redis failed a command: it may have failed over to a replica that lacks its
        last writes (a message, whose queued mark it has). From now on, a queued mark
        confirmed before this moment no longer vouches for its message (see
        :meth:`lease_states`)."""
        self._interrupted_at = time.time()

    def _from_before_interruption(self, ttl_left_ms: int) -> bool:
        """Whether a confirmed queued mark with ``ttl_left_ms`` left was confirmed before
        the last interruption (its age is its full time to live less what is left)."""
        if self._interrupted_at is None or ttl_left_ms < 0:
            return False
        since_ms = (time.time() - self._interrupted_at) * 1000
        return ttl_left_ms <= QUEUED_MARK_TTL_MS - since_ms

    def lease_states(self, task_ids: Sequence[int]) -> dict[int, LeaseState] | None:
        """Each task's lease or mark, and the newest token an agent took; a ``queued`` mark
        still on its short pending time to live is ``unconfirmed``, and so is one confirmed
        before the last Redis failure this executor saw: a failover may have lost its
        message (or left it with an agent whose connection died), and the reaper sends it
        again, which the lease makes harmless if the first copy runs after all. None while
        the keyspace settles after Redis lost its keys: a missing lease means nothing yet."""
        if self.keyspace.settling_ms() > 0:
            return None
        states = self.leases.states(task_ids)
        marked = [i for i, s in states.items() if s.current and s.current.owner == QUEUED]
        if not marked:
            return states
        pipe = self.client.pipeline(transaction=False)
        for task_id in marked:
            pipe.pttl(self.leases.key(task_id))
        for task_id, left in zip(marked, pipe.execute(), strict=True):
            if 0 <= int(left) <= PENDING_MARK_TTL_MS or self._from_before_interruption(int(left)):
                states[task_id] = dataclasses.replace(states[task_id], unconfirmed=True)
        return states

    def queue_depths(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages waiting in each queue (not yet taken by an agent)."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.llen(f"{self.redis.prefix}{queue}")
        return dict(zip(queues, (int(n) for n in pipe.execute()), strict=True))

    def wake(self) -> None:
        """Wake this executor waiting on its streams (new work was committed); with no
        stream to read it wakes at its next look anyway."""
        self.reader.wake()

    def close(self) -> None:
        """Acknowledge what was applied; release connections."""
        with contextlib.suppress(RedisError):
            self._send_due(self.client.pipeline(transaction=False))
        self._release_producer()
        self.client.close()
