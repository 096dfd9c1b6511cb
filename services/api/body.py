"""Checks every request passes before a route sees it: its size, media type, JSON shape,
that every number in it fits the store, that no JSON object in it gives a member twice,
that it names only query parameters the route takes, and that no string in it (body,
query, path) holds NUL or a lone surrogate."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Request, current_app, request

from tickwork.services.api.errors import ApiProblem, InvalidBody, InvalidParameter, json_pointer
from tickwork.services.api.framing import limit_body
from tickwork.services.api.ui import is_ui_path
from tickwork.shared.domain.storable import MAX_INTEGER, text_problem

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


SIGNED_BODY_ATTRIBUTE = "tickwork_signed_body"
SIGNED_REQUEST_BODY = {
    "required": False,
    "description": "Any JSON (a webhook's call), read as it is: its signature covers its bytes.",
    "content": {"application/json": {"schema": {"type": "object"}}},
}


def signed_body(view: View) -> View:
    """Mark a view as reading its body's bytes itself (a signed webhook call), limited to
    TICKWORK_MAX_JSON_BYTES; the OpenAPI document shows a JSON body."""
    setattr(view, SIGNED_BODY_ATTRIBUTE, True)
    return view


def check_request() -> None:
    """Refuse a request whose parameters or JSON body cannot be used (4xx, never 500)."""
    if request.routing_exception is not None:  # no such route or method: say that first
        raise request.routing_exception
    for name, value in request.args.items(multi=True):
        reason = text_problem(name) or text_problem(value)
        if reason:
            raise InvalidParameter(name if text_problem(name) is None else "query", reason)
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and (reason := text_problem(value)):
            raise InvalidParameter(name, reason)
    view = current_app.view_functions.get(request.endpoint or "")
    check_query_names(view)
    if request.method in BODY_METHODS and getattr(view, BINARY_BODY_ATTRIBUTE, False):
        limit_body(request.environ, current_app.config["MAX_CONTENT_LENGTH"])
    elif request.method in BODY_METHODS and getattr(view, SIGNED_BODY_ATTRIBUTE, False):
        max_bytes = current_app.config["TICKWORK_MAX_JSON_BYTES"]
        if request.content_length is not None and request.content_length > max_bytes:
            raise ApiProblem(413, f"a body may be at most {max_bytes // 1024} KiB")
        limit_body(request.environ, max_bytes)
    elif request.method in BODY_METHODS:
        load_json_body(request, current_app.config["TICKWORK_MAX_JSON_BYTES"])
        if _declared_input(view, "json") is None and request.get_json() not in (None, {}):
            raise InvalidBody("", "this operation takes no body (or an empty object)")


def check_query_names(view: Callable[..., Any] | None) -> None:
    """Refuse query parameters the route does not take, and any given twice.

    A route with a query model refuses unknown names there (422 naming the parameter);
    one without refuses every parameter here. The generated OpenAPI document and its
    viewer (endpoints ``openapi.*``) and the UI's pages take what a browser sends.
    """
    if not request.args or is_ui_path(request.path):
        return
    if (request.endpoint or "").startswith("openapi."):
        return
    if _declared_input(view, "query") is None:
        name = next(iter(request.args))
        raise InvalidParameter(name, "unknown parameter: this operation takes none")
    for name, values in request.args.lists():
        if len(values) > 1:
            raise InvalidParameter(name, "given more than once")


def _declared_input(view: Callable[..., Any] | None, location: str) -> object | None:
    """The model a view declared with ``@input(..., location=location)``, if any."""
    spec: dict[str, Any] = getattr(view, "_spec", None) or {}
    if location == "json":
        return spec.get("body")
    return next((schema for schema, where in spec.get("args") or () if where == location), None)


def load_json_body(req: Request, max_bytes: int) -> None:
    """Parse and check a JSON body once, leaving it where ``request.get_json`` finds it."""
    if req.content_length is not None and req.content_length > max_bytes:
        raise ApiProblem(413, f"a JSON body may be at most {max_bytes // 1024} KiB")
    limit_body(req.environ, max_bytes)
    raw = req.get_data(cache=True)
    if len(raw) > max_bytes:
        raise ApiProblem(413, f"a JSON body may be at most {max_bytes // 1024} KiB")
    if not raw.strip():
        req._cached_json = (None, None)
        return
    if req.mimetype != "application/json" and not req.mimetype.endswith("+json"):
        raise ApiProblem(415, "the body must be JSON (Content-Type: application/json)")
    try:
        data = json.loads(
            raw.decode("utf-8"),
            parse_int=_integer,
            parse_float=_float,
            parse_constant=_not_a_number,
            object_pairs_hook=_members,
        )
    except UnicodeDecodeError:
        raise ApiProblem(400, "the body is not UTF-8") from None
    except RecursionError:
        raise InvalidBody("", f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise ApiProblem(400, f"the body is not JSON: {exc}") from None
    check_json_value(data)
    req._cached_json = (data, data)


class Unstorable:
    """A JSON number the store cannot hold, kept in place so its pointer can be named."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _integer(text: str) -> int | Unstorable:
    # Checked on its digits before int() is called: converting thousands of them is slow.
    if len(text.lstrip("-")) > len(str(MAX_INTEGER)) or abs(number := int(text)) > MAX_INTEGER:
        return Unstorable(f"an integer must lie within ±{MAX_INTEGER} (64 bits)")
    return number


def _float(text: str) -> float | Unstorable:
    number = float(text)
    if math.isinf(number):
        return Unstorable("a number must be finite: this one is past ±1.8e308")
    return number


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a member given twice is kept as Unstorable, so its pointer is named
    (the last one would otherwise win unseen)."""
    members: dict[str, Any] = {}
    for name, value in pairs:
        members[name] = (
            Unstorable("this member is given more than once") if name in members else value
        )
    return members


def _not_a_number(text: str) -> Unstorable:
    return Unstorable(f"{text} is not a number JSON can hold")


def check_json_value(data: Any) -> None:
    """InvalidBody (with its pointer) for nesting past MAX_JSON_DEPTH, bad text, or a
    number the store cannot hold."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, place = stack.pop()
        if len(place) > MAX_JSON_DEPTH:
            raise InvalidBody(json_pointer(place), f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(value, str):
            if reason := text_problem(value):
                raise InvalidBody(json_pointer(place), reason)
        elif isinstance(value, Unstorable):
            raise InvalidBody(json_pointer(place), value.reason)
        elif isinstance(value, dict):
            for key, item in value.items():
                if reason := text_problem(key):
                    raise InvalidBody(json_pointer(place), f"a member name {reason}")
                stack.append((item, (*place, key)))
        elif isinstance(value, list):
            stack.extend((item, (*place, index)) for index, item in enumerate(value))
