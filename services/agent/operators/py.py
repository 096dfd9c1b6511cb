"""``py>``: calls ``module.function`` of the project in a child Python process.

The child is the agent's own Python, or the interpreter the ``python`` option names (a
path or a command with its arguments, as Digdag's ``python:``: ``/opt/conda/bin/python``,
``[python3, -X, utf8]``), which must be Python 3.7 or later.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.services.agent.operators.process import run_child, task_environment
from tickwork.shared.dsl.parser import parse_generated_tasks
from tickwork.shared.errors import InvalidWorkflow

# Run by path with -P, so nothing of tickwork is importable in the child and a project's
# own packages (even one named "tickwork") are found first.
CHILD_SCRIPT = Path(__file__).with_name("py_child.py")
# Another interpreter may not know -P (3.11): it runs the script through runpy, which does
# not put the script's folder on sys.path either (nor does -c leave the current one).
FOREIGN_BOOTSTRAP = (
    "import runpy, sys; del sys.path[0]; runpy.run_path(sys.argv.pop(1), run_name='__main__')"
)


def run_py(context: OperatorContext) -> dict[str, Any]:
    """Call the function with params as keyword arguments; store the dict it returns."""
    with tempfile.TemporaryDirectory(prefix="tickwork-py-") as scratch:
        result_path = Path(scratch) / "result.json"
        request = {
            "function": str(context.message.command),
            "params": context.message.params,
            "result_path": str(result_path),
        }
        code = run_child(
            context,
            python_command(context.message.params.get("python")),
            task_environment(),
            stdin_text=json.dumps(request),
        )
        outcome = _read_result(result_path)
    if code != 0 or "error" in outcome:
        raise OperatorFailed(str(outcome.get("error") or f"python exited with status {code}"))
    export, subtasks = outcome.get("export"), outcome.get("subtasks")
    context.export = dict(export) if isinstance(export, dict) else {}
    if isinstance(subtasks, dict) and subtasks:
        context.subtasks = _checked_subtasks(context, subtasks)
    store = outcome.get("store", {})
    return dict(store) if isinstance(store, dict) else {}


def python_command(given: Any) -> list[str]:
    """The command running the child: the agent's Python, or the ``python`` option's."""
    if given is None or given == "":
        return [sys.executable, "-P", str(CHILD_SCRIPT)]
    if isinstance(given, str):
        interpreter = [given]
    elif isinstance(given, list) and given and all(isinstance(p, str) and p for p in given):
        interpreter = list(given)
    else:
        raise OperatorFailed(
            f"'py>' python must be a path or a list of a command and its arguments, got {given!r}"
        )
    return [*interpreter, "-c", FOREIGN_BOOTSTRAP, str(CHILD_SCRIPT)]


def _checked_subtasks(context: OperatorContext, config: dict[str, Any]) -> dict[str, Any]:
    """The subtasks the function added, parsed like a workflow file's group (``^sub``)."""
    source = f"subtasks of {context.message.full_name}"
    try:
        spec = parse_generated_tasks(config, source, context.project_dir)
    except InvalidWorkflow as exc:
        raise OperatorFailed(f"py> added invalid subtasks: {exc}") from None
    return spec.to_config()


def _read_result(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
