"""The scheduler's entry points: :func:`serve` (``tickwork scheduler``) and :func:`run`
(also the scheduler thread of ``tickwork standalone``).

Both run :meth:`Scheduler.tick <tickwork.services.scheduler.loop.Scheduler.tick>` through the
shared runner (:func:`tickwork.shared.runner.run_until_stopped`), and retention's passes
(:mod:`tickwork.services.scheduler.retention`) in a thread beside it.
"""

from __future__ import annotations

import gc
import logging

from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.scheduler.config import SchedulerSettings
from tickwork.services.scheduler.loop import Scheduler, TickReport
from tickwork.services.scheduler.metrics import SchedulerMetrics
from tickwork.services.scheduler.retention import Pruner, start_pruner
from tickwork.shared.runner import Retry, run_until_stopped, stop_on_signals
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.retention import RetentionPolicy

log = logging.getLogger("tickwork.services.scheduler.loop")  # where its loop's lines always were

STORE_RETRY = Retry(
    errors=(SQLAlchemyError,),
    first_seconds=0.5,
    cap_seconds=30.0,
    message="store unavailable, retrying in %.1fs: %s",
    logger=log,
)
"""A store that is down is retried after 0.5, 1, 2... up to 30 seconds, the scheduler
alive but not ready meanwhile."""


def serve(settings: SchedulerSettings) -> None:
    """Run ``tickwork scheduler`` until SIGTERM or SIGINT, serving the metrics and probes
    if a port is set. Raises StoreUnavailable if the store cannot be used at start."""
    engine = open_migrated_store(settings.database_url)
    metrics = SchedulerMetrics()
    scheduler = Scheduler(engine, metrics=metrics)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port, scheduler.health)
    stop_on_signals(scheduler.stop)
    run(scheduler, settings.retention)
    engine.dispose()


def run(scheduler: Scheduler, retention: RetentionPolicy | None = None) -> None:
    """Tick until ``scheduler.stop()``; a store that is down is retried with back-off.
    Retention (``retention``, else the ``TICKWORK_*`` variables') is applied meanwhile."""
    policy = retention if retention is not None else RetentionPolicy.from_environment()
    pruner = Pruner(
        scheduler.engine, policy, metrics=scheduler.metrics, stopping=scheduler.stopping
    )
    pruning = start_pruner(pruner)
    # What is loaded by now (modules, the engine) lives as long as the process: the
    # collector need not scan it again every time a busy minute allocates a lot.
    gc.freeze()
    run_until_stopped(
        scheduler.tick,
        stop=scheduler.stopping,
        wait=scheduler.wait,
        retry=STORE_RETRY,
        health=scheduler.health,
        on_pass=_log_emitted,
    )
    pruning.join(timeout=10.0)  # a pass ends at its next batch once stopped


def _log_emitted(report: TickReport) -> None:
    if report.emitted or report.missed:
        log.info(
            "emitted %d sessions (%d missed by policy, %d already there)",
            report.emitted,
            report.missed,
            report.duplicates,
        )
