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

import psycopg
from redis.exceptions import RedisError
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from services.executor.config import ExecutorSettings
from services.executor.loop import WorkflowExecutor
from services.executor.metrics import ExecutorMetrics
from services.executor.report import TickReport
from shared.dispatch.celery_dispatch import CeleryDispatcher
from shared.dispatch.messages import DEFAULT_QUEUE
from shared.errors import StoreUnavailable
from shared.health import LoopHealth
from shared.runner import IdleBackoff, Retry, run_until_stopped
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
        """Run passes with the shared runner until stopped or the lock's connection is lost."""
        run_until_stopped(
            _ActivePasses(self, lock_conn).tick,
            stop=self._stop,
            wait=self._wait,
            idle=IdleBackoff(cap_seconds=IDLE_CAP_SECONDS),
            retry=PASS_RETRY,
            health=self.health,
            ready_reason="active",
            on_pass=self.metrics.record,
        )

    def _wait(self, idle_seconds: float) -> None:
        """Wait for agents' events; a Redis that fails is read again a second later."""
        try:
            self.executor.wait(idle_seconds)
        except RedisError as exc:
            log.error("cannot read agents' events: %s", _one_line(exc))
            self._stop.wait(STREAM_RETRY_SECONDS)

    def update_gauges(self) -> None:
        """Set the in-flight and queue-depth gauges from the store and Redis."""
        with read_only(self.engine) as conn:
            counts = task_store.count_in_flight(conn)
        self.metrics.queued_tasks.set(counts.get("queued", 0))
        self.metrics.running_tasks.set(counts.get("running", 0))
        queues = sorted(self.dispatcher.queues_seen | {DEFAULT_QUEUE})
        for queue, depth in self.dispatcher.queue_depths(queues).items():
            self.metrics.queue_depth.labels(queue=queue).set(depth)


class _ActivePasses:
    """The passes of one active period: a pass, after checking every
    :data:`LOCK_CHECK_SECONDS` that the lock's connection is alive (None once it is not:
    this executor stands by), and the gauges updated every :data:`GAUGE_SECONDS`."""

    def __init__(self, service: ExecutorService, lock_conn: Connection) -> None:
        self.service = service
        self.lock_conn = lock_conn
        self.checked_at = 0.0
        self.gauges_at = 0.0

    def tick(self) -> TickReport | None:
        service = self.service
        if service.is_postgres and time.monotonic() - self.checked_at >= LOCK_CHECK_SECONDS:
            self.checked_at = time.monotonic()
            if not _still_connected(self.lock_conn):
                log.warning("lost the executor lock's connection; standing by")
                return None
        report = service.executor.tick()
        if time.monotonic() - self.gauges_at >= GAUGE_SECONDS:
            self.gauges_at = time.monotonic()
            service.update_gauges()
        return report


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
