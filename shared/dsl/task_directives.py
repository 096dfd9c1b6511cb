"""Reading the directives any task may carry (``_env``, ``_timeout``, ``_queue``, ``_after``…).

Each reader takes the task's body, reports what is wrong through a :class:`Reporter` and
returns the value to store (or a neutral one when the directive was refused).
"""

from __future__ import annotations

import re
from typing import Any

from tickwork.shared.domain.delays import StartRule
from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.domain.pools import MAX_PRIORITY, MIN_PRIORITY
from tickwork.shared.domain.schedule import suggest
from tickwork.shared.domain.workflow import QUEUE_NAME, RetryPolicy, TaskSpec
from tickwork.shared.dsl.directives import (
    Bad,
    delay_seconds,
    find_cycle,
    flag,
    parallel_value,
    retry_policy,
    start_at,
)
from tickwork.shared.dsl.loader import LineMap
from tickwork.shared.dsl.reporting import Reporter, Where, describe, plain

DELAY_DIRECTIVES = ("_delay", "_start_at")
TOP_LEVEL_KEYS = (
    "timezone",
    "schedule",
    "trigger",
    "_export",
    "_error",
    "_check",
    "_retry",
    "_parallel",
    "_queue",
    "_pool",
    "_priority",
    "_workdir",
    "sla",
    *DELAY_DIRECTIVES,
)
GROUP_DIRECTIVES = (
    "_parallel",
    "_background",
    "_after",
    "_error",
    "_check",
    "_retry",
    "_export",
    "_queue",
    "_pool",
    "_priority",
    "_env",
    "_disable",
    "_workdir",
    *DELAY_DIRECTIVES,
)
OPERATOR_DIRECTIVES = (*GROUP_DIRECTIVES[1:], "_type", "_command", "_timeout")
WORKFLOW_KEYS_IN_GROUPS = ("timezone", "schedule", "sla")
"""A workflow's own keys, which Digdag's compiler accepts on any group too (its
``GROUPING_TASK_CONFIG_KEYS``): a whole workflow file ``!include``d into a group brings
them. They are checked there and have no effect: the including workflow's govern."""
MAX_TIMEOUT_SECONDS = 31 * 24 * 3600
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")


def read_env(reporter: Reporter, body: LineMap, where: Where) -> dict[str, Any]:
    """``_env``: variable names to strings or numbers (``${secret:...}`` allowed)."""
    value = body["_env"]
    if not isinstance(value, LineMap):
        message = f"'_env' must be a mapping of variable names to values, got {describe(value)}"
        reporter.report(where, body.line_of("_env"), message)
        return {}
    env: dict[str, Any] = {}
    for key, item in value.items():
        line = value.line_of(key)
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            reporter.report(where, line, f"'_env' name {key!r} is not a variable name")
        elif key.startswith("TICKWORK_"):
            reporter.report(where, line, f"'_env' name {key!r}: TICKWORK_ names are tickwork's")
        elif isinstance(item, LineMap | list) or item is None:
            reporter.report(where, line, f"'_env' {key} must be a string or number")
        else:
            reporter.check_values(item, line, where, secrets_allowed=True)
            env[key] = item
    return env


def read_timeout(reporter: Reporter, body: LineMap, where: Where) -> int | None:
    """``_timeout``: a literal duration from one second to 31 days."""
    value = body["_timeout"]
    line = body.line_of("_timeout")
    if isinstance(value, str) and "${" in value:
        reporter.report(where, line, "'_timeout' cannot use ${...} expressions")
        return None
    try:
        return parse_duration(value, minimum=1, maximum=MAX_TIMEOUT_SECONDS)
    except BadDuration as exc:
        reporter.report(where, line, f"'_timeout' {exc}")
    return None


def read_queue(reporter: Reporter, body: LineMap, where: Where) -> str | None:
    """``_queue``: a literal queue name."""
    return _read_name(reporter, body, where, "_queue", "queue")


def read_pool(reporter: Reporter, body: LineMap, where: Where) -> str | None:
    """``_pool``: a literal pool name (the pool itself is made with ``tickwork pools set``)."""
    return _read_name(reporter, body, where, "_pool", "pool")


def _read_name(reporter: Reporter, body: LineMap, where: Where, key: str, kind: str) -> str | None:
    """A literal ``kind`` name under ``key`` (queues and pools are named alike)."""
    value = body[key]
    line = body.line_of(key)
    if isinstance(value, str) and "${" in value:
        reporter.report(where, line, f"'{key}' cannot use ${{...}} expressions")
    elif not isinstance(value, str) or not QUEUE_NAME.fullmatch(value):
        message = (
            f"'{key}' must be a {kind} name (a letter or digit, then letters, digits, "
            f"'_', '.' or '-'; up to 64), got {value!r}"
        )
        reporter.report(where, line, message)
    else:
        return value
    return None


def read_priority(reporter: Reporter, body: LineMap, where: Where) -> int | None:
    """``_priority``: a literal whole number from -100 to 100 (higher is handed out first)."""
    value = body["_priority"]
    whole = isinstance(value, int) and not isinstance(value, bool)
    if whole and MIN_PRIORITY <= value <= MAX_PRIORITY:
        return int(value)
    message = (
        f"'_priority' must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value!r}"
    )
    reporter.report(where, body.line_of("_priority"), message)
    return None


def read_export(reporter: Reporter, body: LineMap, where: Where) -> dict[str, Any]:
    """``_export``: a mapping of params (empty when null)."""
    value = body["_export"]
    if value is None:
        return {}
    if not isinstance(value, LineMap):
        message = f"'_export' must be a mapping, got {describe(value)}"
        reporter.report(where, body.line_of("_export"), message)
        return {}
    reporter.check_values(value, value.line, where)
    return {str(key): item for key, item in plain(value).items()}


def read_parallel(reporter: Reporter, body: LineMap, where: Where) -> tuple[bool, int | None]:
    """``_parallel`` (false when absent): whether children run at once, and their limit."""
    try:
        return parallel_value(body.get("_parallel", False), body.line_of("_parallel"))
    except Bad as bad:
        reporter.report(where, bad.line, bad.message)
    return False, None


def read_background(reporter: Reporter, body: LineMap, where: Where) -> bool:
    """``_background``: true or false, and never inside a ``_parallel`` group."""
    value = body["_background"]
    background = flag(value)
    line = body.line_of("_background")
    if background is None:
        reporter.report(where, line, f"'_background' must be true or false, got {value!r}")
    elif background and where.in_parallel:
        reporter.report(where, line, "'_background' is not valid inside a _parallel group")
    return bool(background) and not where.in_parallel


def read_after(reporter: Reporter, body: LineMap, where: Where) -> tuple[str, ...]:
    """``_after``: the siblings (inside a ``_parallel`` group) a task waits for."""
    value = body["_after"]
    line = body.line_of("_after")
    names = [value] if isinstance(value, str) else value
    if not where.in_parallel:
        reporter.report(where, line, "'_after' is only valid inside a _parallel group")
    elif not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        message = f"'_after' must be a task name or a list of task names, got {value!r}"
        reporter.report(where, line, message)
    else:
        return tuple(dict.fromkeys(n if n.startswith("+") else f"+{n}" for n in names))
    return ()


def check_after(
    reporter: Reporter, children: list[TaskSpec], bodies: dict[str, LineMap], where: Where
) -> None:
    """Report ``_after`` names that are not siblings, and cycles among them."""
    siblings = [child.name for child in children]
    graph: dict[str, list[str]] = {}
    for child in children:
        line = bodies[child.name].line_of("_after")
        graph[child.name] = []
        for upstream in child.after:
            if upstream == child.name:
                reporter.report(where, line, f"task '{child.name}' cannot run after itself")
            elif upstream not in siblings:
                hint = suggest(upstream, siblings)
                message = f"'_after' names '{upstream}', not a sibling of '{child.name}'"
                reporter.report(where, line, f"{message}{hint}")
            else:
                graph[child.name].append(upstream)
    cycle = find_cycle(graph)
    if cycle:
        line = bodies[cycle[0]].line_of("_after")
        reporter.report(where, line, f"'_after' cycle: {' -> '.join([*cycle, cycle[0]])}")


def read_start(reporter: Reporter, body: LineMap, where: Where) -> StartRule | None:
    """``_delay`` and ``_start_at``; None when neither holds the task back."""
    delay, at = 0, None
    try:
        if "_delay" in body:
            delay = delay_seconds(body["_delay"], body.line_of("_delay"))
    except Bad as bad:
        reporter.report(where, bad.line, bad.message)
    try:
        if "_start_at" in body:
            at = start_at(body["_start_at"], body.line_of("_start_at"))
    except Bad as bad:
        reporter.report(where, bad.line, bad.message)
    return StartRule(delay, at) if delay or at is not None else None


def read_retry(reporter: Reporter, body: LineMap, where: Where) -> RetryPolicy | None:
    """``_retry``: a count, or a mapping with ``limit`` and intervals."""
    try:
        return retry_policy(body["_retry"], body.line_of("_retry"))
    except Bad as bad:
        reporter.report(where, bad.line, bad.message)
    return None
