"""Prometheus metrics of the API: requests by endpoint and status, and their latency.

Under gunicorn the workers are separate processes: when ``PROMETHEUS_MULTIPROC_DIR`` is
set, every worker writes its values to files there and ``/metrics`` serves their sum
(prometheus_client's multiprocess mode; ``tickwork api`` sets the directory up).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ApiMetrics:
    """The API's counters; in multiprocess mode they live in files shared by the workers."""

    def __init__(self) -> None:
        self.directory = os.environ.get(MULTIPROC_ENV) or None
        registry: CollectorRegistry | None
        if self.directory is not None:
            # The value class is chosen when prometheus_client is imported; the variable
            # may have been set after that.
            values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
            registry = None
        else:
            registry = CollectorRegistry()
        self.registry = registry
        self.requests = Counter(
            "tickwork_api_requests",
            "Requests answered, by endpoint, method and status.",
            ["endpoint", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "tickwork_api_request_duration_seconds",
            "Time to answer a request, by endpoint.",
            ["endpoint"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60),
            registry=registry,
        )

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def render(self) -> bytes:
        """The text exposition of every metric (summed over the workers in multiprocess mode)."""
        if self.directory is None:
            assert self.registry is not None
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.directory)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
