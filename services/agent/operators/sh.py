"""``sh>``: runs a shell command in the project directory with params as environment."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.services.agent.operators.process import run_child, task_environment
from tickwork.shared.dsl.operator_options import is_shell_list

ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


def params_as_environment(params: Mapping[str, Any]) -> dict[str, str]:
    """Params whose names are valid variable names; non-strings JSON-encoded (as Digdag)."""
    env: dict[str, str] = {}
    for key, value in params.items():
        if ENV_NAME.fullmatch(key):
            env[key] = value if isinstance(value, str) else json.dumps(value)
    return env


OUTPUT_LIMIT_BYTES = 1024 * 1024
OUTPUT_KEY = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.-]*\Z")


def run_sh(context: OperatorContext) -> dict[str, Any]:
    """Run ``/bin/sh -c command``, or the command with the ``shell:`` option's program;
    a non-zero exit fails the task.

    What the command writes to the file ``$TICKWORK_OUTPUT`` is stored for later tasks:
    ``key=value`` lines (strings), or one JSON object."""
    env = {**task_environment(), **params_as_environment(context.message.params)}
    env["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{context.project_dir}"
    with tempfile.TemporaryDirectory(prefix="tickwork-sh-") as scratch:
        output = Path(scratch) / "output"
        output.touch()
        env["TICKWORK_OUTPUT"] = str(output)
        argv = shell_argv(context.message.params, str(context.message.command), Path(scratch))
        code = run_child(context, argv, env)
        if code < 0:
            raise OperatorFailed(f"command was killed by signal {-code}")
        if code != 0:
            raise OperatorFailed(f"command exited with status {code}")
        return read_output(output)


def shell_argv(params: Mapping[str, Any], command: str, scratch: Path) -> list[str]:
    """How to run ``command``: ``/bin/sh -c command`` unless ``shell:`` (or ``sh: {shell:}``
    exported from above) names another program as a list of strings, as in Digdag.

    A shell list ending in ``-c`` gets the command itself as its last argument; any other
    gets the path of a script file holding the command (Digdag's ``shell: [bash]``)."""
    nested = params.get("sh")
    shell = params.get("shell", nested.get("shell") if isinstance(nested, Mapping) else None)
    if shell is None:
        return ["/bin/sh", "-c", command]
    if not is_shell_list(shell):
        raise OperatorFailed(f"'sh>' shell must be a non-empty list of strings, got {shell!r}")
    if shell[-1] == "-c":
        return [*shell, command]
    script = scratch / "runner.sh"
    script.write_text(command)
    return [*shell, str(script)]


def read_output(path: Path) -> dict[str, Any]:
    """The values a command stored through ``$TICKWORK_OUTPUT``; OperatorFailed, naming the
    line, when the file is neither ``key=value`` lines nor one JSON object."""
    if path.stat().st_size > OUTPUT_LIMIT_BYTES:
        raise OperatorFailed(f"$TICKWORK_OUTPUT is larger than {OUTPUT_LIMIT_BYTES} bytes")
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise OperatorFailed(f"$TICKWORK_OUTPUT is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise OperatorFailed("$TICKWORK_OUTPUT must hold one JSON object")
        return value
    stored: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, equals, value = line.partition("=")
        if not equals or not OUTPUT_KEY.fullmatch(key.strip()):
            raise OperatorFailed(
                f"$TICKWORK_OUTPUT line {number}: expected key=value, got {line!r}"
            )
        stored[key.strip()] = value
    return stored
