"""The workflow tree as pure values: task specs, retry policies and sibling dependencies."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from tickwork.shared.domain.delays import StartRule
from tickwork.shared.domain.operators import operator_names
from tickwork.shared.errors import Problem

OPERATORS = operator_names()
"""Operator types this version runs (declared in :mod:`tickwork.shared.domain.operators`)."""

QUEUE_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
"""What a ``_queue`` (and an agent's ``--queues``) may be called."""


INHERITED = ("queue", "pool", "priority")
"""Directives a group passes on to every task under it that sets none of its own."""

MAX_INTERVAL_SECONDS = 7 * 24 * 3600
"""The longest wait between retries: an exponential interval stops growing here."""


class IntervalType(StrEnum):
    """How the wait between retries grows."""

    CONSTANT = "constant"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True)
class RetryPolicy:
    """``_retry``: ``limit`` extra runs, waiting ``interval_seconds`` (growing if exponential)."""

    limit: int
    interval_seconds: float = 0.0
    interval_type: IntervalType = IntervalType.CONSTANT
    max_interval_seconds: float | None = None

    def delay_seconds(self, retries_done: int) -> float:
        """The wait before retry number ``retries_done + 1``."""
        if self.interval_type is IntervalType.EXPONENTIAL:
            delay = self.interval_seconds * float(2 ** min(retries_done, 62))
        else:
            delay = self.interval_seconds
        if self.max_interval_seconds is not None:
            delay = min(delay, self.max_interval_seconds)
        return min(delay, MAX_INTERVAL_SECONDS)

    def to_config(self) -> dict[str, Any]:
        """The JSON form stored with a task."""
        config: dict[str, Any] = {"limit": self.limit, "interval": self.interval_seconds}
        if self.interval_type is not IntervalType.CONSTANT:
            config["interval_type"] = self.interval_type.value
        if self.max_interval_seconds is not None:
            config["max_interval"] = self.max_interval_seconds
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RetryPolicy:
        """Inverse of :meth:`to_config`."""
        return cls(
            limit=int(config["limit"]),
            interval_seconds=float(config.get("interval", 0.0)),
            interval_type=IntervalType(config.get("interval_type", "constant")),
            max_interval_seconds=config.get("max_interval"),
        )


@dataclass(frozen=True)
class TaskSpec:
    """One node of a workflow tree: an operator task (``operator`` set) or a group.

    ``name`` is the local name (``+load``, or ``^error``/``^check``/``^sub`` for generated
    ones); ``params`` are the operator task's local keys; ``called`` is the root of the
    workflow a ``call>`` task embeds, resolved when the file was parsed. ``start`` holds
    ``_delay``/``_start_at``: when the task may start once it is ready.
    """

    name: str
    operator: str | None = None
    command: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    export: dict[str, Any] = field(default_factory=dict)
    parallel: bool = False
    parallel_limit: int | None = None
    parallel_expr: str | None = None  # a loop's `_parallel: ${...}`, decided once rendered
    after: tuple[str, ...] = ()
    background: bool = False
    queue: str | None = None  # the agents' queue an operator task is routed to
    pool: str | None = None  # the pool whose slot an operator task takes (_pool)
    priority: int | None = None  # _priority: handed out before lower ones (None: 0)
    timeout_seconds: int | None = None  # an operator task's own time limit (_timeout)
    env: dict[str, Any] = field(default_factory=dict)  # _env: variables for its processes
    retry: RetryPolicy | None = None
    start: StartRule | None = None
    error: TaskSpec | None = None
    check: TaskSpec | None = None
    children: tuple[TaskSpec, ...] = ()
    called: TaskSpec | None = None
    do: TaskSpec | None = None  # what a control operator (loop>, if>, …) runs
    else_do: TaskSpec | None = None  # if>'s false branch

    @property
    def is_group(self) -> bool:
        """True for a task without an operator: it runs its children."""
        return self.operator is None

    def to_config(self, *, with_children: bool = True) -> dict[str, Any]:
        """The JSON form; without children it is what one task row stores."""
        config: dict[str, Any] = {"name": self.name}
        if self.operator is not None:
            config["operator"] = self.operator
            config["command"] = self.command
        optional: dict[str, Any] = {
            "params": self.params,
            "export": self.export,
            "parallel": self.parallel,
            "parallel_limit": self.parallel_limit,
            "parallel_expr": self.parallel_expr,
            "after": list(self.after),
            "background": self.background,
            "queue": self.queue,
            "pool": self.pool,
            "priority": self.priority,
            "timeout": self.timeout_seconds,
            "env": self.env,
        }
        config.update({k: v for k, v in optional.items() if v})
        if self.retry is not None:
            config["retry"] = self.retry.to_config()
        if self.start is not None:
            config["start"] = self.start.to_config()
        subtrees = (
            ("error", self.error),
            ("check", self.check),
            ("called", self.called),
            ("do", self.do),
            ("else_do", self.else_do),
        )
        for key, spec in subtrees:
            if spec is not None:
                config[key] = spec.to_config()
        if with_children and self.children:
            config["children"] = [child.to_config() for child in self.children]
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TaskSpec:
        """Inverse of :meth:`to_config`."""

        def sub(key: str) -> TaskSpec | None:
            value = config.get(key)
            return None if value is None else cls.from_config(value)

        retry, start = config.get("retry"), config.get("start")
        return cls(
            name=config["name"],
            operator=config.get("operator"),
            command=config.get("command"),
            params=dict(config.get("params", {})),
            export=dict(config.get("export", {})),
            parallel=bool(config.get("parallel", False)),
            parallel_limit=config.get("parallel_limit"),
            parallel_expr=config.get("parallel_expr"),
            after=tuple(config.get("after", ())),
            background=bool(config.get("background", False)),
            queue=config.get("queue"),
            pool=config.get("pool"),
            priority=config.get("priority"),
            timeout_seconds=config.get("timeout"),
            env=dict(config.get("env", {})),
            retry=None if retry is None else RetryPolicy.from_config(retry),
            start=None if start is None else StartRule.from_config(start),
            error=sub("error"),
            check=sub("check"),
            children=tuple(cls.from_config(c) for c in config.get("children", ())),
            called=sub("called"),
            do=sub("do"),
            else_do=sub("else_do"),
        )

    def inheriting(self, **values: Any) -> TaskSpec:
        """This subtree with each of ``values`` (of :data:`INHERITED`: a group's ``_queue``,
        ``_pool``, ``_priority``) on every task that sets none of its own. What a task
        generates (a loop's ``_do``, ``if>``'s branches) and its children take what it has
        then; its ``_error`` and ``_check`` take ``values``, as its siblings do."""
        merged = {**values, **self.inherited()}

        def sub(spec: TaskSpec | None, given: dict[str, Any]) -> TaskSpec | None:
            return None if spec is None or not given else spec.inheriting(**given)

        return replace(
            self,
            **merged,
            children=tuple(child.inheriting(**merged) for child in self.children),
            error=sub(self.error, values),
            check=sub(self.check, values),
            do=sub(self.do, merged),
            else_do=sub(self.else_do, merged),
        )

    def inherited(self) -> dict[str, Any]:
        """What this task passes on to its subtree (:data:`INHERITED` it sets)."""
        return {name: getattr(self, name) for name in INHERITED if getattr(self, name) is not None}

    def with_env(self, env: dict[str, Any]) -> TaskSpec:
        """This subtree with ``env`` under every task's own ``_env`` (a group's ``_env``)."""

        def sub(spec: TaskSpec | None) -> TaskSpec | None:
            return None if spec is None else spec.with_env(env)

        return replace(
            self,
            env={**env, **self.env},
            children=tuple(child.with_env(env) for child in self.children),
            error=sub(self.error),
            check=sub(self.check),
            do=sub(self.do),
            else_do=sub(self.else_do),
        )

    def pools_named(self) -> set[str]:
        """The pools tasks of this subtree name (embedded ``call>`` targets included)."""
        subtrees = (*self.children, self.error, self.check, self.called, self.do, self.else_do)
        found = {self.pool} if self.pool is not None else set()
        for spec in subtrees:
            if spec is not None:
                found |= spec.pools_named()
        return found

    def count_tasks(self) -> int:
        """How many task rows the static tree of this spec materializes into."""
        return 1 + sum(child.count_tasks() for child in self.children)


@dataclass(frozen=True)
class WorkflowDefinition:
    """A parsed ``NAME.dig`` file: the workflow ``NAME`` and its root group ``+NAME``."""

    name: str
    root: TaskSpec
    timezone: str = "UTC"
    schedule: dict[str, Any] | None = None
    sla: dict[str, Any] | None = None  # the `sla:` as tickwork.shared.domain.sla.SlaSpec stores it
    trigger: dict[str, Any] | None = None  # the `trigger:` as domain.triggers.TriggerSpec stores it
    # What the parser found worth saying but not refusing (an option no operator reads):
    # shown by `tickwork check` and `run`, never stored.
    warnings: tuple[Problem, ...] = field(default=(), compare=False, repr=False)

    def to_config(self) -> dict[str, Any]:
        """The JSON form stored (and shared by digest) as a workflow config."""
        config: dict[str, Any] = {"name": self.name, "timezone": self.timezone}
        if self.schedule is not None:
            config["schedule"] = self.schedule
        if self.sla is not None:
            config["sla"] = self.sla
        if self.trigger is not None:
            config["trigger"] = self.trigger
        config["root"] = self.root.to_config()
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> WorkflowDefinition:
        """Inverse of :meth:`to_config`."""
        return cls(
            name=config["name"],
            root=TaskSpec.from_config(config["root"]),
            timezone=config.get("timezone", "UTC"),
            schedule=config.get("schedule"),
            sla=config.get("sla"),
            trigger=config.get("trigger"),
        )


def sibling_dependencies(group: TaskSpec) -> list[tuple[int, int]]:
    """Edges ``(upstream_index, downstream_index)`` among a group's children.

    Sequential groups chain each child to the one before; a ``_background`` child has no
    upstream, and the next ordinary child waits for it too. Parallel groups have only the
    edges ``_after`` names.
    """
    children = group.children
    if group.parallel:
        index = {child.name: i for i, child in enumerate(children)}
        return [(index[up], i) for i, child in enumerate(children) for up in child.after]
    edges: list[tuple[int, int]] = []
    last_ordinary: int | None = None
    pending_background: list[int] = []
    for i, child in enumerate(children):
        if child.background:
            pending_background.append(i)
            continue
        if last_ordinary is not None:
            edges.append((last_ordinary, i))
        edges.extend((b, i) for b in pending_background)
        pending_background = []
        last_ordinary = i
    return edges
