"""The agent's entry point: :func:`serve` (``tickwork agent``).

An agent's loop is Celery's worker (:func:`tickwork.services.agent.worker.run_agent`); it beats
its :class:`~tickwork.shared.health.LoopHealth` from the worker's event loop and drains on
SIGTERM as Celery's warm shutdown does.
"""

from __future__ import annotations

from tickwork.services.agent.config import AgentSettings
from tickwork.services.agent.metrics import AgentMetrics
from tickwork.services.agent.worker import agent_health, run_agent


def serve(settings: AgentSettings) -> None:
    """Run ``tickwork agent`` until SIGTERM, serving the metrics and probes if a port is set."""
    metrics = AgentMetrics(shared_between_processes=bool(settings.metrics_port))
    health = agent_health()
    if settings.metrics_port:
        metrics.serve(settings.metrics_port, health)
    run_agent(settings, metrics, health)
