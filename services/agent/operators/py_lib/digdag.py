"""``digdag.env`` for ``py>`` functions: read params, store, export and add subtasks.

The same names as Digdag's Python API, so functions written for Digdag run unchanged::

    import digdag

    def plan(day):
        digdag.env.store({"rows": 10})           # visible to every later task
        digdag.env.export({"table": "events"})   # visible to the subtasks below
        digdag.env.add_subtask(load, part=1)     # +subtask0: py>: module.load, part: 1
        digdag.env.add_subtask({"sh>": "echo done"})  # +subtask1

This module runs in the task's own Python process; tickwork reads ``env`` when the
function returns.
"""

from __future__ import annotations

import json
from typing import Any


class Env:
    """What one ``py>`` task reads and produces."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.state_params: dict[str, Any] = {}
        self.store_params: dict[str, Any] = {}
        self.export_params: dict[str, Any] = {}
        self.subtask_config: dict[str, Any] = {}
        self.subtask_index = 0

    def set_state(self, params: dict[str, Any] | None = None, **kwds: Any) -> None:
        """Kept for compatibility; tickwork has no polling state for py> tasks."""
        self.state_params.update(params or {}, **kwds)

    def store(self, params: dict[str, Any] | None = None, **kwds: Any) -> None:
        """Params for every task that runs after this one."""
        self.store_params.update(_json_safe(dict(params or {}, **kwds)))

    def export(self, params: dict[str, Any] | None = None, **kwds: Any) -> None:
        """Params for the subtasks this task adds (its descendants)."""
        self.export_params.update(_json_safe(dict(params or {}, **kwds)))

    def add_subtask(self, function: Any = None, **params: Any) -> None:
        """Add ``+subtask<N>``: a task config (a dict) or a function to run with ``py>``."""
        if function is not None and not isinstance(function, dict):
            config = dict(params)
            config["py>"] = f"{function.__module__}.{function.__qualname__}"
        else:
            config = dict(function or {}, **params)
        self.subtask_config[f"+subtask{self.subtask_index}"] = _json_safe(config)
        self.subtask_index += 1


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"Parameters must be serializable using JSON: {exc}") from None
    return value


env = Env()
