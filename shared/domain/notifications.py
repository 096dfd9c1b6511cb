"""Notification rules: when (an event of a project's attempts) and where (a target).

A project declares its rules in ``notifications.yml`` at its top (parsed by
:mod:`tickwork.shared.dsl.notifications`); ``push`` stores them with the revision, and the
executor records one delivery per rule and event (see :mod:`tickwork.shared.store.notifications`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

RULES_FILE = "notifications.yml"
"""Where a project's rules live: this file at the top of the project."""


class Event(StrEnum):
    """What a rule may be told of."""

    FAILED = "failed"  # an attempt ended in error
    SLA_MISSED = "sla_missed"  # an attempt was not done by its sla: deadline
    RECOVERED = "recovered"  # an attempt succeeded where the workflow's last one failed
    RUNNING_LONGER = "running_longer"  # an attempt has run longer than the rule's longer_than
    TEST = "test"  # a sample sent by `tickwork notifications test`


RULE_EVENTS = tuple(e.value for e in Event if e is not Event.TEST)
"""The events a rule may name in ``when``."""


class TargetKind(StrEnum):
    WEBHOOK = "webhook"  # a JSON body POSTed, signed with HMAC-SHA256
    SLACK = "slack"  # a Slack incoming webhook: a readable message
    MAIL = "mail"  # a mail through the project's mail.* SMTP settings (as mail> uses)


@dataclass(frozen=True)
class Target:
    """Where a rule's deliveries go. ``url`` may hold ``${secret:name}`` (filled when it is
    sent); ``signing_secret`` names the project secret that signs a webhook's body."""

    kind: TargetKind
    url: str | None = None
    signing_secret: str | None = None
    to: tuple[str, ...] = ()
    subject: str | None = None

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"kind": self.kind.value}
        if self.url is not None:
            config["url"] = self.url
        if self.signing_secret is not None:
            config["signing_secret"] = self.signing_secret
        if self.to:
            config["to"] = list(self.to)
        if self.subject is not None:
            config["subject"] = self.subject
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Target:
        return cls(
            TargetKind(config["kind"]),
            config.get("url"),
            config.get("signing_secret"),
            tuple(config.get("to", ())),
            config.get("subject"),
        )


@dataclass(frozen=True)
class NotificationRule:
    """One rule: its name (unique in the project), the events it is told of, the workflows
    it covers (None: every workflow of the project), and its target."""

    name: str
    events: tuple[Event, ...]
    target: Target
    workflows: tuple[str, ...] | None = None
    longer_than_seconds: int | None = None  # with Event.RUNNING_LONGER

    def covers(self, workflow: str) -> bool:
        return self.workflows is None or workflow in self.workflows

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "name": self.name,
            "when": [e.value for e in self.events],
            "target": self.target.to_config(),
        }
        if self.workflows is not None:
            config["workflows"] = list(self.workflows)
        if self.longer_than_seconds is not None:
            config["longer_than_seconds"] = self.longer_than_seconds
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NotificationRule:
        workflows = config.get("workflows")
        return cls(
            config["name"],
            tuple(Event(e) for e in config["when"]),
            Target.from_config(config["target"]),
            None if workflows is None else tuple(workflows),
            config.get("longer_than_seconds"),
        )
