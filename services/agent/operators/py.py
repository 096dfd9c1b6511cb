"""``py>``: calls ``module.function`` of the project in a child Python process."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from services.agent.operators.base import OperatorContext, OperatorFailed
from services.agent.operators.process import run_child

CHILD_MODULE = "services.agent.operators.py_child"


def run_py(context: OperatorContext) -> dict[str, Any]:
    """Call the function with params as keyword arguments; store the dict it returns."""
    with tempfile.TemporaryDirectory(prefix="tickwork-py-") as scratch:
        result_path = Path(scratch) / "result.json"
        request = {
            "function": str(context.message.command),
            "params": context.message.params,
            "result_path": str(result_path),
        }
        env = {**os.environ, "PYTHONPATH": _child_pythonpath()}
        code = run_child(
            context, [sys.executable, "-m", CHILD_MODULE], env, stdin_text=json.dumps(request)
        )
        outcome = _read_result(result_path)
    if code != 0 or "error" in outcome:
        raise OperatorFailed(str(outcome.get("error") or f"python exited with status {code}"))
    store = outcome.get("store", {})
    return dict(store) if isinstance(store, dict) else {}


def _child_pythonpath() -> str:
    # The child must import this package even when tickwork is not installed site-wide.
    package_root = str(Path(__file__).resolve().parents[3])
    existing = os.environ.get("PYTHONPATH")
    return package_root if not existing else f"{package_root}{os.pathsep}{existing}"


def _read_result(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
