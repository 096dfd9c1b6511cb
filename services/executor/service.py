"""``tickwork executor``: the executor loop against PostgreSQL, dispatching through Celery.

Any number of executors may run (a second replica during a rollout, say); one is active
at a time. The active one holds a PostgreSQL advisory lock on a connection of its own: if
it dies, the database drops the lock with the connection, and a standby takes over within
a second, claiming the events the dead one had read but not committed.

The active executor wakes on agents' events (it blocks reading the Redis stream) and on
new work committed by others (PostgreSQL ``NOTIFY``, turned into a wake-up on the
stream), and rescans the store every second as the fallback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from redis.exceptions import RedisError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from services.executor.loop import MAX_TASKS_PER_ATTEMPT, Recovery, WorkflowExecutor
from services.executor.metrics import ExecutorMetrics
from shared.dispatch.celery_app import RedisSettings
from shared.dispatch.celery_dispatch import CeleryDispatcher
from shared.dispatch.messages import DEFAULT_QUEUE
from shared.errors import StoreUnavailable
from shared.health import LoopHealth
from shared.store import tasks as task_store
from shared.store.dialects import dialect_of
from shared.store.engine import (
    WORK_CHANNEL,
    create_store_engine,
    describe_store_error,
    libpq_url,
    read_only,
)
from shared.store.migrate import is_up_to_date
from shared.store.projects import archive_reader

log = logging.getLogger(__name__)

LOCK_KEY = 0x7469636B  # "tick": the advisory lock only the active executor holds
STANDBY_POLL_SECONDS = 0.25
"""How often a standby tries the executor lock: the handover's wait after the active one
stops (a pooled connection and one query each time)."""
IDLE_CAP_SECONDS = 1.0
GAUGE_SECONDS = 2.0
LOCK_CHECK_SECONDS = 5.0
ERROR_BACKOFF_CAP_SECONDS = 10.0
SCHEMA_WAIT_LOG_SECONDS = 10.0


@dataclass(frozen=True)
class ExecutorSettings:
    """What one ``tickwork executor`` runs with."""

    database_url: str
    redis: RedisSettings
    log_dir: Path
    recovery: Recovery
    task_timeout_seconds: float | None = None
    crash_point: str = ""  # a fault test's, one of CRASH_POINTS
    max_tasks_per_attempt: int = MAX_TASKS_PER_ATTEMPT


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
    """Runs the executor loop whenever this process is the active executor."""

    def __init__(self, settings: ExecutorSettings, metrics: ExecutorMetrics | None = None):
        self.settings = settings
        self.metrics = metrics or ExecutorMetrics()
        self.engine = _open_migrated(settings.database_url)
        self.is_postgres = dialect_of(self.engine).serves_many_processes
        consumer = f"{socket.gethostname()}-{os.getpid()}"
        self.dispatcher = CeleryDispatcher(
            settings.redis,
            settings.log_dir,
            consumer,
            crash_point=settings.crash_point,
            archive_source=archive_reader(self.engine),
        )
        self.executor = WorkflowExecutor(
            self.engine,
            self.dispatcher,
            task_timeout_seconds=settings.task_timeout_seconds,
            recovery=settings.recovery,
            max_tasks_per_attempt=settings.max_tasks_per_attempt,
        )
        self.health = LoopHealth()
        self._listeners: list[NotifyListener] = []  # stopped, joined at the end
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current pass."""
        self._stop.set()
        self.executor.stop()

    def run(self) -> None:
        """Wait to become the active executor, then run until stopped."""
        try:
            while not self._stop.is_set():
                with self._active() as lock_conn:
                    if lock_conn is None:
                        continue
                    self._run_active(lock_conn)
        finally:
            for listener in self._listeners:
                listener.stop()
            self.dispatcher.close()
            self.engine.dispose()

    @contextlib.contextmanager
    def _active(self) -> Iterator[Connection | None]:
        """The connection holding the executor lock, once taken; None if stopped first."""
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
            try:
                taken = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LOCK_KEY})
                if taken.scalar():
                    log.info("this executor is now the active one")
                    self.metrics.active.set(1)
                    try:
                        yield conn
                    finally:
                        self.metrics.active.set(0)
                        with contextlib.suppress(SQLAlchemyError):
                            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
                    return
            except SQLAlchemyError as exc:
                log.warning("%s", describe_store_error(self.settings.database_url, exc))
            finally:
                conn.close()
            self.health.beat(reason="standby: another executor is active")
            self._stop.wait(STANDBY_POLL_SECONDS)
        yield None

    def _run_active(self, lock_conn: Connection) -> None:
        claimed = self.dispatcher.take_over()
        if claimed:
            log.info("claimed %d events a previous executor left unacknowledged", claimed)
        listener = NotifyListener(self.settings.database_url, self.dispatcher)
        if self.is_postgres:
            listener.start()
            self._listeners = [other for other in self._listeners if other.running()]
            self._listeners.append(listener)
        try:
            self._loop(lock_conn)
        finally:
            # The listener may sit in a one-second wait: it is not waited for here, so
            # that the lock (released once this returns) goes to a standby at once.
            listener.stop(wait=False)

    def _loop(self, lock_conn: Connection) -> None:
        backoff = 0.05
        failures = 0
        checked_at = gauges_at = 0.0
        while not self._stop.is_set():
            if self.is_postgres and time.monotonic() - checked_at >= LOCK_CHECK_SECONDS:
                checked_at = time.monotonic()
                if not _still_connected(lock_conn):
                    log.warning("lost the executor lock's connection; standing by")
                    return
            try:
                report = self.executor.tick()
                if time.monotonic() - gauges_at >= GAUGE_SECONDS:
                    gauges_at = time.monotonic()
                    self._update_gauges()
            except (SQLAlchemyError, RedisError, OSError) as exc:
                failures += 1
                delay = min(ERROR_BACKOFF_CAP_SECONDS, 0.5 * 2 ** min(failures, 5))
                log.error("executor pass failed (retrying in %.1fs): %s", delay, _one_line(exc))
                self.health.beat(ready=False, reason=f"a pass failed: {_one_line(exc)}")
                self._stop.wait(delay)
                continue
            failures = 0
            self.health.beat(reason="active")
            self.metrics.record(report)
            if report.more_ready:
                continue
            backoff = 0.05 if report.did_work else min(backoff * 2, IDLE_CAP_SECONDS)
            try:
                wait = self.executor.seconds_until_due(self.executor.clock.now(), backoff)
                self.executor.wait_for_work(wait)
            except RedisError as exc:
                log.error("cannot read agents' events: %s", _one_line(exc))
                self._stop.wait(1.0)

    def _update_gauges(self) -> None:
        with read_only(self.engine) as conn:
            counts = task_store.count_in_flight(conn)
        self.metrics.queued_tasks.set(counts.get("queued", 0))
        self.metrics.running_tasks.set(counts.get("running", 0))
        queues = sorted(self.dispatcher.queues_seen | {DEFAULT_QUEUE})
        for queue, depth in self.dispatcher.queue_depths(queues).items():
            self.metrics.queue_depth.labels(queue=queue).set(depth)


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


def _still_connected(conn: Connection) -> bool:
    try:
        conn.execute(text("SELECT 1"))
    except SQLAlchemyError:
        return False
    return True


def _one_line(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
