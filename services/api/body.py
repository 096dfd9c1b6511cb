"""Checks every request passes before a route sees it: its size, media type, JSON shape,
and that no string in it (body, query, path) holds NUL or a lone surrogate."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Request, current_app, request

from services.api.errors import ApiProblem, InvalidBody, InvalidParameter, json_pointer

MAX_JSON_DEPTH = 32
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")
BINARY_BODY_ATTRIBUTE = "tickwork_binary_body"
ARCHIVE_SCHEMA = {"type": "string", "format": "binary"}
ARCHIVE_REQUEST_BODY = {
    "required": True,
    "description": "A tar.gz of the project's files.",
    "content": {
        media_type: {"schema": ARCHIVE_SCHEMA}
        for media_type in ("application/gzip", "application/octet-stream")
    },
}

View = TypeVar("View", bound=Callable[..., Any])


def binary_body(view: View) -> View:
    """Mark a view as taking a binary body (an archive), limited by MAX_CONTENT_LENGTH only.

    The OpenAPI document then shows its body as a tar.gz.
    """
    setattr(view, BINARY_BODY_ATTRIBUTE, True)
    return view


def bad_text(value: str) -> str | None:
    """Why ``value`` cannot be stored as text (NUL, lone surrogate), or None if it can."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must not contain lone surrogates (invalid Unicode)"
    return None


def check_request() -> None:
    """Refuse a request whose parameters or JSON body cannot be used (4xx, never 500)."""
    if request.routing_exception is not None:  # no such route or method: say that first
        raise request.routing_exception
    for name, value in request.args.items(multi=True):
        reason = bad_text(name) or bad_text(value)
        if reason:
            raise InvalidParameter(name if bad_text(name) is None else "query", reason)
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and (reason := bad_text(value)):
            raise InvalidParameter(name, reason)
    view = current_app.view_functions.get(request.endpoint or "")
    if request.method in BODY_METHODS and not getattr(view, BINARY_BODY_ATTRIBUTE, False):
        load_json_body(request, current_app.config["TICKWORK_MAX_JSON_BYTES"])


def load_json_body(req: Request, max_bytes: int) -> None:
    """Parse and check a JSON body once, leaving it where ``request.get_json`` finds it."""
    if req.content_length is not None and req.content_length > max_bytes:
        raise ApiProblem(413, f"a JSON body may be at most {max_bytes // 1024} KiB")
    raw = req.get_data(cache=True)
    if len(raw) > max_bytes:
        raise ApiProblem(413, f"a JSON body may be at most {max_bytes // 1024} KiB")
    if not raw.strip():
        req._cached_json = (None, None)
        return
    if req.mimetype != "application/json" and not req.mimetype.endswith("+json"):
        raise ApiProblem(415, "the body must be JSON (Content-Type: application/json)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiProblem(400, "the body is not UTF-8") from None
    except RecursionError:
        raise InvalidBody("", f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise ApiProblem(400, f"the body is not JSON: {exc}") from None
    check_json_value(data)
    req._cached_json = (data, data)


def check_json_value(data: Any) -> None:
    """InvalidBody (with its pointer) for nesting past MAX_JSON_DEPTH or bad text."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, place = stack.pop()
        if len(place) > MAX_JSON_DEPTH:
            raise InvalidBody(json_pointer(place), f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, str):
            if reason := bad_text(value):
                raise InvalidBody(json_pointer(place), reason)
        elif isinstance(value, dict):
            for key, item in value.items():
                if reason := bad_text(key):
                    raise InvalidBody(json_pointer(place), f"a member name {reason}")
                stack.append((item, (*place, key)))
        elif isinstance(value, list):
            stack.extend((item, (*place, index)) for index, item in enumerate(value))
