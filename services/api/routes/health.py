"""Probes and service facts: ``/healthz``, ``/readyz``, ``/metrics``, ``/api/version``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any, cast

from apiflask import APIBlueprint
from flask import Response, current_app
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.api.database import current_engine
from tickwork.services.api.errors import ApiProblem
from tickwork.services.api.extensions import api_metrics
from tickwork.services.api.metrics import CONTENT_TYPE
from tickwork.shared.store.migrate import is_up_to_date
from tickwork.shared.store.retention import RETENTION_KEY, RetentionPolicy

blueprint = APIBlueprint("health", __name__, tag="Service")

API_VERSION = "1"
METRICS_RESPONSES = {
    200: {
        "description": "The Prometheus text exposition format",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


class Status(BaseModel):
    """A probe's answer."""

    status: str


class Retention(BaseModel):
    """How long history is kept: days (null: for ever), and revisions per project."""

    history_days: float | None
    log_days: float | None
    keep_revisions: int | None


class Version(BaseModel):
    """The server's version, the REST API's version, and how long history is kept (null:
    everything is kept)."""

    version: str
    api_version: str
    retention: Retention | None


@blueprint.get("/healthz")
@blueprint.output(Status)
def healthz() -> dict[str, Any]:
    """Alive: the process answers (nothing else is checked)."""
    return {"status": "ok"}


@blueprint.get("/readyz")
@blueprint.output(Status)
@blueprint.doc(responses={503: "The database cannot be reached or is not migrated"})
def readyz() -> dict[str, Any]:
    """Ready: the database is reachable and at the newest schema."""
    try:
        migrated = is_up_to_date(current_engine())
    except SQLAlchemyError:
        unavailable = "the database cannot be reached"
        raise ApiProblem(503, unavailable, headers={"Retry-After": "5"}) from None
    if not migrated:
        raise ApiProblem(
            503,
            "the database schema is not current; run `tickwork db upgrade`",
            headers={"Retry-After": "30"},
        )
    return {"status": "ready"}


@blueprint.get("/metrics")
@blueprint.doc(summary="Prometheus metrics", responses=cast(Any, METRICS_RESPONSES))
def metrics() -> Response:
    """Request counts by endpoint and status, and latencies, summed over the workers."""
    return Response(
        api_metrics().render(), mimetype=CONTENT_TYPE.split(";")[0], content_type=CONTENT_TYPE
    )


@blueprint.get("/api/version")
@blueprint.output(Version)
def api_version() -> dict[str, Any]:
    """The server's version, the REST API's version, and how long history is kept."""
    try:
        server = version("tickwork")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        server = "unknown"
    policy: RetentionPolicy = current_app.extensions[RETENTION_KEY]
    return {"version": server, "api_version": API_VERSION, "retention": policy.describe()}
