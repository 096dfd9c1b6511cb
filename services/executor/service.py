"""``tickwork executor``: the executor loop against PostgreSQL, dispatching through Celery.

Any number of executors may run, and all of them work: attempts are spread over a fixed
number of partitions (``attempt_id % TICKWORK_EXECUTOR_PARTITIONS``, 16 by default), and
each live executor runs the partitions it holds under PostgreSQL advisory locks on a
connection of its own, a fair share of them (see :mod:`tickwork.services.executor.partitions`).
Every pass keeps to those partitions: new attempts and kills, ready, due and waiting
tasks, the reaper, SLAs, and the agents' events, which come through one Redis stream per
partition. When an executor starts or stops, the others give up or take partitions
within a second; when one dies, the database drops its locks with its connection, and
the others take its partitions and claim the events it had read but not committed.
A partition changes hands only between passes; the lease tokens fence what a stalled
executor might still write.

Each executor wakes on agents' events of its partitions (it blocks reading their
streams) and on new work committed by others (PostgreSQL ``NOTIFY``, which every
executor listens to, turned into a wake-up on one of its streams), and rescans the store
every second as the fallback. On SQLite there is one executor, running every attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import psycopg
from redis.exceptions import RedisError
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.executor.config import ExecutorSettings
from tickwork.services.executor.loop import WorkflowExecutor
from tickwork.services.executor.metrics import ExecutorMetrics
from tickwork.services.executor.notifier import Notifier
from tickwork.services.executor.partitions import (
    REBALANCE_SECONDS,
    PartitionCountConflict,
    PartitionLeases,
)
from tickwork.services.executor.report import TickReport
from tickwork.shared.dispatch.celery_dispatch import CeleryDispatcher
from tickwork.shared.dispatch.messages import DEFAULT_QUEUE
from tickwork.shared.errors import StoreUnavailable
from tickwork.shared.health import LoopHealth
from tickwork.shared.runner import IdleBackoff, Retry, run_until_stopped
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import (
    WORK_CHANNEL,
    create_store_engine,
    describe_store_error,
    libpq_url,
    read_only,
)
from tickwork.shared.store.migrate import is_up_to_date
from tickwork.shared.store.partitions import AttemptFilter, attempts_of_tasks
from tickwork.shared.store.projects import archive_reader

log = logging.getLogger(__name__)

STANDBY_POLL_SECONDS = 0.25
"""How often an executor tries to join while it cannot (the store is down, or an executor
of an older release holds the lock alone)."""
IDLE_CAP_SECONDS = 1.0
"""The longest an idle executor sleeps (on PostgreSQL, no longer than the next look at
the partitions is due: it looks after a pass)."""
GAUGE_SECONDS = 2.0
ERROR_BACKOFF_CAP_SECONDS = 10.0
SCHEMA_WAIT_LOG_SECONDS = 10.0
STREAM_RETRY_SECONDS = 1.0
"""How long to wait before reading agents' events again after Redis failed."""

__all__ = ["ExecutorService", "ExecutorSettings", "NotifyListener"]


class NotifyListener:
    """Turns PostgreSQL notifications on :data:`WORK_CHANNEL` into executor wake-ups."""

    def __init__(self, database_url: str, dispatcher: CeleryDispatcher) -> None:
        self.conninfo = libpq_url(database_url)
        self.dispatcher = dispatcher
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notify-listener", daemon=True)

    def start(self) -> None:
        """Listen in a background thread."""
        self._thread.start()

    def running(self) -> bool:
        """Whether the listening thread is still alive."""
        return self._thread.is_alive()

    def stop(self, *, wait: bool = True) -> None:
        """Stop listening (within a second); ``wait=False`` returns at once."""
        self._stop.set()
        if wait:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {WORK_CHANNEL}")
                    while not self._stop.is_set():
                        if any(True for _ in conn.notifies(timeout=1.0, stop_after=1)):
                            self.dispatcher.wake()
            except (psycopg.Error, RedisError, OSError) as exc:
                log.debug("notification listener reconnecting: %s", exc)
                self._stop.wait(1.0)


class ExecutorService:
    """Runs the executor loop over the partitions this process holds."""

    def __init__(self, settings: ExecutorSettings, metrics: ExecutorMetrics | None = None):
        self.settings = settings
        self.metrics = metrics or ExecutorMetrics()
        self.engine = _open_migrated(settings.database_url)
        self.is_postgres = dialect_of(self.engine).serves_many_processes
        consumer = f"{socket.gethostname()}-{os.getpid()}"
        self.dispatcher = CeleryDispatcher(
            settings.redis,
            consumer,
            crash_point=settings.crash_point,
            archive_source=archive_reader(self.engine),
            partition_count=settings.partition_count,
            attempts_of_tasks=self._attempts_of_tasks,
        )
        self.executor = WorkflowExecutor(
            self.engine,
            self.dispatcher,
            task_timeout_seconds=settings.task_timeout_seconds,
            recovery=settings.recovery,
            max_tasks_per_attempt=settings.max_tasks_per_attempt,
        )
        self.health = LoopHealth()
        self._leases: PartitionLeases | None = None
        self._streams_behind = False  # the streams read lag the partitions held
        self._standby_reason = ""  # why it last could not join, as logged
        self._listeners: list[NotifyListener] = []  # stopped, joined at the end
        self._stop = threading.Event()

    def _attempts_of_tasks(self, task_ids: Sequence[int]) -> dict[int, int]:
        with read_only(self.engine) as conn:
            return attempts_of_tasks(conn, task_ids)

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current pass."""
        self._stop.set()

    def run(self) -> None:
        """Join the live executors, then run the partitions given to this one until stopped."""
        notifier = Notifier(self.engine, crash_point=self.settings.crash_point)
        notifier.start()
        try:
            while not self._stop.is_set():
                with self._member() as lock_conn:
                    if lock_conn is None:
                        continue
                    self._run_member()
        finally:
            notifier.stop()
            for listener in self._listeners:
                listener.stop()
            self.dispatcher.close()
            self.executor.close()
            self.engine.dispose()

    @contextlib.contextmanager
    def _member(self) -> Iterator[Connection | None]:
        """The lock connection once this executor joined the live ones; None if stopped
        first. On SQLite, a connection at once (one executor, every attempt)."""
        if not self.is_postgres:
            with self.engine.connect() as conn:
                yield conn
            return
        while not self._stop.is_set():
            try:
                conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            except SQLAlchemyError as exc:
                log.warning("%s", describe_store_error(self.settings.database_url, exc))
                self.health.beat(ready=False, reason="the store is unavailable")
                self._stop.wait(STANDBY_POLL_SECONDS)
                continue
            reason, level = "standby: the store is unavailable", logging.INFO
            try:
                leases = PartitionLeases(conn, self.settings.partition_count)
                if leases.join():
                    log.info("this executor joined the live ones")
                    self._standby_reason = ""
                    self._leases = leases
                    self._held_changed(frozenset())
                    try:
                        yield conn
                    finally:
                        self._leases = None
                        with contextlib.suppress(RedisError):  # owed to the next holders
                            self.dispatcher.flush_acknowledgements()
                        self._held_changed(frozenset())
                        with contextlib.suppress(SQLAlchemyError):
                            leases.leave()
                    return
                reason, level = leases.refusal, leases.refusal_level
            except SQLAlchemyError as exc:
                log.warning("%s", describe_store_error(self.settings.database_url, exc))
            finally:
                conn.close()
            if reason != self._standby_reason:
                log.log(level, "%s", reason)
                self._standby_reason = reason
            self.health.beat(reason=reason)
            self._stop.wait(STANDBY_POLL_SECONDS)
        yield None

    def _run_member(self) -> None:
        listener = NotifyListener(self.settings.database_url, self.dispatcher)
        if self.is_postgres:
            listener.start()
            self._listeners = [other for other in self._listeners if other.running()]
            self._listeners.append(listener)
        else:
            claimed = self.dispatcher.take_over()
            if claimed:
                log.info("claimed %d events a previous executor left unacknowledged", claimed)
            self.metrics.active.set(1)
            self.metrics.partitions.set(self.settings.partition_count)
        try:
            self._loop()
        finally:
            # The listener may sit in a one-second wait: it is not waited for here, so
            # that the locks (released once this returns) go to the others at once.
            listener.stop(wait=False)

    def _loop(self) -> None:
        """Run passes with the shared runner until stopped or the lock's connection is lost."""
        run_until_stopped(
            _MemberPasses(self).tick,
            stop=self._stop,
            wait=self._wait,
            idle=IdleBackoff(cap_seconds=IDLE_CAP_SECONDS),
            retry=PASS_RETRY,
            health=self.health,
            ready_reason="active",
            on_pass=self.metrics.record,
        )

    def rebalance(self) -> bool:
        """Move towards this executor's share of the partitions (between passes); whether
        what it holds changed. Raises SQLAlchemyError when the lock connection is lost."""
        leases = self._leases
        if leases is None:
            return False
        changed = leases.rebalance(before_release=self.dispatcher.flush_acknowledgements)
        if changed or self._streams_behind:
            self._held_changed(leases.held)
        return changed

    def _held_changed(self, held: frozenset[int]) -> None:
        """Keep the passes and the events read to the partitions held now (the streams
        again at the next rebalance if Redis fails meanwhile: the error is raised)."""
        count = self.settings.partition_count
        self.executor.keep_to(AttemptFilter.of_partitions(held, count))
        self.metrics.partitions.set(len(held))
        self.metrics.active.set(1 if held else 0)
        self._streams_behind = True
        claimed = self.dispatcher.follow_partitions(sorted(held))
        self._streams_behind = False
        if claimed:
            log.info("claimed %d events others left unacknowledged in taken partitions", claimed)

    def rebalance_seconds(self) -> float:
        """How often to look at the partitions: an executor that holds none looks as
        often as one stood by for the lock of old, to take a dead one's share at once."""
        return REBALANCE_SECONDS if self.held else STANDBY_POLL_SECONDS

    @property
    def held(self) -> frozenset[int]:
        """The partitions this executor runs now (every one on SQLite)."""
        if not self.is_postgres:
            return frozenset(range(self.settings.partition_count))
        return self._leases.held if self._leases is not None else frozenset()

    def _wait(self, idle_seconds: float) -> None:
        """Wait for agents' events, no longer than the next look at the partitions is due
        (sooner while this executor holds none); a Redis that fails is read again a
        second later."""
        if self.is_postgres:
            idle_seconds = min(idle_seconds, self.rebalance_seconds())
        try:
            self.executor.wait(idle_seconds)
        except RedisError as exc:
            self.dispatcher.note_interruption()
            log.error("cannot read agents' events: %s", _one_line(exc))
            self._stop.wait(STREAM_RETRY_SECONDS)

    def update_gauges(self) -> None:
        """Set the in-flight and queue-depth gauges from the store and Redis."""
        with read_only(self.engine) as conn:
            counts = task_store.count_in_flight(conn)
            pools = pool_store.list_pools(conn)
        self.metrics.record_pools(pools)
        self.metrics.queued_tasks.set(counts.get("queued", 0))
        self.metrics.running_tasks.set(counts.get("running", 0))
        queues = sorted(self.dispatcher.queues_seen | {DEFAULT_QUEUE})
        for queue, depth in self.dispatcher.queue_depths(queues).items():
            self.metrics.queue_depth.labels(queue=queue).set(depth)


class _MemberPasses:
    """The passes of one membership: a pass over the partitions held (nothing while it
    holds none), then a look at the partitions every :data:`REBALANCE_SECONDS` (None
    once the lock connection is lost: this executor joins again), and the gauges
    updated every :data:`GAUGE_SECONDS`."""

    def __init__(self, service: ExecutorService) -> None:
        self.service = service
        self.rebalanced_at = 0.0
        self.gauges_at = 0.0

    def tick(self) -> TickReport | None:
        service = self.service
        try:
            report = service.executor.tick() if service.held else TickReport()
        except RedisError:
            service.dispatcher.note_interruption()  # Redis may have failed over
            raise
        if service.is_postgres:
            changed = self._looked_at_partitions()
            if changed is None:
                return None
            report.more_ready = report.more_ready or changed  # a first pass over new ones
        if time.monotonic() - self.gauges_at >= GAUGE_SECONDS:
            self.gauges_at = time.monotonic()
            service.update_gauges()
        return report

    def _looked_at_partitions(self) -> bool | None:
        """Rebalance when due, right after a pass: its events are applied and nothing is
        read yet for the next one. Whether the partitions held changed; None once the
        lock connection is lost."""
        if time.monotonic() - self.rebalanced_at < self.service.rebalance_seconds():
            return False
        self.rebalanced_at = time.monotonic()
        try:
            return self.service.rebalance()
        except SQLAlchemyError as exc:
            log.warning("lost the lock connection (%s); joining again", _one_line(exc))
            return None
        except PartitionCountConflict as conflict:
            log.error("giving every partition up: %s", conflict)
            return None


def _open_migrated(database_url: str) -> Engine:
    """An engine on the store once its schema is current (a migration job may still be
    running: wait for it, saying so); StoreUnavailable if the database cannot be reached."""
    engine = create_store_engine(database_url)
    said_at = 0.0
    while True:
        try:
            current = is_up_to_date(engine)
        except SQLAlchemyError as exc:
            engine.dispose()
            raise StoreUnavailable(describe_store_error(database_url, exc)) from exc
        if current:
            return engine
        if time.monotonic() - said_at >= SCHEMA_WAIT_LOG_SECONDS:
            said_at = time.monotonic()
            log.warning("waiting for the database schema to be current (`tickwork db upgrade`)")
        time.sleep(1.0)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]


def _pass_failed(description: str) -> str:
    return f"a pass failed: {description}"


PASS_RETRY = Retry(
    errors=(SQLAlchemyError, RedisError, OSError),
    first_seconds=1.0,
    cap_seconds=ERROR_BACKOFF_CAP_SECONDS,
    message="executor pass failed (retrying in %.1fs): %s",
    logger=log,
    describe=_one_line,
    reason=_pass_failed,
)
"""A pass that fails on the store, Redis or the network is retried after 1, 2, 4, 8,
then every 10 seconds, the executor not ready meanwhile."""
