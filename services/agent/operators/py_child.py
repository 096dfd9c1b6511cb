"""The child side of ``py>``: imports ``module.function`` from the project and calls it.

Reads ``{"function", "params", "result_path"}`` as JSON on stdin, passes the params the
function's signature names as keyword arguments (all of them if it takes ``**kwargs``),
and writes the returned dict as JSON to ``result_path``. Exit status 3 means the function
raised; its traceback is in the log.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import traceback
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


def main() -> int:
    """Run one py> task; the exit status tells the agent how it went."""
    request = json.load(sys.stdin)
    sys.path.insert(0, ".")
    module_name, _, function_name = request["function"].rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        result = function(**_keyword_arguments(function, request["params"]))
    except Exception as exc:
        traceback.print_exc()
        sys.stdout.flush()
        with open(request["result_path"], "w") as out:
            json.dump({"error": f"{type(exc).__name__}: {exc}"}, out)
        return 3
    if result is not None and not isinstance(result, dict):
        with open(request["result_path"], "w") as out:
            message = f"{request['function']} returned {type(result).__name__}, not a dict"
            json.dump({"error": message}, out)
        return 3
    with open(request["result_path"], "w") as out:
        json.dump({"store": result or {}}, out, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
