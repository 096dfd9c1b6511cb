"""``notifications.yml``: a project's notification rules, read with file:line problems.

::

    rules:
      - name: failures-to-ops          # unique in the project
        when: [failed, sla_missed]     # failed, sla_missed, recovered, running_longer
        workflows: [daily_load]        # optional: every workflow of the project
        webhook:
          url: ${secret:ops.hook_url}  # the whole URL may be a secret
          signing_secret: ops.hook_key # the project secret that signs the body
      - name: long-runs
        when: running_longer
        longer_than: 2h
        slack:
          url: ${secret:slack.webhook}
      - name: oncall
        when: failed
        mail:
          to: [oncall@example.com]

Every problem names the file and line; a file with problems changes nothing (``push`` and
``tickwork check`` refuse it whole).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tickwork.shared.domain.durations import parse_duration
from tickwork.shared.domain.notifications import (
    RULE_EVENTS,
    RULES_FILE,
    Event,
    NotificationRule,
    Target,
    TargetKind,
)
from tickwork.shared.dsl.loader import LineMap, load_yaml
from tickwork.shared.dsl.reporting import describe
from tickwork.shared.errors import InvalidWorkflow, Problem, TickworkError
from tickwork.shared.secrets import check_secret_name, secret_references

MAX_RULES = 50
RULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MIN_LONGER_THAN_SECONDS = 60
ONLY_SECRET = re.compile(r"\$\{secret:[^}]*\}")
TARGET_KEYS: dict[TargetKind, dict[str, bool]] = {
    TargetKind.WEBHOOK: {"url": True, "signing_secret": False},
    TargetKind.SLACK: {"url": True},
    TargetKind.MAIL: {"to": True, "subject": False},
}
"""Each target's keys, and whether it is required."""
RULE_KEYS = ("name", "when", "workflows", "longer_than", *(k.value for k in TargetKind))


def read_rules_file(path: Path, workflows: Collection[str] | None = None) -> list[NotificationRule]:
    """The rules of ``path`` (a ``notifications.yml``); InvalidWorkflow listing every
    problem. With ``workflows``, a rule naming another workflow is a problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidWorkflow([Problem(path.name, None, f"cannot read: {exc}")]) from None
    return parse_rules(text, path.name, workflows)


def project_rules(project_dir: Path, workflows: Collection[str]) -> list[NotificationRule]:
    """The rules of the project at ``project_dir`` (none without a rules file)."""
    path = project_dir / RULES_FILE
    return read_rules_file(path, workflows) if path.is_file() else []


def parse_rules(
    text: str, filename: str = RULES_FILE, workflows: Collection[str] | None = None
) -> list[NotificationRule]:
    """The rules ``text`` declares; InvalidWorkflow listing every problem."""
    data = load_yaml(text, filename)
    report = _Report(filename)
    rules: list[NotificationRule] = []
    if not isinstance(data, LineMap):
        report(1, f"expected a mapping with 'rules', got {describe(data)}")
    else:
        for key in data:
            if key != "rules":
                report(data.line_of(key), f"unknown key {key!r} (the file holds 'rules')")
        items = data.get("rules", [])
        if not isinstance(items, list):
            report(data.line_of("rules"), f"'rules' must be a list, got {describe(items)}")
        elif len(items) > MAX_RULES:
            report(data.line_of("rules"), f"at most {MAX_RULES} rules, got {len(items)}")
        else:
            seen: dict[str, int] = {}
            for item in items:
                line = item.line if isinstance(item, LineMap) else data.line_of("rules")
                rule = _rule(item, line, workflows, report)
                if rule is None:
                    continue
                if rule.name in seen:
                    report(line, f"a rule named {rule.name!r} is already at line {seen[rule.name]}")
                    continue
                seen[rule.name] = line
                rules.append(rule)
    if report.problems:
        raise InvalidWorkflow(sorted(report.problems, key=lambda p: p.line or 0))
    return rules


class _Report:
    """The problems found in one file, each at its line."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.problems: list[Problem] = []

    def __call__(self, line: int | None, message: str) -> None:
        self.problems.append(Problem(self.filename, line, message))


def _rule(
    item: Any, line: int, workflows: Collection[str] | None, report: _Report
) -> NotificationRule | None:
    if not isinstance(item, LineMap):
        report(line, f"a rule must be a mapping, got {describe(item)}")
        return None
    before = len(report.problems)
    for key in item:
        if key not in RULE_KEYS:
            report(item.line_of(key), f"unknown key {key!r} (known: {', '.join(RULE_KEYS)})")
    name = item.get("name")
    if not isinstance(name, str) or not RULE_NAME.fullmatch(name):
        report(
            item.line_of("name"),
            "a rule needs a name: letters, digits, '_', '.' or '-', at most 64 characters",
        )
    events = _events(item, report)
    covered = _workflows(item, workflows, report)
    longer_than = _longer_than(item, events, report)
    target = _target(item, report)
    if len(report.problems) > before or target is None or not isinstance(name, str):
        return None
    return NotificationRule(name, events, target, covered, longer_than)


def _events(item: LineMap, report: _Report) -> tuple[Event, ...]:
    value = item.get("when")
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not listed:
        report(item.line_of("when"), f"'when' must name events among {', '.join(RULE_EVENTS)}")
        return ()
    events: list[Event] = []
    for entry in listed:
        if entry not in RULE_EVENTS:
            report(
                item.line_of("when"), f"unknown event {entry!r} (known: {', '.join(RULE_EVENTS)})"
            )
        elif Event(entry) not in events:
            events.append(Event(entry))
    return tuple(events)


def _workflows(
    item: LineMap, workflows: Collection[str] | None, report: _Report
) -> tuple[str, ...] | None:
    if "workflows" not in item:
        return None
    value = item["workflows"]
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not listed or not all(isinstance(w, str) for w in listed):
        report(item.line_of("workflows"), "'workflows' must be a workflow's name or a list of them")
        return None
    for name in listed:
        if workflows is not None and name not in workflows:
            report(item.line_of("workflows"), f"the project has no workflow {name!r}")
    return tuple(dict.fromkeys(listed))


def _longer_than(item: LineMap, events: tuple[Event, ...], report: _Report) -> int | None:
    wanted = Event.RUNNING_LONGER in events
    if "longer_than" not in item:
        if wanted:
            report(item.line_of("when"), "'running_longer' needs 'longer_than' (a duration: 2h)")
        return None
    if not wanted:
        report(item.line_of("longer_than"), "'longer_than' is read only with 'running_longer'")
        return None
    try:
        return parse_duration(item["longer_than"], minimum=MIN_LONGER_THAN_SECONDS)
    except (TickworkError, ValueError) as exc:
        report(item.line_of("longer_than"), f"'longer_than': {exc}")
        return None


def _target(item: LineMap, report: _Report) -> Target | None:
    given = [kind for kind in TargetKind if kind.value in item]
    if len(given) != 1:
        report(item.line, "a rule needs exactly one target: webhook, slack or mail")
        return None
    (kind,) = given
    body = item[kind.value]
    if not isinstance(body, LineMap):
        report(item.line_of(kind.value), f"'{kind.value}' must be a mapping")
        return None
    keys = TARGET_KEYS[kind]
    for key in body:
        if key not in keys:
            report(
                body.line_of(key), f"unknown key {key!r} of {kind.value} (known: {', '.join(keys)})"
            )
    for key, required in keys.items():
        if required and key not in body:
            report(body.line, f"{kind.value} needs '{key}'")
    url = body.get("url")
    if url is not None and not _url_ok(url):
        report(
            body.line_of("url"),
            "'url' must be an http:// or https:// URL, or ${secret:name} standing for one",
        )
    signing = body.get("signing_secret")
    if signing is not None:
        try:
            check_secret_name(str(signing))
        except TickworkError as exc:
            report(body.line_of("signing_secret"), f"'signing_secret' names a secret: {exc}")
    to = body.get("to")
    addresses = [to] if isinstance(to, str) else to
    if "to" in body and (
        not isinstance(addresses, list)
        or not addresses
        or not all(isinstance(a, str) and "@" in a for a in addresses)
    ):
        report(body.line_of("to"), "'to' must be a mail address or a list of them")
    subject = body.get("subject")
    if subject is not None and not isinstance(subject, str):
        report(body.line_of("subject"), "'subject' must be a string")
    return Target(
        kind,
        url if isinstance(url, str) else None,
        str(signing) if signing is not None else None,
        tuple(addresses) if isinstance(addresses, list) else (),
        subject if isinstance(subject, str) else None,
    )


def _url_ok(url: Any) -> bool:
    """An http(s) URL, whose only ``${...}`` are secret references (checked by name)."""
    if not isinstance(url, str) or not url:
        return False
    for name in secret_references(url):
        try:
            check_secret_name(name)
        except TickworkError:
            return False
    rest = ONLY_SECRET.sub("", url)
    if "${" in rest:
        return False
    return url.startswith(("http://", "https://")) or (rest == "" and url.startswith("${secret:"))
