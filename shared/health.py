"""Health and metrics of a service over HTTP: ``/healthz``, ``/readyz`` and ``/metrics``
on one port (``TICKWORK_METRICS_PORT``).

The scheduler, the executor and agents serve no web pages; Kubernetes probes and
Prometheus reach them here. A service's loop calls :meth:`LoopHealth.beat` on every pass:

- ``/healthz`` (liveness) answers 200 while the loop has run within ``stale_after``
  seconds, and 503 once it has not: a stuck loop is worth a restart, a store that is down
  is not (the loop still turns, retrying), so liveness never depends on the database.
- ``/readyz`` answers 200 while the service is alive, its last pass succeeded and it is
  not draining (an agent after SIGTERM), else 503.

Both answer a small JSON object saying why. Any other path serves the metrics, as
prometheus-client's own server does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

STALE_AFTER_SECONDS = 120.0
"""A loop that has not turned for this long is stuck. The scheduler and the executor wait
at most a few seconds between passes; this leaves room for a long catch-up pass."""

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class HealthStatus:
    """What the probes answer."""

    alive: bool
    ready: bool
    seconds_since_beat: float | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The body of a probe's answer."""
        age = self.seconds_since_beat
        return {
            "status": "ok" if self.alive else "stale",
            "ready": self.ready,
            "seconds_since_last_pass": None if age is None else round(age, 3),
            "reason": self.reason,
        }


class LoopHealth:
    """When a service's loop last ran, and whether the service is ready for work.

    Before the first beat a service is alive (it is starting: a probe's initial delay
    or a startup probe covers that) but not ready. ``ready_within`` (default
    ``stale_after``) is how recent a beat must be for readiness: an agent whose broker
    loop waits for Redis is not ready at once, but restarted only after ``stale_after``.
    """

    def __init__(
        self,
        stale_after: float = STALE_AFTER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        *,
        ready_within: float | None = None,
    ) -> None:
        self.stale_after = stale_after
        self.ready_within = stale_after if ready_within is None else ready_within
        self.clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._last_beat: float | None = None
        self._ready = False
        self._reason = "starting"
        self._draining = False

    def beat(self, *, ready: bool = True, reason: str = "") -> None:
        """The loop ran a pass; ``ready=False`` with a reason when the pass failed."""
        with self._lock:
            self._last_beat = self.clock()
            self._ready = ready
            self._reason = reason

    def drain(self, reason: str = "shutting down") -> None:
        """The service is stopping: alive until it exits (a drain may outlast
        ``stale_after``, and a restart would cut it short), never ready again."""
        with self._lock:
            self._draining = True
            self._reason = reason

    def status(self) -> HealthStatus:
        """Alive and ready, as the probes see it now."""
        with self._lock:
            now = self.clock()
            if self._last_beat is None:
                age = None
                alive = now - self._started < self.stale_after
                reason = self._reason if alive else "the loop never ran"
            else:
                age = now - self._last_beat
                alive = age < self.stale_after
                reason = self._reason if alive else f"no pass for {age:.0f}s"
            if self._draining:
                return HealthStatus(True, False, age, self._reason)
            fresh = age is not None and age < self.ready_within
            ready = alive and fresh and self._ready
            if alive and not fresh and age is not None:
                reason = f"no pass for {age:.0f}s"
            return HealthStatus(alive, ready, age, reason or ("ok" if ready else "not ready"))


def health_app(health: LoopHealth, registry: CollectorRegistry) -> WsgiApp:
    """The WSGI application behind the port: probes, then metrics for any other path."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/healthz", "/livez", "/readyz"):
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        status = health.status()
        ok = status.ready if path == "/readyz" else status.alive
        body = json.dumps(status.to_json()).encode()
        start_response(
            "200 OK" if ok else "503 Service Unavailable",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes come every few seconds: no access line for each."""


def serve_health(
    port: int,
    registry: CollectorRegistry,
    health: LoopHealth,
    address: str = "0.0.0.0",
) -> WSGIServer:
    """Serve the probes and ``/metrics`` on ``port`` in a background thread."""
    server = make_server(
        address,
        port,
        health_app(health, registry),
        server_class=_ThreadingServer,
        handler_class=_QuietHandler,
    )
    thread = threading.Thread(target=server.serve_forever, name="health-http", daemon=True)
    thread.start()
    return server
