"""The executor's entry points: :func:`serve` (``tickwork executor``, distributed) and
:func:`run_in_process` (the executor thread of ``tickwork standalone``).

Both run :meth:`WorkflowExecutor.tick <tickwork.services.executor.loop.WorkflowExecutor.tick>`
through the shared runner (:func:`tickwork.shared.runner.run_until_stopped`); the distributed
one over the partitions of the attempts it holds
(:class:`~tickwork.services.executor.service.ExecutorService`).
"""

from __future__ import annotations

import threading

from tickwork.services.executor.config import ExecutorSettings
from tickwork.services.executor.loop import WorkflowExecutor
from tickwork.services.executor.metrics import ExecutorMetrics
from tickwork.services.executor.service import ExecutorService
from tickwork.shared.runner import IdleBackoff, run_until_stopped, stop_on_signals

IN_PROCESS_IDLE_CAP_SECONDS = 1.0
"""The longest wait of an in-process executor between passes that find nothing to do."""


def serve(settings: ExecutorSettings) -> None:
    """Run ``tickwork executor`` until SIGTERM or SIGINT: serve the metrics and probes
    (if a port is set), join the live executors, run passes over its partitions.

    Raises StoreUnavailable or RedisError if the store or Redis cannot be used at start.
    """
    metrics = ExecutorMetrics()
    service = ExecutorService(settings, metrics)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port, service.health)

    def stop() -> None:
        service.health.drain()
        service.stop()

    stop_on_signals(stop)
    service.run()


def run_in_process(executor: WorkflowExecutor, stop: threading.Event) -> None:
    """Run passes until ``stop`` is set (the caller wakes the executor's wait with its
    dispatcher's ``wake()``); an error ends the loop and is raised."""
    run_until_stopped(
        executor.tick,
        stop=stop,
        wait=executor.wait,
        idle=IdleBackoff(cap_seconds=IN_PROCESS_IDLE_CAP_SECONDS),
    )
