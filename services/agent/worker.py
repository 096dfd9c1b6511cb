"""``tickwork agent``: a Celery worker that runs task messages under Redis leases.

Each pool process keeps one :class:`AgentRuntime`: a Redis client, the lease heartbeat, a
listener for kills, and the task runner. For every message it

1. takes the lease for (task, token); a message for an older token, or one another agent
   holds, finished or that was killed, is dropped;
2. reports ``started``, runs the operator (child processes in their own process group,
   with the task's time limit and resource limits) while the heartbeat extends the lease
   and a streamer sends the log to Redis;
3. reports the result with its token and leaves the ``done`` mark on the lease, and keeps
   the result until the executor has applied it (sending it again if Redis lost it, see
   :mod:`tickwork.services.agent.outbox`).

If the heartbeat cannot extend the lease (the agent stalled past it, Redis lost it, or a
kill took it), the operator's process group is stopped and nothing is reported: the
executor has given the task to someone else. On SIGTERM the worker stops taking messages
and lets running tasks finish for ``grace_seconds``; then it stops them, releases their
leases and reports them released, so the executor requeues them at once.

The agent needs Redis only: everything a task needs is in its message, or, for a pushed
project, in its archive, which the executor leaves in Redis and the agent unpacks once
under ``<work dir>/projects/<digest>`` (see :mod:`tickwork.services.agent.archives`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery import signals as celery_signals
from celery.apps.worker import install_worker_term_handler
from celery.exceptions import SecurityWarning
from redis.exceptions import RedisError

from tickwork.services.agent.archives import ArchiveCache
from tickwork.services.agent.config import AgentSettings
from tickwork.services.agent.log_stream import (
    LogPump,
    LogStreamer,
    remove_dead_spools,
    remove_spool,
)
from tickwork.services.agent.metrics import AgentMetrics
from tickwork.services.agent.operators.base import RunControl, StopReason
from tickwork.services.agent.outbox import ResultOutbox
from tickwork.services.agent.runner import TaskRunner
from tickwork.services.agent.spool import SpoolLog
from tickwork.shared.dispatch.archives import RedisArchives
from tickwork.shared.dispatch.celery_app import TASK_NAME, make_celery
from tickwork.shared.dispatch.events import EventStream, retry_redis
from tickwork.shared.dispatch.leases import Heartbeat, Lease, LeaseStore
from tickwork.shared.dispatch.messages import (
    AgentEvent,
    TaskEvent,
    TaskFinished,
    TaskMessage,
    TaskReleased,
    TaskStarted,
)
from tickwork.shared.health import LoopHealth

log = logging.getLogger(__name__)

LEASE_LOST = StopReason.LEASE_LOST
SHUTDOWN = StopReason.SHUTDOWN
BEAT_SECONDS = 10.0
"""How often a consuming agent tells its ``/healthz`` that its event loop turns."""
LOOP_STALE_SECONDS = 900.0
"""How long the event loop may stand still before ``/healthz`` fails and the agent is
restarted. The loop also stands still while Celery reconnects to Redis, and a Redis
outage is waited out, not a reason to restart every agent: readiness goes at once."""


@dataclass
class _Run:
    lease: Lease
    control: RunControl


class AgentRuntime:
    """Everything one pool process needs to run task messages."""

    def __init__(self, settings: AgentSettings, metrics: AgentMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.client = settings.redis.client()
        self.leases = LeaseStore(self.client, settings.redis.prefix)
        self.stream = EventStream(self.client, settings.redis.prefix)
        self.ttl_ms = int(settings.lease_ttl_seconds * 1000)
        self.heartbeat = Heartbeat(
            self.leases,
            self.ttl_ms,
            self._lost,
            interval_ms=int(settings.heartbeat_seconds * 1000),
        )
        self.archives = RedisArchives(self.client, settings.redis.prefix)
        remove_dead_spools(settings.work_dir / "logs")
        self.runner = TaskRunner(
            settings.work_dir / "logs" / str(os.getpid()),
            settings.limits,
            ArchiveCache(settings.work_dir / "projects", self.archives.fetch),
        )
        self.log_pump = LogPump()
        self.owner_prefix = f"{socket.gethostname()}/{os.getpid()}"
        self._runs: dict[int, _Run] = {}
        self._lock = threading.Lock()
        self.outbox = ResultOutbox(
            self.leases, self.stream, settings.done_mark_ms, metrics.results_resent.inc
        )
        self.outbox.start()
        self.heartbeat.start()
        self._listen_for_kills()

    def _listen_for_kills(self) -> None:
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        pubsub.subscribe(**{f"{self.settings.redis.prefix}kill": self._on_kill})

        def on_error(exc: BaseException, pubsub: Any, thread: Any) -> None:
            log.debug("kill listener reconnecting: %s", exc)
            time.sleep(1.0)

        self._kill_listener = pubsub.run_in_thread(
            sleep_time=1.0, daemon=True, exception_handler=on_error
        )

    def close(self) -> None:
        """Stop the heartbeat, the log pump, the outbox and the kill listener (held leases
        then expire)."""
        self.heartbeat.stop()
        self.log_pump.close()
        self.outbox.stop()
        self._kill_listener.stop()
        self.client.close()

    def _on_kill(self, message: dict[str, Any]) -> None:
        try:
            task_ids = set(json.loads(message["data"]))
        except (TypeError, ValueError):
            return
        with self._lock:
            mine = task_ids & self._runs.keys()
        if mine:
            self.heartbeat.wake()  # the kill took the lease: the next beat stops the task

    def _lost(self, lease: Lease) -> None:
        with self._lock:
            run = self._runs.get(lease.task_id)
        if run is not None and run.lease == lease and run.control.stop(LEASE_LOST):
            log.warning(
                "lost the lease; stopping the task task_id=%d lease_token=%d",
                lease.task_id,
                lease.token,
            )
            self.metrics.leases_lost.inc()

    def release_all(self) -> None:
        """The grace after SIGTERM is over: stop every run and give its task back."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.control.stop(SHUTDOWN)

    def run(self, body: Any) -> None:
        """Run one task message (the Celery task's body)."""
        try:
            message = TaskMessage.from_json(body)
        except (TypeError, ValueError, AttributeError) as exc:
            log.error("dropped a malformed task message: %s", exc)
            self.metrics.dropped.inc()
            return
        lease = Lease(
            message.task_id, message.lease_token, f"{self.owner_prefix}/{uuid.uuid4().hex[:12]}"
        )
        if not self.leases.take(lease, self.ttl_ms):
            log.info(
                "dropped a message another agent holds or that is stale task_id=%d lease_token=%d",
                message.task_id,
                message.lease_token,
            )
            self.metrics.dropped.inc()
            return
        if message.dispatched_at:
            self.metrics.start_latency.observe(max(0.0, time.time() - message.dispatched_at))
        run = _Run(lease, RunControl())
        with self._lock:
            self._runs[message.task_id] = run
        self.heartbeat.hold(lease)
        relative, _ = self.runner.log_file_of(message)
        spool = SpoolLog(self.runner.log_root / relative.name)  # unique: task id and token
        stream = self.stream.of_partition(message.event_partition)
        streamer = LogStreamer(
            stream, message, relative, spool, self.log_pump, self.settings.log_limits
        )
        try:
            report = self._reporter(run, streamer, stream)
            self.runner(message, report, run.control, spool=spool)
        finally:
            self.heartbeat.drop(lease)
            streamer.stop()  # the report stopped it already, unless the runner failed
            with self._lock:
                self._runs.pop(message.task_id, None)
            spool.close()
            remove_spool(spool)  # sent, or not to be reported: the executor keeps the log

    def _reporter(
        self, run: _Run, streamer: LogStreamer, stream: EventStream
    ) -> Callable[[TaskEvent], None]:
        """What the runner calls with its events; they go to ``stream`` (the partition's)."""

        def report(event: TaskEvent) -> None:
            if isinstance(event, TaskStarted):
                streamer.start(event)
                return
            assert isinstance(event, TaskFinished)
            self.heartbeat.drop(run.lease)
            reason = run.control.reason
            # One deadline for everything this report sends: the lease's lifetime.
            deadline = time.monotonic() + self.settings.lease_ttl_seconds
            pending = (
                self._finish_log(streamer, stream, deadline) if reason in (None, SHUTDOWN) else []
            )
            if reason == SHUTDOWN:
                released = TaskReleased(event.task_id, event.lease_token, reason)
                self._emit(stream, [*pending, released], deadline)
                self.leases.release(run.lease)
                self.metrics.tasks.labels(outcome="released").inc()
            elif reason is not None:
                # Someone else owns the task now (or it was killed): report nothing.
                streamer.stop()
                self.metrics.tasks.labels(outcome="stopped").inc()
            else:
                finished = streamer.describe(event)
                wait = max(0.0, deadline - time.monotonic())
                self.outbox.deliver(run.lease, finished, pending, wait_seconds=wait, stream=stream)
                self.metrics.tasks.labels(outcome=event.outcome.value).inc()

        return report

    def _finish_log(
        self, streamer: LogStreamer, stream: EventStream, deadline: float
    ) -> list[AgentEvent]:
        """The rest of the run's log sent, but for its last events (to go out with the
        result). Redis down until ``deadline`` costs the rest of the log, never the
        result: that one waits in the outbox."""
        try:
            return streamer.finish(lambda events: self._emit(stream, events, deadline))
        except RedisError as exc:
            log.warning("the rest of a log is lost: Redis cannot be reached: %s", exc)
            return []

    @staticmethod
    def _emit(stream: EventStream, events: list[AgentEvent], deadline: float) -> None:
        """Send events to ``stream`` in one round trip, trying again while Redis is down
        until ``deadline``."""
        retry_redis(lambda: stream.emit(events), deadline)


_runtime: AgentRuntime | None = None
_runtime_pid = 0


def agent_health() -> LoopHealth:
    """The probes of an agent: live unless its loop stood still for
    :data:`LOOP_STALE_SECONDS`, ready while it beat within three beats."""
    return LoopHealth(LOOP_STALE_SECONDS, ready_within=3 * BEAT_SECONDS)


def build_app(
    settings: AgentSettings, metrics: AgentMetrics, health: LoopHealth | None = None
) -> Celery:
    """The Celery app of an agent, with the task that runs tickwork's messages.

    ``health`` beats from the worker's event loop every :data:`BEAT_SECONDS` once it
    consumes, and drains at SIGTERM: the agent's ``/healthz`` and ``/readyz``.
    """
    health = health or agent_health()
    app = make_celery(settings.redis, name="tickwork-agent")

    def runtime() -> AgentRuntime:
        global _runtime, _runtime_pid
        if _runtime is None or _runtime_pid != os.getpid():  # one per pool process
            _runtime = AgentRuntime(settings, metrics)
            _runtime_pid = os.getpid()
        return _runtime

    @app.task(name=TASK_NAME, acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
    def run_task(body: Any) -> None:
        runtime().run(body)

    def on_release_signal(_signum: int, _frame: object) -> None:
        if _runtime is not None:
            threading.Thread(target=_runtime.release_all, name="release", daemon=True).start()

    def on_process_init(**_kwargs: Any) -> None:
        signal.signal(signal.SIGUSR2, on_release_signal)

    def on_ready(sender: Any = None, **_kwargs: Any) -> None:
        _install_grace(sender, settings.grace_seconds, health)
        health.beat(reason="consuming")
        sender.timer.call_repeatedly(BEAT_SECONDS, health.beat, kwargs={"reason": "consuming"})

    celery_signals.worker_init.connect(_freeze_before_the_pool_forks, weak=False)
    celery_signals.worker_process_init.connect(on_process_init, weak=False)
    celery_signals.worker_ready.connect(on_ready, weak=False)
    return app


def _freeze_before_the_pool_forks(**_kwargs: Any) -> None:
    """Move what the main process has loaded out of the garbage collector's sight before
    Celery forks its pool: a collection in a pool process would otherwise write to every
    object's header, and so copy into each process the pages it shares with the others."""
    gc.collect()
    gc.freeze()


def _install_grace(consumer: Any, grace_seconds: float, health: LoopHealth) -> None:
    """After Celery's own SIGTERM handling (stop taking messages, wait for running tasks),
    tell the pool processes to give their tasks back once ``grace_seconds`` have passed."""
    # Celery's warm shutdown, without the line it writes to stdout past the log: the
    # agent logs its own.
    install_worker_term_handler(consumer.controller, verbose=False)
    celery_handler = signal.getsignal(signal.SIGTERM)
    fired = threading.Event()

    def release_after_grace() -> None:
        log.info("SIGTERM received: taking no new task; running ones have %gs", grace_seconds)
        if fired.wait(grace_seconds):
            return
        try:
            pids = list(consumer.pool.info.get("processes", []))
        except Exception:  # the pool is already gone
            return
        log.warning("grace of %gs over: releasing running tasks", grace_seconds)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR2)

    def on_sigterm(signum: int, frame: Any) -> None:
        health.drain("draining: SIGTERM received")
        if not getattr(on_sigterm, "started", False):
            on_sigterm.started = True  # type: ignore[attr-defined]
            threading.Thread(target=release_after_grace, name="grace", daemon=True).start()
        if callable(celery_handler):
            celery_handler(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)


def run_agent(
    settings: AgentSettings, metrics: AgentMetrics, health: LoopHealth | None = None
) -> None:
    """Run the worker until it is told to stop."""
    app = build_app(settings, metrics, health)
    _allow_root()
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # Celery logs a line per received and per finished message at INFO.
        for name in ("celery.worker.strategy", "celery.app.trace"):
            logging.getLogger(name).setLevel(logging.WARNING)
    argv = [
        "--quiet",  # no banner: what the worker serves is in the log and the metrics
        "worker",
        f"--queues={','.join(settings.queues)}",
        f"--concurrency={settings.concurrency}",
        "--pool=prefork",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "--optimization=fair",
        f"--hostname=tickwork-agent-{os.getpid()}@{socket.gethostname()}",
        f"--loglevel={settings.log_level}",
    ]
    app.worker_main(argv=argv)


ROOT_WARNING = r"You're running the worker with superuser privileges"


def _allow_root() -> None:
    """Replace Celery's SecurityWarning about a worker running as root (eight lines at every
    start) with one log line. Celery refuses root only for pickle, which would let a
    message run code; an agent accepts JSON only (shared/dispatch/celery_app.py), so what is
    left is the deployer's choice of user: the container image runs agents as non-root."""
    if os.geteuid() != 0 and os.getuid() != 0:
        return
    warnings.filterwarnings("ignore", message=ROOT_WARNING, category=SecurityWarning)
    log.warning(
        "running as root: tasks run with root's rights (Celery's warning about it is left "
        "out: messages are JSON only)"
    )
