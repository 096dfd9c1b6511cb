"""Prometheus metrics of an agent, summed over its pool processes.

Celery runs tasks in forked pool processes, so the counters use prometheus_client's
multiprocess mode: each process writes its values to files in a private directory, and
the agent's main process serves their sum on ``TICKWORK_METRICS_PORT``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from prometheus_client import CollectorRegistry, Counter, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector

from tickwork.shared.health import LoopHealth, serve_health

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class AgentMetrics:
    """The agent's counters; ``shared_between_processes`` turns on multiprocess mode
    (call before any pool process forks)."""

    def __init__(self, *, shared_between_processes: bool = False) -> None:
        self.directory: str | None = None
        if shared_between_processes:
            self.directory = tempfile.mkdtemp(prefix="tickwork-agent-metrics-")
            atexit.register(shutil.rmtree, self.directory, ignore_errors=True)
            os.environ[MULTIPROC_ENV] = self.directory
            values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
            registry = None
        else:
            registry = CollectorRegistry()
        self.registry = registry
        self.tasks = Counter(
            "tickwork_agent_tasks",
            "Task runs ended, by outcome (success, error, stopped, released).",
            ["outcome"],
            registry=registry,
        )
        self.dropped = Counter(
            "tickwork_agent_messages_dropped",
            "Messages not run: stale token, another agent's lease, killed, or malformed.",
            registry=registry,
        )
        self.leases_lost = Counter(
            "tickwork_agent_leases_lost",
            "Runs stopped because their lease could not be extended.",
            registry=registry,
        )
        self.results_resent = Counter(
            "tickwork_agent_results_resent",
            "Results sent again: Redis lost them, or the executor did not answer in time.",
            registry=registry,
        )
        self.start_latency = Histogram(
            "tickwork_dispatch_start_latency_seconds",
            "Time from the executor publishing a task to an agent starting it.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 300),
            registry=registry,
        )

    def serve(self, port: int, health: LoopHealth, address: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` (the sum over every process) and the probes in a background
        thread."""
        registry = CollectorRegistry()
        if self.directory is not None:
            MultiProcessCollector(registry, path=self.directory)  # type: ignore[no-untyped-call]
        elif self.registry is not None:
            registry = self.registry
        serve_health(port, registry, health, address)
