"""Every error the API answers, mapped in this one place to RFC 9457 problem documents.

Routes raise the errors of shared/errors.py (NotFound, Conflict, InvalidInput, ...) or
:class:`ApiProblem` / :class:`InvalidParameter` for HTTP-only cases; validation errors of
pydantic bodies and parameters, Werkzeug's HTTP errors and database outages are turned
into problems here too. A request never gets a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apiflask import APIFlask
from apiflask.exceptions import HTTPError
from flask import Response, current_app, json
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from tickwork.shared.dsl.archive import ArchiveTooLarge
from tickwork.shared.errors import (
    Conflict,
    InvalidInput,
    InvalidSchedule,
    NotFound,
    StoreUnavailable,
    TickworkError,
)

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"
ERROR_PAGE_KEY = "tickwork.error_page"
"""``app.extensions`` entry: a function rendering a problem as an HTML page for the requests
that get pages (the web UI's), None for the others, which get the problem document."""
PROBLEM_BASE = "https://tickwork.dev/problems/"

# status -> (type slug, title)
PROBLEM_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid-request", "Invalid request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    406: ("not-acceptable", "Not acceptable"),
    408: ("timeout", "Request timeout"),
    409: ("conflict", "Conflict"),
    411: ("invalid-request", "Length required"),
    413: ("too-large", "Request too large"),
    414: ("too-large", "URI too long"),
    415: ("unsupported-media-type", "Unsupported media type"),
    416: ("invalid-request", "Range not satisfiable"),
    417: ("invalid-request", "Expectation failed"),
    422: ("invalid-request", "Invalid request"),
    429: ("rate-limited", "Too many requests"),
    431: ("too-large", "Request header fields too large"),
    500: ("internal-error", "Internal error"),
    501: ("not-implemented", "Not implemented"),
    503: ("unavailable", "Service unavailable"),
}


class ApiProblem(Exception):
    """An answer that is a problem document: a status, a detail, and extra members.

    ``errors`` lists places (``pointer``, ``parameter`` or ``file``/``line``, each with a
    ``detail``); ``members`` are added to the document as they are (``attempt_id=...``).
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: Sequence[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        **members: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = list(errors) if errors is not None else None
        self.headers = dict(headers or {})
        self.members = members


class InvalidParameter(ApiProblem):
    """A query or path parameter that cannot be used (422, naming the parameter)."""

    def __init__(self, parameter: str, detail: str) -> None:
        super().__init__(
            422, f"{parameter}: {detail}", errors=[{"parameter": parameter, "detail": detail}]
        )


class InvalidBody(ApiProblem):
    """A JSON body member that cannot be used (422, naming it with a JSON pointer)."""

    def __init__(self, pointer: str, detail: str) -> None:
        super().__init__(
            422, f"{pointer or '/'}: {detail}", errors=[{"pointer": pointer, "detail": detail}]
        )


def problem_document(status: int, detail: str) -> dict[str, Any]:
    """The members every problem document has: type, title, status and detail."""
    slug, title = PROBLEM_TYPES.get(status, ("error", "Error"))
    return {"type": PROBLEM_BASE + slug, "title": title, "status": status, "detail": detail}


def problem_response(problem: ApiProblem) -> Response:
    """The problem+json response of ``problem``."""
    body = problem_document(problem.status, problem.detail)
    if problem.errors is not None:
        body["errors"] = problem.errors
    body.update(problem.members)
    response = Response(json.dumps(body), problem.status, mimetype=PROBLEM_MEDIA_TYPE)
    for name, value in problem.headers.items():
        response.headers[name] = value
    return response


def json_pointer(location: Sequence[str | int]) -> str:
    """A JSON pointer (RFC 6901) to the member at ``location``: ``("a", 0)`` -> ``/a/0``."""
    escaped = (str(part).replace("~", "~0").replace("/", "~1") for part in location)
    return "".join("/" + part for part in escaped)


def from_pydantic(error: PydanticValidationError, location: str) -> ApiProblem:
    """422 naming each wrong member: a pointer into a JSON body, or a parameter's name."""
    errors: list[dict[str, Any]] = []
    for item in error.errors(include_url=False, include_input=False):
        place = [part for part in item["loc"]]
        message = _pydantic_message(item)
        if place and place[-1] == "[key]":  # a member's name, not its value
            place, message = place[:-2], f"a member name: {message}"
        if location == "json":
            errors.append({"pointer": json_pointer(place), "detail": message})
        else:
            name = str(place[0]) if place else location
            errors.append({"parameter": name, "detail": message})
    first = errors[0] if errors else {"detail": "invalid input"}
    where = first.get("pointer", first.get("parameter")) or "/"
    return ApiProblem(422, f"{where}: {first['detail']}", errors=errors)


def _pydantic_message(item: Mapping[str, Any]) -> str:
    message = str(item.get("msg", "invalid value"))
    if item.get("type") == "extra_forbidden":
        return "unknown field" if item.get("loc") else message
    # "Value error, expected ..." from our own validators: the prefix says nothing.
    return message.removeprefix("Value error, ")


def from_tickwork_error(error: TickworkError) -> ApiProblem:
    """The problem a domain error stands for."""
    if isinstance(error, NotFound):
        return ApiProblem(404, str(error))
    if isinstance(error, Conflict):
        members = {k: v for k, v in _conflict_members(error).items() if v is not None}
        return ApiProblem(409, str(error), **members)
    if isinstance(error, ArchiveTooLarge):
        return ApiProblem(413, str(error))
    if isinstance(error, InvalidInput):
        errors = [{"file": p.file, "line": p.line, "detail": p.message} for p in error.problems]
        detail = str(error.problems[0]) if error.problems else "invalid input"
        if len(error.problems) > 1:
            detail += f" (and {len(error.problems) - 1} more)"
        return ApiProblem(422, detail, errors=errors)
    if isinstance(error, InvalidSchedule):
        return ApiProblem(422, error.message, errors=[{"detail": error.message}])
    if isinstance(error, StoreUnavailable):
        return ApiProblem(503, str(error), headers={"Retry-After": "5"})
    return ApiProblem(422, str(error) or type(error).__name__)


def _conflict_members(error: Conflict) -> dict[str, Any]:
    attempt_id = getattr(error, "attempt_id", None)
    members = dict(getattr(error, "members", None) or {})
    if attempt_id is not None:
        members["attempt_id"] = str(attempt_id)
    return members


def from_http_error(error: HTTPError) -> ApiProblem:
    """APIFlask's errors: validation of bodies and parameters, ``abort()``, Werkzeug's."""
    cause = error.__cause__
    if isinstance(cause, PydanticValidationError):
        location = next(iter(error.detail), "json") if isinstance(error.detail, dict) else "json"
        return from_pydantic(cause, location)
    detail = error.message if isinstance(error.message, str) else "request refused"
    headers = {str(k): str(v) for k, v in dict(error.headers or {}).items()}
    return ApiProblem(error.status_code, detail, headers=headers)


def from_werkzeug(error: HTTPException) -> ApiProblem:
    """Werkzeug's HTTP errors (unknown route, wrong method, too large, ...) as problems."""
    status = error.code or 500
    headers = {k: v for k, v in error.get_headers() if k.lower() in ("allow", "retry-after")}
    detail = error.description or error.name
    if status == 404:
        detail = "no such resource"
    elif status == 413:
        detail = "the request body is larger than this server accepts"
    return ApiProblem(status, detail, headers=headers)


ErrorPage = Callable[[ApiProblem], Response | None]


def _answer(problem: ApiProblem) -> Response:
    """The error page of ``problem`` where one is registered for this request, else its
    problem document."""
    render: ErrorPage | None = current_app.extensions.get(ERROR_PAGE_KEY)
    page = render(problem) if render is not None else None
    return page if page is not None else problem_response(problem)


def register_error_handlers(app: APIFlask) -> None:
    """Route every error class to its problem document (or the UI's error page)."""

    @app.errorhandler(ApiProblem)
    def _problem(error: ApiProblem) -> Response:
        return _answer(error)

    @app.errorhandler(TickworkError)
    def _domain(error: TickworkError) -> Response:
        return _answer(from_tickwork_error(error))

    @app.errorhandler(HTTPError)
    def _apiflask(error: HTTPError) -> Response:
        return _answer(from_http_error(error))

    @app.errorhandler(HTTPException)
    def _werkzeug(error: HTTPException) -> Response:
        return _answer(from_werkzeug(error))

    @app.errorhandler(OperationalError)
    def _store_down(error: OperationalError) -> Response:
        logger.warning("database unavailable: %s", " ".join(str(error.orig).split())[:300])
        problem = ApiProblem(503, "the database cannot be reached", headers={"Retry-After": "5"})
        return _answer(problem)

    @app.errorhandler(PoolTimeout)
    def _pool_busy(error: PoolTimeout) -> Response:
        # Every pooled connection stayed in use for the pool's whole wait: many requests at
        # once on one worker. Busy, not broken: the client may retry.
        logger.warning("no database connection came free: %s", str(error).split(".")[0])
        detail = "the server is busy: no database connection came free in time"
        return _answer(ApiProblem(503, detail, headers={"Retry-After": "1"}))

    @app.errorhandler(DataError)
    def _out_of_range(error: DataError) -> Response:
        # A value the database refuses (out of range, bad encoding): the request's fault.
        logger.info("value refused by the database: %s", " ".join(str(error.orig).split())[:300])
        return _answer(ApiProblem(422, "a value is out of the range the store holds"))

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        if isinstance(error, HTTPException):  # pragma: no cover - handled above
            return _answer(from_werkzeug(error))
        logger.exception("unexpected error answering a request")
        return _answer(ApiProblem(500, "internal error; see the server's log"))
