"""Failover: what a rolling upgrade costs, with real executors, agents and schedulers.

Three parts, one after another, each on real ``tickwork`` processes:

(1) executor handover: two ``tickwork executor`` processes with a single partition of
    the attempts (one active, holding it under a PostgreSQL advisory lock, the other
    standing by; ``tickwork_executor_active`` on their metrics ports says which) and two
    ``tickwork agent --concurrency 1``. A chain of 300 ``echo>: x`` tasks, each waiting
    for the one before, runs; when half of it is done the active executor gets SIGTERM
    (a rolling upgrade stopping it), and in a second chain SIGKILL (a crash: PostgreSQL
    drops its lock when the connection closes). With the default 16 partitions both
    executors would work, each on its share; one partition isolates the handover that
    a chain's executor costs. Between the two a new executor takes the stopped one's
    place as standby.
    The figure is the largest gap between consecutive task completions
    (``tasks.finished_at[n+1] - finished_at[n]``, as bench/dispatch.py measures a hop),
    against the median hop of the rest of the two chains;
(2) agent drain: an agent serving a queue of its own runs one task that sleeps 2 s and
    gets SIGTERM (on its main process only, as tini passes it on) once the task has
    started: the time until the process exits, which should be about the task's
    remaining time, and whether the task's result was applied exactly once (one run, one
    ``task_logs`` row, lease token 1). Then an idle agent's SIGTERM-to-exit time;
(3) scheduler handover: five ``@every 1s`` schedules and two ``tickwork scheduler``
    processes, which share due schedules (``FOR UPDATE SKIP LOCKED``) rather than
    standing by. After 8 s one gets SIGTERM; 8 s later the sessions emitted in between
    are read. The emission lag of a session is its ``created_at`` (the database clock
    when the emitting transaction began) minus its session time; every whole second of
    the window must have exactly one session per schedule.

The processes are started and watched by bench/_failover_cluster.py; part (3) lives in
bench/_failover_scheduler.py.

There is no peer to compare with: Celery beat has no standby, and a second beat emits
every entry twice. The JSON says so (``"peer": null``).

Everything runs in a throwaway database ``tickwork_bench_<hex>`` on
TICKWORK_BENCH_DATABASE_URL (default: the local server), dropped at the end, and under a
Redis prefix of its own on TICKWORK_BENCH_REDIS_URL (default: the local server), whose
keys are deleted at the end. Services are OS processes in their own process groups, with
their logs in a temporary directory (kept after a failure); they are stopped (SIGTERM,
then SIGKILL) even after a failure or Ctrl-C. Progress goes to stderr, one line per
step; the last stdout line is one JSON object of figures. It takes about a minute.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _failover_cluster import (
    ATTEMPT_TIMEOUT_SECONDS,
    POLL_SECONDS,
    START_TIMEOUT_SECONDS,
    Cluster,
    check_succeeded,
    wait_exit,
)
from _failover_scheduler import (
    SCHEDULE_EVERY,
    SCHEDULES,
    SchedulerHandover,
    describe_scheduler,
    run_scheduler_handover,
)
from _services import (
    BenchFailed,
    Service,
    metric_total,
    read_metrics,
    redis_prefix,
    run_guarded,
    running,
    wait_until,
)
from _stores import noop_workflow_text, percentile, throwaway_database
from rich.console import Console

from tickwork.shared.store.tasks import TaskRow

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BENCH_DIR = Path(__file__).resolve().parent

CHAIN_TASKS = 300
AGENTS = 2  # each with --concurrency 1
WARMUP_TASKS = 10
WARMUP_ROUNDS = 5  # warm-up attempts at most, until every agent has run a task
DRAIN_QUEUE = "drain"  # served only by the agent being drained
DRAIN_TASK_SECONDS = 2.0


# --- (1) executor handover -------------------------------------------------------------------


@dataclass(frozen=True)
class Handover:
    """One chain during which the active executor was stopped."""

    how: str  # "sigterm" or "sigkill"
    signalled_at: float  # unix seconds
    exit_seconds: float  # the signal to the old process gone
    rows: list[TaskRow]  # operator tasks, in chain order

    @property
    def finished(self) -> list[float]:
        return [row.finished_at.timestamp() for row in self.rows if row.finished_at]

    @property
    def hops(self) -> list[float]:
        """``finished_at[n+1] - finished_at[n]`` along the chain, in seconds."""
        return [after - before for before, after in itertools.pairwise(self.finished)]

    def steady_hops(self) -> list[float]:
        """The hops but the one across the signal."""
        pairs = itertools.pairwise(self.finished)
        return [b - a for a, b in pairs if not a <= self.signalled_at < b]

    @property
    def signal_to_next_seconds(self) -> float:
        """The signal to the first task completed after it (by the new active executor)."""
        return min(t for t in self.finished if t > self.signalled_at) - self.signalled_at

    @property
    def reruns(self) -> int:
        """Tasks dispatched more than once (a lease token above 1)."""
        return sum(1 for row in self.rows if row.lease_token != 1)


def active_executor(executors: Sequence[Service]) -> Service | None:
    """The one executor whose gauge says it is active (None unless exactly one does)."""
    gauges = [
        metric_total(read_metrics(e.metrics_port), "tickwork_executor_active") for e in executors
    ]
    active = [e for e, gauge in zip(executors, gauges, strict=True) if gauge == 1]
    if len(active) != 1 or any(gauge is None for gauge in gauges):
        return None
    return active[0]


def warm_up(cluster: Cluster, executors: Sequence[Service], agents: Sequence[Service]) -> None:
    """Run small fan-outs until every agent has run a task: the services are ready."""
    for round_number in range(1, WARMUP_ROUNDS + 1):
        attempt = cluster.create_attempt(
            f"warmup_{round_number}", noop_workflow_text(WARMUP_TASKS, parallel=True)
        )
        state = cluster.wait_for_attempt(attempt, cluster.services)
        rows = cluster.operator_tasks(attempt)
        check_succeeded(f"warm-up {round_number}", state, rows, WARMUP_TASKS)
        ran = [
            metric_total(read_metrics(a.metrics_port), "tickwork_agent_tasks_total") for a in agents
        ]
        if all(count for count in ran):
            return
    raise BenchFailed(f"after {WARMUP_ROUNDS} warm-up attempts not every agent had run a task")


def run_handover(cluster: Cluster, executors: list[Service], how: str) -> Handover:
    """Run a chain, stop the active executor half-way through, and put a standby in its
    place once the chain is done (``executors`` is updated)."""
    active: list[Service | None] = [None]

    def one_active() -> bool:
        active[0] = active_executor(executors)
        return active[0] is not None

    wait_until(one_active, START_TIMEOUT_SECONDS, "exactly one active executor", executors)
    stopped = active[0]
    assert stopped is not None
    attempt = cluster.create_attempt(
        f"chain_{how}", noop_workflow_text(CHAIN_TASKS, parallel=False)
    )
    wait_until(
        lambda: cluster.tasks_done(attempt) >= CHAIN_TASKS // 2,
        ATTEMPT_TIMEOUT_SECONDS,
        "half of the chain",
        executors,
        POLL_SECONDS,
    )
    signalled_at, signalled = time.time(), time.monotonic()
    if how == "sigterm":
        stopped.process.send_signal(signal.SIGTERM)  # the main process, as tini passes it on
    else:
        stopped.signal_group(signal.SIGKILL)
    exit_seconds = wait_exit(stopped) - signalled
    executors.remove(stopped)
    state = cluster.wait_for_attempt(attempt, executors)
    rows = cluster.operator_tasks(attempt)
    check_succeeded(f"chain_{how}", state, rows, CHAIN_TASKS)
    standby = cluster.start_executor()
    executors.append(standby)
    wait_until(
        lambda: read_metrics(standby.metrics_port) is not None and one_active(),
        START_TIMEOUT_SECONDS,
        "the new executor to stand by",
        executors,
    )
    return Handover(how, signalled_at, exit_seconds, rows)


def describe_handover(run: Handover) -> str:
    return (
        f"(1) {run.how} of the active executor: largest gap {1000 * max(run.hops):.0f} ms, "
        f"signal to the next task done {1000 * run.signal_to_next_seconds:.0f} ms, old "
        f"process gone after {1000 * run.exit_seconds:.0f} ms, {run.reruns} tasks run again"
    )


# --- (2) agent drain -------------------------------------------------------------------------


@dataclass(frozen=True)
class Drain:
    """A busy agent's and an idle agent's SIGTERM to exit."""

    busy_seconds: float
    busy_remaining_seconds: float  # what was left of the task's sleep at the signal
    busy_exit_code: int
    applied_once: bool
    idle_seconds: float
    idle_exit_code: int


def drain_text(ledger: Path) -> str:
    """One task on the drain queue that notes its start and end around a sleep."""
    command = (
        f"echo start $(date +%s.%N) >> {ledger}; sleep {DRAIN_TASK_SECONDS:g}; "
        f"echo end $(date +%s.%N) >> {ledger}"
    )
    return f'+sleep:\n  _queue: {DRAIN_QUEUE}\n  sh>: "{command}"\n'


def ledger_lines(ledger: Path, word: str) -> list[float]:
    """The times noted with ``word`` in the ledger, in unix seconds."""
    try:
        text = ledger.read_text()
    except FileNotFoundError:
        return []
    return [float(line.split()[1]) for line in text.splitlines() if line.startswith(word + " ")]


def run_drain(cluster: Cluster, executors: Sequence[Service]) -> Drain:
    """SIGTERM an agent running a 2 s task, then an idle one; time each to its exit."""
    ledger = cluster.work_dir / "drain-ledger.txt"
    busy = cluster.start_agent(DRAIN_QUEUE)
    cluster.wait_ready(busy)
    attempt = cluster.create_attempt("drain", drain_text(ledger))
    wait_until(
        lambda: bool(ledger_lines(ledger, "start")),
        START_TIMEOUT_SECONDS,
        "the drain task to start",
        [*executors, busy],
        POLL_SECONDS,
    )
    signalled_at, signalled = time.time(), time.monotonic()
    busy.process.send_signal(signal.SIGTERM)
    busy_seconds = wait_exit(busy) - signalled
    remaining = ledger_lines(ledger, "start")[0] + DRAIN_TASK_SECONDS - signalled_at
    state = cluster.wait_for_attempt(attempt, executors)
    rows = cluster.operator_tasks(attempt)
    check_succeeded("drain", state, rows, 1)
    applied_once = (
        rows[0].lease_token == 1
        and cluster.applied_tokens(rows[0].id) == [1]
        and len(ledger_lines(ledger, "start")) == len(ledger_lines(ledger, "end")) == 1
    )
    idle = cluster.start_agent(DRAIN_QUEUE)
    cluster.wait_ready(idle)
    signalled = time.monotonic()
    idle.process.send_signal(signal.SIGTERM)
    idle_seconds = wait_exit(idle) - signalled
    return Drain(
        busy_seconds=busy_seconds,
        busy_remaining_seconds=remaining,
        busy_exit_code=busy.process.returncode,
        applied_once=applied_once,
        idle_seconds=idle_seconds,
        idle_exit_code=idle.process.returncode,
    )


def describe_drain(drain: Drain) -> str:
    once = "applied once" if drain.applied_once else "NOT applied exactly once"
    return (
        f"(2) agent drain: busy agent gone {drain.busy_seconds:.2f} s after SIGTERM "
        f"({drain.busy_remaining_seconds:.2f} s of its task were left; result {once}; "
        f"exit {drain.busy_exit_code}), idle agent {drain.idle_seconds:.2f} s "
        f"(exit {drain.idle_exit_code})"
    )


# --- the whole run -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    handovers: list[Handover]
    drain: Drain
    scheduler: SchedulerHandover
    wall_seconds: float


def run_all(server_url: str, redis_url: str, err: Console) -> Results:
    """Run the three parts in a temporary directory, kept (with the logs) after a failure."""
    work_dir = Path(tempfile.mkdtemp(prefix="tickwork-bench-failover-"))
    try:
        results = run_parts(server_url, redis_url, work_dir, err)
    except BenchFailed:
        err.print(f"service logs kept in {work_dir}", highlight=False, soft_wrap=True)
        raise
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    shutil.rmtree(work_dir, ignore_errors=True)
    return results


def run_parts(server_url: str, redis_url: str, work_dir: Path, err: Console) -> Results:
    """The executors and agents for (1) and (2), then only the schedulers for (3), so that
    the attempts the schedules create are not run."""
    started = time.perf_counter()

    def say(line: str) -> None:
        err.print(line, highlight=False, soft_wrap=True)

    with ExitStack() as stack:
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url))  # fails early if unreachable
        with ExitStack() as part:
            cluster = Cluster(url, (redis_url, prefix), work_dir / "workers")
            part.callback(cluster.close)
            part.enter_context(running(cluster.services))
            executors = [cluster.start_executor(), cluster.start_executor()]
            agents = [cluster.start_agent() for _ in range(AGENTS)]
            warm_up(cluster, executors, agents)
            say(f"services ready: two executors and {AGENTS} agents")
            handovers = []
            for how in ("sigterm", "sigkill"):
                handovers.append(run_handover(cluster, executors, how))
                say(describe_handover(handovers[-1]))
            drain = run_drain(cluster, executors)
            say(describe_drain(drain))
        with ExitStack() as part:
            cluster = Cluster(url, (redis_url, prefix), work_dir / "schedulers")
            part.callback(cluster.close)
            part.enter_context(running(cluster.services))
            scheduler = run_scheduler_handover(cluster, say)
            say(describe_scheduler(scheduler))
    return Results(handovers, drain, scheduler, time.perf_counter() - started)


def figures(results: Results) -> dict[str, Any]:
    """The JSON figures: the headline ones first, then what supports them."""
    by_how = {run.how: run for run in results.handovers}
    steady = [hop for run in results.handovers for hop in run.steady_hops()]
    drain, scheduler = results.drain, results.scheduler
    out: dict[str, Any] = {
        "executor_handover_sigterm_gap_ms": round(1000 * max(by_how["sigterm"].hops), 1),
        "executor_handover_sigkill_gap_ms": round(1000 * max(by_how["sigkill"].hops), 1),
        "chain_hop_p50_ms": round(1000 * percentile(steady, 0.5), 2),
        "agent_drain_busy_s": round(drain.busy_seconds, 3),
        "agent_drain_idle_s": round(drain.idle_seconds, 3),
        "scheduler_handover_lag_max_ms": round(1000 * max(scheduler.lags), 1),
        "scheduler_handover_lag_p50_ms": round(1000 * percentile(scheduler.lags, 0.5), 1),
        "scheduler_handover_duplicates": scheduler.duplicates,
        "scheduler_handover_missing": scheduler.missing,
        "peer": None,
    }
    for how, run in by_how.items():
        out[f"executor_handover_{how}_signal_to_next_ms"] = round(
            1000 * run.signal_to_next_seconds, 1
        )
        out[f"executor_handover_{how}_exit_ms"] = round(1000 * run.exit_seconds, 1)
        out[f"executor_handover_{how}_tasks_rerun"] = run.reruns
    out["chain_hop_p99_ms"] = round(1000 * percentile(steady, 0.99), 2)
    out["chain_tasks"] = CHAIN_TASKS
    out["agent_drain_busy_remaining_s"] = round(drain.busy_remaining_seconds, 3)
    out["agent_drain_busy_applied_once"] = drain.applied_once
    out["agent_drain_exit_codes"] = [drain.busy_exit_code, drain.idle_exit_code]
    out["scheduler_handover_near_switch_lag_max_ms"] = round(
        1000 * max(scheduler.near_switch_lags, default=0.0), 1
    )
    out["scheduler_handover_sessions"] = scheduler.sessions
    out["scheduler_stop_exit_ms"] = round(1000 * scheduler.exit_seconds, 1)
    out["scheduler_schedules"] = SCHEDULES
    out["schedule"] = SCHEDULE_EVERY
    out["wall_seconds"] = round(results.wall_seconds, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    results = run_guarded(lambda: run_all(server_url, redis_url, err), server_url, redis_url, err)
    if isinstance(results, int):
        return results
    print(json.dumps(figures(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
