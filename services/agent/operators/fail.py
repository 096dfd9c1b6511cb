"""``fail>``: always fails, with its message as the error."""

from __future__ import annotations

from typing import Any

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed


def run_fail(context: OperatorContext) -> dict[str, Any]:
    """Fail the task with the command as ``${error.message}``."""
    message = str(context.message.command or "fail> task failed")
    context.write_log(message + "\n")
    raise OperatorFailed(message)
