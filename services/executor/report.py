"""What an executor pass does and reports: its plan, its working state, its report, and
the timers one pass leaves the next."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from tickwork.services.executor.graph import TaskGraph, TaskMove
from tickwork.shared.dispatch.messages import TaskEvent, TaskMessage, WorkCommitted
from tickwork.shared.domain.states import AttemptState

RESCAN_SECONDS = 1.0
"""How often a pass looks at every waiting and ready task, not only at what it changed:
this finds work that other processes made (other executors, a restart)."""


@dataclass(frozen=True)
class Recovery:
    """How the reaper finds lost messages and lost agents (distributed mode only).

    Every ``every_seconds`` it looks at QUEUED and RUNNING tasks unchanged for
    ``grace_seconds`` whose lease key holds nothing for their token. One that no agent
    took lost its message and is published again under the same token. One that an agent
    took (RUNNING, or QUEUED with the agent's note that it took it: the agent died before
    its start was reported) lost its agent and is requeued under a new token, or fails
    once that happened ``max_lost`` times. A queued one whose message an agent took off
    its queue and never started (see recovery.TAKEN_OFF_QUEUE_SECONDS) is published
    again under the same token.
    """

    every_seconds: float = 5.0
    grace_seconds: float = 2.0
    max_lost: int = 3


@dataclass
class TickReport:
    """What one pass did."""

    attempts_started: int = 0
    events_applied: int = 0
    stale_results: int = 0
    repeated_results: int = 0  # a result of a token whose run had ended, sent again
    requeued: int = 0  # tasks given a new token: lost agents and released tasks
    republished: int = 0  # queued tasks whose message was lost, published again
    leases_lost: int = 0
    attempts_killed: int = 0
    tasks_woken: int = 0
    groups_started: int = 0
    tasks_dispatched: int = 0
    slas_missed: int = 0  # attempts whose sla: deadline passed, reacted to by this pass
    log_bytes_stored: int = 0  # of log chunks agents streamed, as text
    more_ready: bool = False  # a batch limit was hit: tick again without waiting
    # (priority, seconds ready) of each task queued: how long it waited to be handed out
    ready_waits: list[tuple[int, float]] = field(default_factory=list)
    finished_attempts: list[tuple[int, AttemptState]] = field(default_factory=list)
    moves: list[TaskMove] = field(default_factory=list)  # in the order the pass made them
    # Seconds of the pass's phases: its statements, its commit, and the publish after it.
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def did_work(self) -> bool:
        """Whether anything changed; an idle loop backs off when nothing did."""
        return bool(
            self.attempts_started
            or self.events_applied
            or self.requeued
            or self.republished
            or self.attempts_killed
            or self.tasks_woken
            or self.groups_started
            or self.tasks_dispatched
            or self.slas_missed
        )


@dataclass(frozen=True)
class PassPlan:
    """What one pass looks at, decided before it starts."""

    rescan: bool  # a full rescan is due: every waiting and ready task, missed SLAs
    look: bool  # look for new attempts and kills
    reap: bool  # a reaper pass is due
    scan_ready: bool  # scan the store for READY tasks (a rescan, or the last batch was full)


@dataclass
class Pass:
    """One pass's working state inside its transaction; what it sends after the commit."""

    conn: Connection
    graph: TaskGraph
    now: datetime
    plan: PassPlan
    report: TickReport = field(default_factory=TickReport)
    messages: list[TaskMessage] = field(default_factory=list)  # published after the commit
    revoked: list[tuple[int, int]] = field(default_factory=list)  # (task, token) to revoke
    ended_logs: list[dict[str, Any]] = field(default_factory=list)  # logs results described
    logged_runs: set[tuple[int, int]] = field(default_factory=set)  # (task, token) indexed
    log_attempts: set[int] = field(default_factory=set)  # whose logs the pass stored chunks of
    log_chunks: list[dict[str, Any]] = field(default_factory=list)  # chunk rows not yet written
    notified: set[int] = field(default_factory=set)  # attempts whose followers were told
    pooled_ready: bool = False  # the pass made tasks of a pool READY
    statements_seconds: float = 0.0  # from the transaction's start to its commit


@dataclass
class Timers:
    """What a pass leaves the next: when the next rescan and reaper pass are due, the
    soonest end of a wait, and whether a batch limit left work to look at again."""

    rescan_at: datetime | None = None
    reap_at: datetime | None = None
    wake_due: datetime | None = None  # soonest not_before of a waiting task
    look_again: bool = False  # a pass hit its attempts limit: look again next pass
    scan_ready: bool = False  # a pass hit its dispatch batch: scan for READY tasks next

    def plan(self, now: datetime, events: Sequence[TaskEvent], reaping: bool) -> PassPlan:
        """The next pass's plan.

        New attempts and kills are looked for when another process said it committed
        some (PostgreSQL NOTIFY -> WorkCommitted) and on every rescan.
        """
        rescan = self.rescan_at is None or now >= self.rescan_at
        committed = any(isinstance(e, WorkCommitted) for e in events)
        plan = PassPlan(
            rescan=rescan,
            look=rescan or self.look_again or committed,
            reap=reaping and (self.reap_at is None or now >= self.reap_at),
            scan_ready=rescan or self.scan_ready,
        )
        return plan

    def wakes_due(self, now: datetime, earliest_wake: datetime | None) -> bool:
        """Whether a wait (known from before, or set by this pass) has ended by ``now``."""
        due = [t for t in (self.wake_due, earliest_wake) if t is not None]
        return bool(due) and min(due) <= now

    def after_commit(
        self, work: Pass, reap_every_seconds: float | None, earliest_wake: datetime | None
    ) -> None:
        """Set the next rescan and reaper pass after a pass that committed."""
        if work.plan.rescan:
            self.rescan_at = work.now + timedelta(seconds=RESCAN_SECONDS)
        if work.plan.reap and reap_every_seconds is not None:
            self.reap_at = work.now + timedelta(seconds=reap_every_seconds)
        if earliest_wake is not None:
            self.wake_due = min(self.wake_due or earliest_wake, earliest_wake)

    def seconds_until_due(self, now: datetime, cap_seconds: float) -> float:
        """How long the loop may sleep before a wait ends or a rescan is due (at most the cap)."""
        due = [t for t in (self.wake_due, self.rescan_at) if t is not None]
        if not due:
            return cap_seconds
        return max(0.0, min(cap_seconds, (min(due) - now).total_seconds()))
