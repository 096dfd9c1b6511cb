"""An agent's finished results, kept until the executor has applied them.

A finished run's result goes to the event stream together with the run's ``done`` mark on
its lease key, in one round trip. Redis may be down at that moment, or lose both before
the executor has read the result (it restarted with nothing on disk); the executor would
then find the task silent and run it again: its side effects twice. So the agent keeps
every result it reported in a :class:`ResultOutbox` until the task's lease key says it is
settled (the executor marks it ``applied`` once it committed or refused it, or a newer
token was issued), and every :data:`CHECK_SECONDS` it looks at the keys of what it holds:

- the ``done`` mark is gone (Redis lost it): the mark is put back at once and the result
  sent again. The executor's reaper gives agents time to do so after Redis lost its keys
  (see :mod:`tickwork.shared.dispatch.keyspace`) before it requeues a task whose lease is missing;
- the mark is there but nothing settled it for :data:`RESEND_SECONDS` (an acknowledgement
  lost on the way): the result is sent again.

The executor applies one result per token and refuses the others, so a result sent twice
is applied once. The outbox lives in the pool process's memory: an agent that dies with
results in it loses them, and the reaper runs those tasks again (at least once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from tickwork.shared.dispatch.events import EventStream, retry_redis
from tickwork.shared.dispatch.leases import Lease, LeaseStore, ResultMark
from tickwork.shared.dispatch.messages import AgentEvent, TaskFinished

log = logging.getLogger(__name__)

CHECK_SECONDS = 0.5
"""How often the outbox looks at the lease keys of the results it holds."""
RESEND_SECONDS = 30.0
"""How long a result whose ``done`` mark is in place may wait for the executor before it
is sent again."""


@dataclass
class _Held:
    lease: Lease
    result: TaskFinished
    sent_at: float  # time.monotonic() of the last attempt to send it
    # Events to go out before the result (the log's last chunks) until it was first sent.
    before: list[AgentEvent] = field(default_factory=list)
    # The stream of the task's partition (None: the outbox's own); sent again there too.
    stream: EventStream | None = None


class ResultOutbox:
    """The results one pool process reported and the executor has not settled yet.

    ``done_mark_ms`` is how long a ``done`` mark (put by :meth:`deliver` or put back by
    :meth:`check`) refuses duplicates of the task's message; ``on_resent`` is told how
    many results each check sent again.
    """

    def __init__(
        self,
        leases: LeaseStore,
        stream: EventStream,
        done_mark_ms: int,
        on_resent: Callable[[int], None] | None = None,
    ) -> None:
        self.leases = leases
        self.stream = stream
        self.done_mark_ms = done_mark_ms
        self.on_resent = on_resent
        self._held: dict[tuple[int, int], _Held] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="result-outbox", daemon=True)

    def start(self) -> None:
        """Check the held results in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop checking (results still held are lost with the process)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def deliver(
        self,
        lease: Lease,
        result: TaskFinished,
        before: Sequence[AgentEvent] = (),
        *,
        wait_seconds: float = 0.0,
        stream: EventStream | None = None,
    ) -> bool:
        """Send ``before`` and ``result`` and turn ``lease`` into its ``done`` mark, in one
        round trip, trying again for up to ``wait_seconds`` while Redis cannot be reached;
        keep the result until it is settled. False when it could not be sent yet: it goes
        out as soon as Redis answers.

        Waiting matters to Celery: the caller acknowledges the task's message when this
        returns, and an acknowledgement tried while Redis is down can leave the worker's
        consumer deaf to the queue after Redis comes back. ``stream`` is the task's
        partition's (default: the outbox's); the result is sent there again if need be."""
        held = _Held(lease, result, time.monotonic(), list(before), stream)
        with self._lock:
            self._held[(lease.task_id, lease.token)] = held
        try:
            retry_redis(lambda: self._send([held], mark=True), time.monotonic() + wait_seconds)
        except RedisError as exc:
            log.warning(
                "cannot report a result yet; it waits in the outbox task_id=%d lease_token=%d: %s",
                lease.task_id,
                lease.token,
                exc,
            )
            return False
        return True

    def _send(self, held: Sequence[_Held], *, mark: bool = False) -> None:
        """Send each result after the events still held before it (and, with ``mark``,
        turn its lease into the ``done`` mark), in one round trip and one transaction.

        In a transaction because Redis hands an executor blocked on the stream what is
        there after each command: a plain pipeline would wake it with the run's first
        event alone (``started``), and the log and the result would take it a second
        read and a second pass."""
        pipe = self.stream.client.pipeline(transaction=True)
        for h in held:
            (h.stream or self.stream).emit([*h.before, h.result], pipe=pipe)
        for h in held if mark else ():
            self.leases.finish(h.lease, self.done_mark_ms, pipe=pipe)
        # By digest: redis-py's own execute would first ask whether Redis has the script.
        self.leases.execute(pipe)
        for h in held:
            h.before, h.sent_at = [], time.monotonic()

    def held(self) -> list[tuple[int, int]]:
        """The ``(task id, lease token)`` of every result not settled yet."""
        with self._lock:
            return sorted(self._held)

    def check(self) -> int:
        """One look at the held results' lease keys: forget the settled ones, put lost
        ``done`` marks back and send those results again, and the ones unanswered for
        :data:`RESEND_SECONDS`. How many were sent again; raises RedisError."""
        with self._lock:
            held = list(self._held.values())
        if not held:
            return 0
        tasks = [(h.lease.task_id, h.lease.token) for h in held]
        marks = self.leases.restore_done(tasks, self.done_mark_ms)
        now = time.monotonic()
        settled = [
            key for key, mark in zip(tasks, marks, strict=True) if mark is ResultMark.SETTLED
        ]
        again = [
            h
            for h, mark in zip(held, marks, strict=True)
            if mark is ResultMark.RESTORED
            or (mark is ResultMark.ON_THE_WAY and now - h.sent_at >= RESEND_SECONDS)
        ]
        with self._lock:
            for key in settled:
                self._held.pop(key, None)
        if again:
            self._send(again)
            if self.on_resent is not None:
                self.on_resent(len(again))
            log.warning(
                "sent %d results again (their done marks were lost, or no answer came): %s",
                len(again),
                " ".join(f"task_id={h.lease.task_id}/{h.lease.token}" for h in again),
            )
        return len(again)

    def _run(self) -> None:
        while not self._stop.wait(CHECK_SECONDS):
            try:
                self.check()
            except RedisError as exc:
                log.debug("outbox check failed (Redis unavailable?): %s", exc)
