"""Prometheus metrics of the executor, served on ``TICKWORK_METRICS_PORT``."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tickwork.services.executor.report import TickReport
from tickwork.shared.domain.pools import PoolUsage
from tickwork.shared.health import LoopHealth, serve_health


class ExecutorMetrics:
    """The executor's counters; each instance has its own registry (tests make many)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.dispatched = Counter(
            "tickwork_tasks_dispatched", "Task messages published.", registry=r
        )
        self.log_bytes_stored = Counter(
            "tickwork_log_bytes_stored",
            "Bytes of task logs written to the store (as text, before compression).",
            registry=r,
        )
        self.results_applied = Counter(
            "tickwork_results_applied", "Agents' events applied to the store.", registry=r
        )
        self.stale_results = Counter(
            "tickwork_stale_results",
            "Results refused because their lease token was no longer the task's.",
            registry=r,
        )
        self.repeated_results = Counter(
            "tickwork_repeated_results",
            "Results refused because their token's run had already ended (sent again).",
            registry=r,
        )
        self.leases_lost = Counter(
            "tickwork_leases_lost", "Running tasks found without a lease.", registry=r
        )
        self.requeues = Counter(
            "tickwork_task_requeues",
            "Tasks given a new token: their agent was lost or gave them back.",
            registry=r,
        )
        self.republished = Counter(
            "tickwork_messages_republished",
            "Queued tasks whose message was lost, published again.",
            registry=r,
        )
        self.attempts_killed = Counter(
            "tickwork_attempts_killed", "Attempts ended by a kill.", registry=r
        )
        self.sla_missed = Counter(
            "tickwork_sla_missed",
            "Attempts not done by their sla: deadline (each counted once).",
            registry=r,
        )
        self.queue_depth = Gauge(
            "tickwork_queue_depth", "Messages waiting in a queue.", ["queue"], registry=r
        )
        self.queued_tasks = Gauge(
            "tickwork_queued_tasks", "Tasks queued and not yet started.", registry=r
        )
        self.running_tasks = Gauge("tickwork_running_tasks", "Tasks running.", registry=r)
        self.ready_wait = Histogram(
            "tickwork_task_ready_wait_seconds",
            "How long operator tasks waited READY (for a pool's slot, behind higher "
            "priorities, for a pass) before they were queued, by _priority.",
            ["priority"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600),
            registry=r,
        )
        self.pass_seconds = Histogram(
            "tickwork_executor_pass_seconds",
            "How long each phase of a pass that applied or dispatched something took: "
            "its statements, its commit, and the publish of its messages after it.",
            ["phase"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
            registry=r,
        )
        self.pool_slots = Gauge(
            "tickwork_pool_slots", "Slots of a pool (tickwork pools set).", ["pool"], registry=r
        )
        self.pool_slots_used = Gauge(
            "tickwork_pool_slots_used",
            "Tasks of a pool in flight (queued or running).",
            ["pool"],
            registry=r,
        )
        self.pool_waiting = Gauge(
            "tickwork_pool_waiting_tasks",
            "Tasks of a pool READY and waiting for a slot.",
            ["pool"],
            registry=r,
        )
        self.active = Gauge(
            "tickwork_executor_active",
            "1 while this executor holds at least one partition of the attempts.",
            registry=r,
        )
        self.partitions = Gauge(
            "tickwork_executor_partitions",
            "Partitions of the attempts this executor holds (and runs).",
            registry=r,
        )

    def record(self, report: TickReport) -> None:
        """Count what one pass did."""
        self.dispatched.inc(report.tasks_dispatched)
        self.log_bytes_stored.inc(report.log_bytes_stored)
        self.results_applied.inc(report.events_applied)
        self.stale_results.inc(report.stale_results)
        self.repeated_results.inc(report.repeated_results)
        self.leases_lost.inc(report.leases_lost)
        self.requeues.inc(report.requeued)
        self.republished.inc(report.republished)
        self.attempts_killed.inc(report.attempts_killed)
        self.sla_missed.inc(report.slas_missed)
        for priority, seconds in report.ready_waits:
            self.ready_wait.labels(priority=str(priority)).observe(seconds)
        if report.events_applied or report.tasks_dispatched:  # not an idle look
            for phase, seconds in report.phase_seconds.items():
                self.pass_seconds.labels(phase=phase).observe(seconds)

    def record_pools(self, usage: Sequence[PoolUsage]) -> None:
        """Set the pool gauges (a pool no longer listed drops out of them)."""
        for gauge in (self.pool_slots, self.pool_slots_used, self.pool_waiting):
            gauge.clear()
        for pool in usage:
            if pool.slots is not None:
                self.pool_slots.labels(pool=pool.name).set(pool.slots)
            self.pool_slots_used.labels(pool=pool.name).set(pool.used)
            self.pool_waiting.labels(pool=pool.name).set(pool.waiting)

    def serve(self, port: int, health: LoopHealth, address: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` and the probes over HTTP in a background thread."""
        serve_health(port, self.registry, health, address)
