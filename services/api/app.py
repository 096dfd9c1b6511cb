"""The REST API as a Flask (APIFlask) application: ``create_app(config)``.

Routes live in ``services/api/routes/<resource>.py``, one blueprint each, registered from
the list :data:`ROUTE_BLUEPRINTS` (a renamed module fails at import, never silently); the OpenAPI
3.1 document (``/api/openapi.json``) and its viewer (``/api/docs``) are generated from
them. Before a route runs, every request is authenticated, rate limited and checked
(:mod:`tickwork.services.api.body`); every error becomes a problem document
(:mod:`tickwork.services.api.errors`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apiflask import APIFlask
from flask import Blueprint, Response, g, request
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.routing import BaseConverter, ValidationError

from tickwork.services.api.audit import arm_audit, record_unrecorded
from tickwork.services.api.auth import SECURITY_SCHEME_NAME, SECURITY_SCHEMES, authenticate, is_open
from tickwork.services.api.body import (
    ARCHIVE_REQUEST_BODY,
    BINARY_BODY_ATTRIBUTE,
    SIGNED_BODY_ATTRIBUTE,
    SIGNED_REQUEST_BODY,
    check_request,
)
from tickwork.services.api.config import ApiConfig
from tickwork.services.api.database import ENGINE_KEY, current_engine
from tickwork.services.api.docs import register_docs
from tickwork.services.api.errors import PROBLEM_MEDIA_TYPE, ApiProblem, register_error_handlers
from tickwork.services.api.extensions import install
from tickwork.services.api.metrics import ApiMetrics
from tickwork.services.api.paging import MAX_ID
from tickwork.services.api.ratelimit import RateLimiter, retry_after_header
from tickwork.services.api.routes import (
    attempts,
    audit,
    health,
    logs,
    notifications,
    pools,
    projects,
    schedules,
    secrets,
    sessions,
    tokens,
    triggers,
    workflows,
)
from tickwork.services.api.scope import check_scope
from tickwork.services.api.ui import is_ui_path
from tickwork.services.api.ui.pages import register_ui
from tickwork.shared.errors import StoreUnavailable
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.retention import RETENTION_KEY, RetentionPolicy

API_VERSION = "1"
# Database connections a worker holds at most, kept once opened: under a burst, connections
# opened past a smaller pool would be closed as each request ends and opened again by the
# next, a connection (and a PostgreSQL backend) per request.
POOL_CONNECTIONS = 15
RULE_ARGUMENT = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
ROUTE_BLUEPRINTS: tuple[Blueprint, ...] = (
    health.blueprint,
    projects.blueprint,
    secrets.blueprint,
    workflows.blueprint,
    schedules.blueprint,
    sessions.blueprint,
    attempts.blueprint,
    logs.blueprint,
    tokens.blueprint,
    tokens.whoami_blueprint,
    audit.blueprint,
    notifications.blueprint,
    triggers.blueprint,
    pools.blueprint,
)
"""The REST API's blueprints, registered in this order."""

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An RFC 9457 problem document (application/problem+json).",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "detail": {"type": "string"},
                    "pointer": {"type": "string"},
                    "parameter": {"type": "string"},
                    "file": {"type": "string"},
                    "line": {"type": ["integer", "null"]},
                },
            },
        },
    },
    "required": ["type", "title", "status", "detail"],
}


class IdConverter(BaseConverter):
    """``<id:name>``, the converter of every id in a path, UI and REST: a whole number
    from 1 to :data:`MAX_ID` written without leading zeros; anything else (0, a sign,
    text, a number the store cannot hold) matches no route, so the answer is a 404."""

    regex = r"[1-9][0-9]{0,18}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > MAX_ID:
            raise ValidationError()
        return number

    def to_url(self, value: Any) -> str:
        return str(int(value))


def create_app(
    config: ApiConfig, engine: Engine | None = None, retention: RetentionPolicy | None = None
) -> APIFlask:
    """The API application on ``engine`` (default: one made from ``config.database_url``);
    ``retention`` is what it says of history kept (default: the ``TICKWORK_*`` variables')."""
    app = APIFlask(
        "tickwork",
        root_path=str(Path(__file__).parent),  # "tickwork" itself is a namespace: no one folder
        title="tickwork",
        version=API_VERSION,
        spec_path="/api/openapi.json",
        docs_path=None,  # services/api/docs.py serves /api/docs from vendored files
        docs_oauth2_redirect_path=None,
    )
    app.config.update(
        OPENAPI_VERSION="3.1.0",
        SECURITY_SCHEMES=SECURITY_SCHEMES,
        MAX_CONTENT_LENGTH=config.max_archive_bytes,
        TICKWORK_PAGE_LIMIT=config.page_limit,
        TICKWORK_MAX_JSON_BYTES=config.max_json_bytes,
        VALIDATION_ERROR_SCHEMA=PROBLEM_SCHEMA,
        HTTP_ERROR_SCHEMA=PROBLEM_SCHEMA,
        AUTO_AUTH_ERROR_RESPONSE=False,
        INFO={"description": "tickwork's REST API; see docs/rest-api.md for the overview."},
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.converters["id"] = IdConverter
    app.extensions[ENGINE_KEY] = engine or create_store_engine(
        config.database_url, pool_size=POOL_CONNECTIONS, max_overflow=0
    )
    app.extensions[RETENTION_KEY] = retention or RetentionPolicy.from_environment()
    metrics = ApiMetrics()
    install(app, config, metrics)
    register_error_handlers(app)
    _register_hooks(app, config, metrics)
    for blueprint in ROUTE_BLUEPRINTS:
        app.register_blueprint(blueprint)
    register_ui(app, config)
    # After who is asking is known (REST and UI): a limited token's reach.
    app.before_request(check_scope)
    # Last of the before-request hooks: from here on, the route runs, and the first write
    # transaction of an audited change carries its audit row (not a hook's own writes).
    app.before_request(arm_audit)
    register_docs(app)
    app.spec_processor(lambda spec: _complete_spec(app, spec))
    return app


def _in_own_transaction(write: Callable[[Connection], None]) -> None:
    """``write(conn)`` in a transaction of its own (an audit row after the answer)."""
    try:
        with current_engine().begin() as conn:
            write(conn)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(str(exc).splitlines()[0]) from exc


def _register_hooks(app: APIFlask, config: ApiConfig, metrics: ApiMetrics) -> None:
    limiter = RateLimiter(config.rate_limit_per_second, config.rate_limit_burst)

    @app.after_request
    def _audit(response: Response) -> Response:
        record_unrecorded(response, _in_own_transaction)
        return response

    @app.before_request
    def _admit() -> None:
        g.started = time.perf_counter()
        refused: ApiProblem | None = None
        try:
            authenticate(config)
        except ApiProblem as exc:
            refused = exc  # counted too: guessing tokens is limited like any request
        if not is_open(request.path):
            wait = limiter.acquire(g.client)
            if wait is not None:
                raise ApiProblem(
                    429,
                    f"more than {config.rate_limit_per_second} requests a second; slow down",
                    headers={"Retry-After": retry_after_header(wait)},
                )
        if refused is not None:
            raise refused
        if not is_ui_path(request.path):  # pages take forms and their own query arguments
            check_request()

    @app.after_request
    def _count(response: Response) -> Response:
        started = g.get("started")
        if started is not None:
            endpoint = request.url_rule.rule if request.url_rule is not None else "unknown"
            seconds = time.perf_counter() - started
            metrics.observe(endpoint, request.method, response.status_code, seconds)
        return response


def _complete_spec(app: APIFlask, spec: dict[str, Any] | str) -> dict[str, Any] | str:
    """Add what decorators cannot say: who needs a token, and which bodies are archives."""
    if isinstance(spec, str):  # pragma: no cover - only for a YAML spec
        return spec
    paths = spec.get("paths", {})
    for rule in app.url_map.iter_rules():
        view = app.view_functions.get(rule.endpoint)
        if getattr(view, BINARY_BODY_ATTRIBUTE, False):
            body = ARCHIVE_REQUEST_BODY
        elif getattr(view, SIGNED_BODY_ATTRIBUTE, False):
            body = SIGNED_REQUEST_BODY
        else:
            continue
        path = RULE_ARGUMENT.sub(r"{\1}", rule.rule)  # /a/<id:x> -> /a/{x}
        for method in rule.methods or ():
            operation = paths.get(path, {}).get(method.lower())
            if isinstance(operation, dict):
                operation["requestBody"] = body
    spec["security"] = [{SECURITY_SCHEME_NAME: []}]
    for path, operations in paths.items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            if is_open(path):
                operation["security"] = []
            _problem_responses(operation, method, open_path=is_open(path))
    return spec


# Answers any operation may give, by what it takes; each is a problem document.
COMMON_ERRORS = {
    "body": {
        "400": "The body is not well-formed JSON",
        "413": "The body is larger than the server accepts",
        "415": "The body's media type is not accepted",
    },
    "token": {
        "401": "No token, or one that is not valid",
        "429": "Too many requests; retry after Retry-After seconds",
        "503": "The database cannot be reached",
    },
    "write": {"403": "A read token may not write"},
    "input": {"422": "A parameter or body member that cannot be used (the problem names it)"},
}


def _problem_responses(operation: dict[str, Any], method: str, *, open_path: bool) -> None:
    """Document the common error answers; every error answer is a problem document."""
    responses = operation.setdefault("responses", {})
    kinds = ["input"] if open_path else ["token", "input"]
    if "requestBody" in operation:
        kinds.append("body")
    if not open_path and method.upper() not in ("GET", "HEAD", "OPTIONS"):
        kinds.append("write")
    for kind in kinds:
        for status, description in COMMON_ERRORS[kind].items():
            responses.setdefault(status, {"description": description})
    for status, response in responses.items():
        if str(status)[0] in "45" and isinstance(response, dict):
            response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}}
