"""The child side of ``py>``: imports ``module.function`` from the project and calls it.

Reads ``{"function", "params", "result_path"}`` as JSON on stdin, passes the params the
function's signature names as keyword arguments (all of them if it takes ``**kwargs``),
and writes ``{"store", "export", "subtasks"}`` as JSON to ``result_path``: what the
function returned (a dict, stored) together with what it gave ``digdag.env``. Exit status
3 means the function raised; its traceback is in the log.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import traceback
from pathlib import Path
from typing import Any


def _keyword_arguments(function: Any, params: dict[str, Any]) -> dict[str, Any]:
    signature = inspect.signature(function)
    accepted = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted):
        return dict(params)
    names = {
        p.name
        for p in accepted
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {k: v for k, v in params.items() if k in names}


def _write(path: str, outcome: dict[str, Any]) -> None:
    with open(path, "w") as out:
        json.dump(outcome, out, default=str)


def main() -> int:
    """Run one py> task; the exit status tells the agent how it went."""
    request = json.load(sys.stdin)
    sys.path.insert(0, ".")
    # The project's own modules come first; `digdag` (the env helper) after them.
    sys.path.append(str(Path(__file__).with_name("py_lib")))
    digdag = importlib.import_module("digdag")
    digdag.env.params = dict(request["params"])
    module_name, _, function_name = request["function"].rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        result = function(**_keyword_arguments(function, request["params"]))
    except Exception as exc:
        traceback.print_exc()
        sys.stdout.flush()
        _write(request["result_path"], {"error": f"{type(exc).__name__}: {exc}"})
        return 3
    if result is not None and not isinstance(result, dict):
        message = f"{request['function']} returned {type(result).__name__}, not a dict"
        _write(request["result_path"], {"error": message})
        return 3
    outcome = {
        "store": {**digdag.env.store_params, **(result or {})},
        "export": digdag.env.export_params,
        "subtasks": digdag.env.subtask_config or None,
    }
    _write(request["result_path"], outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
