"""``echo>``: writes its message to the task log."""

from __future__ import annotations

import json
from typing import Any

from tickwork.services.agent.operators.base import OperatorContext


def run_echo(context: OperatorContext) -> dict[str, Any]:
    """Log the command as text (non-strings as JSON); stores nothing."""
    command = context.message.command
    text = command if isinstance(command, str) else json.dumps(command)
    context.write_log(text + "\n")
    return {}
