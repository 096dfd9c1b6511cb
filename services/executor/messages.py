"""Building the message an agent runs from a task row: params merged and ``${...}`` evaluated."""

from __future__ import annotations

import json
import secrets as random_tokens
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from tickwork.shared.dispatch.messages import DEFAULT_QUEUE, TaskMessage
from tickwork.shared.domain.expressions import escape, render
from tickwork.shared.domain.operators import find_operator, implicit_secret_prefixes
from tickwork.shared.domain.params import (
    schedule_variables,
    session_variables,
    task_params,
    time_variables,
)
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.errors import InvalidExpression
from tickwork.shared.secrets import SECRET_PARAMS, replace_secret_references, secret_references
from tickwork.shared.store.sessions import AttemptRow
from tickwork.shared.store.tasks import TaskRow


@dataclass(frozen=True)
class AttemptContext:
    """What every task of one attempt shares: session params and built-in variables."""

    attempt_id: int
    session_params: dict[str, Any]
    builtins: dict[str, Any]
    project_dir: str
    archive_digest: str | None = None  # the pushed archive whose files the tasks run in
    # The project's secrets by name, encrypted: read when the attempt's context is made.
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    @cached_property
    def escaped_builtins(self) -> dict[str, Any]:
        """``builtins`` escaped as data (see :func:`escape`), once for all its tasks."""
        escaped: dict[str, Any] = escape(self.builtins)
        return escaped

    @classmethod
    def of(
        cls,
        attempt: AttemptRow,
        schedule: ScheduleSpec | None = None,
        last_executed: datetime | None = None,
        archive_digest: str | None = None,
        secrets: dict[str, str] | None = None,
        *,
        retry_name: str | None = None,
    ) -> AttemptContext:
        """The context of an attempt row; ``schedule`` (the workflow's, if any) gives the
        ``last_session_*``/``next_session_*`` variables, ``last_executed`` the session time
        of the session that ran before this one, ``archive_digest`` the archive of a pushed
        project's revision (its tasks run in its files), ``secrets`` the project's encrypted
        secrets, ``retry_name`` the attempt's name when it retries its session (Digdag's
        ``retry_attempt_name``; null on a session's first attempt)."""
        timezone = attempt.timezone
        ran_before: dict[str, Any] = {
            "last_executed_session_time": "",
            "last_executed_session_unixtime": "",
        }
        if last_executed is not None:
            executed = time_variables("last_executed_session", last_executed, timezone)
            ran_before = {k: executed[k] for k in ran_before}
        builtins = {
            **session_variables(attempt.session_time, timezone),
            **(schedule_variables(schedule, attempt.session_time, timezone) if schedule else {}),
            **ran_before,
            "session_id": attempt.session_id,
            "session_uuid": attempt.session_uuid,
            "attempt_id": attempt.id,
            "project_id": attempt.project_id,
            "workflow_name": attempt.workflow_name,
            "retry_attempt_name": retry_name,
        }
        return cls(
            attempt_id=attempt.id,
            session_params=escape(attempt.params),
            builtins=builtins,
            project_dir=attempt.project_dir or ".",
            archive_digest=archive_digest,
            secrets=dict(secrets or {}),
        )


def queue_of(task: TaskRow) -> str:
    """The queue an operator task's messages go to: its ``_queue``, else the default."""
    return str(task.config.get("queue") or DEFAULT_QUEUE)


def build_task_message(
    task: TaskRow,
    context: AttemptContext,
    stored: dict[str, Any] | None,
    lease_token: int,
    timeout_seconds: float | None,
) -> TaskMessage:
    """The message for one operator task; raises InvalidExpression on a bad ``${...}``."""
    config = task.config
    uses = _SecretUse.of(config, context)
    # Only what the workflow file wrote is a template; the rest is data, escaped so that
    # rendering gives it back as it is.
    params = task_params(
        session_params=context.session_params,
        inherited_export=task.inherited_export,
        stored=escape(stored),
        own_export=config.get("export"),
        builtins={
            **context.escaped_builtins,
            "task_name": escape(task.full_name),
            "retry": task.retry_count,
        },
        local=uses.local,
    )
    rendered = render(params, params)
    return TaskMessage(
        task_id=task.id,
        attempt_id=task.attempt_id,
        lease_token=lease_token,
        full_name=task.full_name,
        operator=config["operator"],
        command=render(uses.command, params),
        params=rendered,
        project_dir=context.project_dir,
        archive_digest=context.archive_digest,
        timeout_seconds=_shortest(config.get("timeout"), timeout_seconds),
        queue=queue_of(task),
        env={name: _env_text(render(value, params)) for name, value in uses.env.items()},
        secrets=uses.secrets,
        secret_marker=uses.marker if uses.secrets else "",
        workdir=str(rendered.get("_workdir") or ""),
    )


IMPLICIT_SECRETS: dict[str, str] = implicit_secret_prefixes()
"""Operators that read secrets by prefix without a reference (``mail.host``...), as Digdag's
(declared in the operator registry)."""


@dataclass(frozen=True)
class _SecretUse:
    """A task's command, env and local params with its ``${secret:...}`` references turned
    into markers, and the encrypted secrets the agent needs to fill them in."""

    command: Any
    env: dict[str, Any]
    local: dict[str, Any] | None
    secrets: dict[str, str]
    marker: str

    @classmethod
    def of(cls, config: dict[str, Any], context: AttemptContext) -> _SecretUse:
        operator = config["operator"]
        command, env, local = config.get("command"), config.get("env", {}), config.get("params")
        marker = f"~secret-{random_tokens.token_hex(8)}~"
        names = secret_references(env)
        env = replace_secret_references(env, marker)
        spec = find_operator(operator)
        if spec is not None and spec.secrets_in_command:
            names |= secret_references(command)
            command = replace_secret_references(command, marker)
        if local and operator in SECRET_PARAMS:
            allowed = {k: v for k, v in local.items() if k in SECRET_PARAMS[operator]}
            names |= secret_references(allowed)
            local = {**local, **replace_secret_references(allowed, marker)}
        missing = sorted(name for name in names if name not in context.secrets)
        if missing:
            shown = ", ".join(repr(name) for name in missing)
            raise InvalidExpression(
                f"secret {shown} is not set for this project (tickwork secrets set)"
            )
        used = {name: context.secrets[name] for name in names}
        prefix = IMPLICIT_SECRETS.get(operator)
        if prefix is not None:
            used |= {k: v for k, v in context.secrets.items() if k.startswith(prefix)}
        return cls(command, env, local, used, marker)


def _shortest(*limits: float | None) -> float | None:
    """The tightest of the time limits given (None: no limit)."""
    given = [limit for limit in limits if limit is not None]
    return min(given) if given else None


def _env_text(value: Any) -> str:
    """An environment value: strings as they are, anything else as JSON (as params are)."""
    return value if isinstance(value, str) else json.dumps(value)
