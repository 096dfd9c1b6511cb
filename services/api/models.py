"""The base models of what a request sends: a JSON body, or a query string.

Both refuse unknown members (a member is known by its documented name only, never by the
Python attribute behind an alias) and empty strings. A body is typed strictly, as JSON is: a
number must be a number (``"2"`` and ``true`` are not), a boolean a boolean. A query
string holds only text, so its models convert ``limit=5`` and ``replay=true`` as usual.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field


class RequestBody(BaseModel):
    """A JSON body: strict types, no unknown members, no empty strings."""

    model_config = ConfigDict(extra="forbid", strict=True, str_min_length=1)


class RequestQuery(BaseModel):
    """A query string: no unknown parameters, no empty values."""

    model_config = ConfigDict(extra="forbid", str_min_length=1)


UserParams = dict[Annotated[str, Field(min_length=0)], Any]
"""Params a user sends: any member name, the empty one too (what is inside is theirs)."""
