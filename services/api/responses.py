"""JSON answers serialised in one step by pydantic-core, for the routes that must be fast
(the lists, and starting an attempt).

Such a route builds its answer as plain dicts of the shapes its response model documents
(``@output(Model)`` keeps the OpenAPI schema) and hands them here: they are written
straight to JSON, without building and re-validating the model on every request. The
formats are the model's own (pydantic-core writes both): a datetime as ISO 8601 with its
offset (``Z`` for UTC), an enum member as its value.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from pydantic_core import to_json


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` (dicts, lists, strings, numbers, datetimes, enums) as a JSON answer."""
    return Response(to_json(data), status=status, mimetype="application/json")
