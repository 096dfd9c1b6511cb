"""``sh>``: runs a shell command in the project directory with params as environment."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from services.agent.operators.base import OperatorContext, OperatorFailed
from services.agent.operators.process import run_child, task_environment

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def params_as_environment(params: Mapping[str, Any]) -> dict[str, str]:
    """Params whose names are valid variable names; non-strings JSON-encoded (as Digdag)."""
    env: dict[str, str] = {}
    for key, value in params.items():
        if ENV_NAME.match(key):
            env[key] = value if isinstance(value, str) else json.dumps(value)
    return env


def run_sh(context: OperatorContext) -> dict[str, Any]:
    """Run ``/bin/sh -c command``; a non-zero exit fails the task."""
    env = {**task_environment(), **params_as_environment(context.message.params)}
    env["PATH"] = f"{env.get('PATH', '')}{os.pathsep}{context.project_dir}"
    code = run_child(context, ["/bin/sh", "-c", str(context.message.command)], env)
    if code < 0:
        raise OperatorFailed(f"command was killed by signal {-code}")
    if code != 0:
        raise OperatorFailed(f"command exited with status {code}")
    return {}
