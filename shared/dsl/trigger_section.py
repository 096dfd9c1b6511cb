"""Reading a workflow file's ``trigger:`` section (see :mod:`tickwork.shared.domain.triggers`)."""

from __future__ import annotations

import re
from typing import Any

from tickwork.shared.domain.triggers import TriggerSpec, Upstream, WebhookSpec
from tickwork.shared.dsl.loader import LineMap
from tickwork.shared.dsl.names import workflow_name_problem
from tickwork.shared.dsl.reporting import Reporter, Where, describe
from tickwork.shared.errors import TickworkError
from tickwork.shared.secrets import check_secret_name

HOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
PROJECT_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
MAX_UPSTREAMS = 20
TRIGGER_KEYS = ("after", "webhook")
WEBHOOK_KEYS = ("name", "secret", "params")


def read_trigger(reporter: Reporter, data: LineMap, where: Where) -> dict[str, Any] | None:
    """The ``trigger:`` as its stored form, or None when absent or refused (reported at
    the line at fault)."""
    if "trigger" not in data:
        return None
    raw = data["trigger"]
    line = data.line_of("trigger")
    if not isinstance(raw, LineMap) or not any(k in raw for k in TRIGGER_KEYS):
        reporter.report(
            where, line, "'trigger' must be a mapping with 'after' (workflows) or 'webhook'"
        )
        return None
    before = len(reporter.problems)
    for key in raw:
        if key not in TRIGGER_KEYS:
            reporter.report(
                where, raw.line_of(key), f"unknown key {key!r} of trigger (known: after, webhook)"
            )
    after = _after(reporter, raw, where) if "after" in raw else ()
    webhook = _webhook(reporter, raw, where) if "webhook" in raw else None
    if len(reporter.problems) > before:
        return None
    return TriggerSpec(after, webhook).to_config()


def _after(reporter: Reporter, raw: LineMap, where: Where) -> tuple[Upstream, ...]:
    value = raw["after"]
    line = raw.line_of("after")
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not listed or len(listed) > MAX_UPSTREAMS:
        reporter.report(
            where,
            line,
            f"'after' must name 1-{MAX_UPSTREAMS} workflows (WORKFLOW or PROJECT/WORKFLOW), "
            f"got {describe(value)}",
        )
        return ()
    found: list[Upstream] = []
    for entry in listed:
        if not isinstance(entry, str):
            reporter.report(where, line, f"'after' names workflows as strings, got {entry!r}")
            continue
        project, slash, workflow = entry.rpartition("/")
        if slash and not PROJECT_PART.fullmatch(project):
            reporter.report(where, line, f"'{entry}': {project!r} cannot name a project")
            continue
        if problem := workflow_name_problem(workflow):
            reporter.report(where, line, f"'{entry}': {problem}")
            continue
        upstream = Upstream(workflow, project or None)
        if upstream not in found:
            found.append(upstream)
    return tuple(found)


def _webhook(reporter: Reporter, raw: LineMap, where: Where) -> WebhookSpec | None:
    body = raw["webhook"]
    if not isinstance(body, LineMap):
        reporter.report(
            where, raw.line_of("webhook"), "'webhook' must be a mapping: name, secret, params"
        )
        return None
    for key in body:
        if key not in WEBHOOK_KEYS:
            reporter.report(
                where,
                body.line_of(key),
                f"unknown key {key!r} of webhook (known: {', '.join(WEBHOOK_KEYS)})",
            )
    name, secret, params = body.get("name"), body.get("secret"), body.get("params")
    ok = True
    if not isinstance(name, str) or not HOOK_NAME.fullmatch(name):
        reporter.report(
            where,
            body.line_of("name"),
            "the webhook needs a name: letters, digits, '_', '.' or '-', at most 64",
        )
        ok = False
    try:
        check_secret_name(str(secret) if secret is not None else "")
    except TickworkError:
        reporter.report(
            where,
            body.line_of("secret"),
            "the webhook needs 'secret': the name of the project secret that signs its calls",
        )
        ok = False
    if params is not None and (
        not isinstance(params, str) or (params and not params.startswith("/"))
    ):
        reporter.report(
            where,
            body.line_of("params"),
            "'params' is a JSON pointer into the body: '' (all of it) or /a/b",
        )
        ok = False
    if not ok:
        return None
    return WebhookSpec(str(name), str(secret), params)
