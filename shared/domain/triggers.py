"""Event triggers: a workflow that runs when another's session succeeds (``after``), or
when a signed webhook calls it (``webhook``), declared in its file beside ``schedule:``.

::

    trigger:
      after: [load_orders, warehouse/daily_load]  # a workflow of this project, or PROJECT/WORKFLOW
      webhook:
        name: deploy                # POST /api/hooks/{project}/deploy
        secret: hooks.deploy_key    # the project secret that signs the calls
        params: /release            # the part of the JSON body given as params (a JSON pointer)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Upstream:
    """A workflow whose succeeded sessions start this one: ``project`` None is this
    workflow's own project."""

    workflow: str
    project: str | None = None

    def key(self, own_project: str) -> str:
        return f"after:{self.project or own_project}/{self.workflow}"


@dataclass(frozen=True)
class WebhookSpec:
    """``POST /api/hooks/{project}/{name}``, signed with the project secret ``secret``;
    ``params`` points (RFC 6901) at the part of the body given to the session as params."""

    name: str
    secret: str
    params: str | None = None


@dataclass(frozen=True)
class TriggerSpec:
    after: tuple[Upstream, ...] = ()
    webhook: WebhookSpec | None = None

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if self.after:
            config["after"] = [
                {"workflow": u.workflow, **({"project": u.project} if u.project else {})}
                for u in self.after
            ]
        if self.webhook is not None:
            hook: dict[str, Any] = {"name": self.webhook.name, "secret": self.webhook.secret}
            if self.webhook.params is not None:
                hook["params"] = self.webhook.params
            config["webhook"] = hook
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TriggerSpec:
        hook = config.get("webhook")
        return cls(
            tuple(Upstream(u["workflow"], u.get("project")) for u in config.get("after", [])),
            None if hook is None else WebhookSpec(hook["name"], hook["secret"], hook.get("params")),
        )
