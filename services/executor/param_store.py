"""``param_set>`` and ``param_get>``: Digdag's persistent params, which the executor runs
itself because they read and write the store (agents never hold database credentials).

``param_set>`` stores its keys' rendered values for the project; ``param_get>`` reads
stored values into store params, visible to the tasks that follow. A key with nothing
stored reads as an empty string, as in Digdag.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from tickwork.services.executor.messages import AttemptContext
from tickwork.shared.dispatch.messages import TaskMessage
from tickwork.shared.domain.control import BadControl
from tickwork.shared.store.project_params import get_project_params, set_project_params


class ParamStoreError(BadControl):
    """A ``param_set>`` or ``param_get>`` task cannot go on; the task fails with the message."""


def store_params(
    conn: Connection,
    context: AttemptContext,
    message: TaskMessage,
    keys: list[str],
    now: datetime,
) -> None:
    """Run ``param_set>``: store the rendered value of each of its ``keys`` as a string
    (a null one is skipped)."""
    values = {
        key: _text(message.params[key]) for key in keys if message.params.get(key) is not None
    }
    set_project_params(conn, _project_id(context), values, now)


def read_params(
    conn: Connection,
    context: AttemptContext,
    message: TaskMessage,
    keys: list[str],
    now: datetime,
) -> dict[str, str]:
    """Run ``param_get>``: the store params it sets, each destination named by one of its
    ``keys`` (a null one is skipped) holding that key's stored value, or ``""``."""
    destinations = {key: message.params.get(key) for key in keys}
    wanted = [key for key, destination in destinations.items() if destination is not None]
    found = get_project_params(conn, _project_id(context), wanted, now)
    store: dict[str, str] = {}
    for key in wanted:
        destination = destinations[key]
        if not isinstance(destination, str) or not destination:
            raise ParamStoreError(
                f"param_get> needs a param name to store '{key}' in, got {destination!r}"
            )
        store[destination] = found.get(key, "")
    return store


def _project_id(context: AttemptContext) -> int:
    return int(context.builtins["project_id"])


def _text(value: Any) -> str:
    """A rendered value as Digdag stores it: a string as it is, a boolean as ``true`` or
    ``false``, a number as written, anything else (``${...}`` giving a mapping or list)
    as compact JSON, the text Digdag's templates make of it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
