"""Prometheus metrics of the scheduler, served on ``TICKWORK_METRICS_PORT``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tickwork.shared.health import LoopHealth, serve_health


class SchedulerMetrics:
    """The scheduler's counters; each instance has its own registry (tests make many)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.sessions_emitted = Counter(
            "tickwork_scheduler_sessions_emitted",
            "Sessions created by schedules.",
            registry=self.registry,
        )
        self.duplicates_suppressed = Counter(
            "tickwork_scheduler_duplicates_suppressed",
            "Session times another replica or run had already emitted.",
            registry=self.registry,
        )
        self.missed = Counter(
            "tickwork_scheduler_missed",
            "Session times not emitted because of a schedule's policy.",
            ["reason"],
            registry=self.registry,
        )
        self.emission_lag = Histogram(
            "tickwork_scheduler_emission_lag_seconds",
            "Time from a session's run time to its emission.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 86400),
            registry=self.registry,
        )
        self.due_schedules = Gauge(
            "tickwork_scheduler_due_schedules",
            "Schedules due at the start of the last tick (as its first pass listed them).",
            registry=self.registry,
        )
        self.tick_duration = Histogram(
            "tickwork_scheduler_tick_duration_seconds",
            "Duration of one scheduler pass.",
            registry=self.registry,
        )
        self.failures = Counter(
            "tickwork_scheduler_schedule_failures",
            "Schedule passes that failed and will be retried.",
            registry=self.registry,
        )
        self.attempts_started = Counter(
            "tickwork_scheduler_waiting_attempts_started",
            "Waiting attempts released by the overlap policy or a serial backfill.",
            registry=self.registry,
        )

        self.rows_pruned = Counter(
            "tickwork_scheduler_rows_pruned",
            "Rows retention deleted, by table (task_logs.pruned_at: logs whose text went).",
            ["table"],
            registry=self.registry,
        )
        self.oldest_session_age = Gauge(
            "tickwork_scheduler_oldest_session_age_seconds",
            "Age of the oldest session kept, after the last retention pass.",
            registry=self.registry,
        )
        self.prune_duration = Histogram(
            "tickwork_scheduler_prune_duration_seconds",
            "Duration of one retention pass.",
            buckets=(0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600),
            registry=self.registry,
        )

    def serve(self, port: int, health: LoopHealth, address: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` and the probes over HTTP in a background thread."""
        serve_health(port, self.registry, health, address)
