"""Distributed dispatch: no-op tasks through the executor, Celery and agents, and raw Celery.

Four parts, one after another so that none takes CPU from another while it is timed.
Two are tickwork's, two are the raw Celery baseline's, on two ``celery worker`` processes
(prefork, one worker process each) with the settings of tickwork's agents (JSON only,
``task_acks_late``, prefetch 1, no remote control, no events, no gossip, mingle or
heartbeat) and a Redis result backend (bench/_raw_celery.py runs them):

(a) fan-out: one group with ``_parallel: true`` and 2,000 ``echo>: x`` tasks through a
    real ``tickwork executor`` and two ``tickwork agent --concurrency 1`` processes. The
    clock runs from just before the transaction that creates the attempt until this
    process sees the attempt in ``success`` in the store (polled every 10 ms);
(b) raw Celery fan-out: 2,000 no-op tasks sent with ``delay()`` and waited for through
    the result backend. The clock runs from the first send to the last result
    (bench/_raw_celery_app.py, run as a child process);
(c) chain: one group of 200 ``echo>: x`` tasks, each waiting for the one before, on the
    same services. The figure is the per-hop latency; see below;
(e) raw Celery chain: 200 no-op links, each of which sends the next from inside its worker
    once its no-op has ended (``apply_async`` in the task's body, not a canvas chain), as
    the executor sends a chain's next task once the result of the one before is in. The
    figure is its hop, measured as tickwork's (below), to which tickwork's is compared.

A round runs the four parts, tickwork's and raw Celery's alternately: (a) (b) (c) (e) in
odd rounds, (b) (a) (e) (c) in even ones, so that the machine's drift through a run weighs
on both sides alike. ``--repeat N`` runs N rounds (default :data:`DEFAULT_ROUNDS`); every
figure is the median of its rounds' values, and each ratio the median of the rounds' own
ratios (each taken between runs a few seconds apart). Both sides' services stay up,
idle, while the other side runs.

**How a hop is measured.** ``tasks.started_at`` is stamped when the executor queues a task
(READY -> QUEUED, before it publishes the message) and ``finished_at`` when it applies
the task's result. Both are the ``now`` of the executor pass that did it, and one pass
applies a result, promotes the next task of the chain and queues it. So ``started_at``
of task n+1 normally equals ``finished_at`` of task n: that difference is always about 0
and says nothing. The hop is therefore ``finished_at[n+1] - finished_at[n]``: from the
pass that applied one result to the pass that applied the next. It covers everything
between one no-op and the next: the pass's own statements and commit, publishing, the
broker, the agent taking and running the message (about a millisecond for ``echo>`` and
its log), the result coming back and the executor waking up for it. That is the cost of
one link of a chain; on average it exceeds "one task's end to the next one's start" by
the no-op's run time. The
largest ``started_at[n+1] - finished_at[n]`` is reported too (``hop_queue_gap_max_ms``);
it is 0 when each next task is queued in the pass that saw its upstream end.

The raw Celery chain's hop is the same span: from the moment one link's end is known where
the next link is sent from, to the same moment of the next link. Each link takes its end
(``time.time()``) when its no-op is done, just before it sends the next, and returns it
with its start as its result; the hop is ``end[n+1] - end[n]``: sending, the broker, the
other worker taking the message, and the next no-op. In tickwork the result also has to
travel back to the executor, which sends the next task; in raw Celery the link that ended
sends it itself, so nothing comes back. ``celery_chain_dispatch_mean_ms`` is the mean of
``start[n+1] - end[n]``, to set beside tickwork's dispatch part.

To show where a hop goes, the chain runs with a tap on the agents' event stream
(bench/_event_tap.py): the agents' own start and end of each task split the hop into
dispatch (executor pass, publish, broker, agent pick-up), run (the no-op) and report
(event stream, executor wake-up), which add up to it; and task n's end to task n+1's
start on the agents is reported as ``hop_agent_gap_*``.

Before the clock starts, warm-up attempts of 10 tasks run until both agents have run a
task (seen on their metrics endpoints), so that start-up is not timed. The raw workers
are likewise waited for (their ``worker_ready`` signal), and each raw client warms them
up first: 20 tasks before a fan-out, a chain of 10 links before a chain.

Everything runs in a throwaway database ``tickwork_bench_<hex>`` on
TICKWORK_BENCH_DATABASE_URL (default: the local server), dropped at the end, and under a
Redis prefix of its own on TICKWORK_BENCH_REDIS_URL (default: the local server), whose
keys are deleted at the end. Services are OS processes in their own process groups, with
their logs in a temporary directory; they are stopped (SIGTERM, then SIGKILL) even after
a failure or Ctrl-C.

**CPU per task.** A service's CPU is the user and system time of every process in its
process group (read from ``/proc/<pid>/stat``, all threads included, plus what its exited
children had used once reaped). For the fan-out and the chain it is read just before the
transaction that creates the attempt and again when the attempt is seen in ``success``,
and divided by the attempt's tasks. For the raw workers it is read before the raw client
starts and after it ends, and divided by every task it sent (its warm-up included).

**More executors** (``--executors 1,2,3``, off by default). After the rounds, for
each count N: a fresh set of N ``tickwork executor`` processes (sharing the attempts'
partitions) and the same two agents runs the fan-out's tasks spread over
:data:`SPREAD_ATTEMPTS` attempts (one per partition: a single attempt is one partition,
run by one executor), created in one transaction; the clock runs until every one of them
is in ``success``. Reported per N: tasks/s, and CPU ms per task of each executor process,
of the executors together and of the agents (``executors_<N>_*`` keys).

**Logs.** The agents stream each task's log through Redis and the executor writes it
into the store (``task_log_chunks``) in the pass that reads it: no service here writes a
file per task. After each attempt (outside its timing) the benchmark checks that every
run's log is whole in the store (:func:`check_attempt`).

Progress goes to stderr (a bar on a terminal, one line per part
otherwise); the last stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from _event_tap import AgentTimes, EventTap
from _raw_celery import RawCelery, RawChain, RawResult, services_cpu_seconds
from _services import (
    BenchFailed,
    Service,
    metric_total,
    read_metrics,
    redis_prefix,
    run_guarded,
    running,
    start_executors_and_agents,
    stop_services,
    wait_until,
)
from _stores import (
    noop_workflow_text,
    percentile,
    run_request,
    throwaway_database,
)
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import Engine

from tickwork.services.compose.embedded import create_run_attempt
from tickwork.shared.clock import SystemClock
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.logs import RunLog, list_run_logs
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.sessions import get_attempt_state
from tickwork.shared.store.tasks import TaskRow, list_attempt_tasks

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
PARALLEL_TASKS = 2000
CHAIN_TASKS = 200
AGENTS = 2  # each with --concurrency 1, as the raw workers
WARMUP_TASKS = 10
WARMUP_ROUNDS = 5  # warm-up attempts at most, until every agent has run a task
DEFAULT_ROUNDS = 3  # rounds of the four parts; `make bench` runs these (about a minute)
ATTEMPT_POLL_SECONDS = 0.01
START_TIMEOUT_SECONDS = 60.0  # a service up, a worker ready, a warm-up attempt done
ATTEMPT_TIMEOUT_SECONDS = 300.0  # a timed attempt, or the raw client's batch

# Targets; see bench/README.md. The hop's are ratios to raw Celery's chain in the same run.
TARGET_WALL_TIME_RATIO = 1.2
TARGET_HOP_RATIO_TO_CELERY = 2.0  # both the p50 and the p99
TARGET_EXECUTOR_CPU_MS_PER_TASK = 1.0
SPREAD_ATTEMPTS = 16  # the executors' default partition count: one attempt per partition


# --- processes and stores: bench/_services.py ----------------------------------------------


# --- (a) and (c) tickwork ----------------------------------------------------------------


@dataclass(frozen=True)
class AttemptRun:
    """One timed attempt: its wall time and its operator tasks."""

    name: str
    tasks: int
    created_at: float  # time.time() just before the creating transaction
    wall_seconds: float  # that transaction's start -> success seen in the store
    rows: list[TaskRow]  # operator tasks, in definition order
    agent_metrics: dict[str, float]  # both agents' growth over the attempt (empty: unread)
    executor_metrics: dict[str, float]  # the executor's growth over the attempt (the same)
    agent_times: dict[int, AgentTimes]  # by task id, from the event tap (empty: not tapped)
    executor_cpu_seconds: float  # the executor's process group over the attempt
    agent_cpu_seconds: float  # every agent's process group over the attempt

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_seconds

    @property
    def executor_cpu_ms_per_task(self) -> float:
        return 1000 * self.executor_cpu_seconds / self.tasks

    @property
    def agent_cpu_ms_per_task(self) -> float:
        return 1000 * self.agent_cpu_seconds / self.tasks

    @property
    def pickup_ms(self) -> float:
        """From the attempt's creation to its first task queued (the executor noticing it)."""
        first = min(row.started_at for row in self.rows if row.started_at is not None)
        return 1000 * (first.timestamp() - self.created_at)


class Tickwork:
    """The running services and what is needed to push work through them."""

    def __init__(
        self,
        engine: Engine,
        project_dir: Path,
        services: list[Service],
        redis_at: tuple[str, str],  # URL and key prefix
        executors: int = 1,
    ) -> None:
        self.engine = engine
        self.project_dir = project_dir
        self.redis_url, self.redis_prefix = redis_at
        self.services = services
        self.executor = services[0]
        self.executors = services[:executors]
        self.agents = services[executors:]

    @classmethod
    def start(
        cls,
        services: list[Service],
        url: str,
        redis_url: str,
        prefix: str,
        work_dir: Path,
        executors: int = 1,
    ) -> Tickwork:
        """Migrate the database, then start ``executors`` ``tickwork executor`` processes
        and the agents, appending each to ``services`` as it starts."""
        engine = open_migrated_store(url)
        start_executors_and_agents(
            services, url, redis_url, prefix, work_dir, executors=executors, agents=AGENTS
        )
        project_dir = work_dir / "project"
        project_dir.mkdir()
        return cls(engine, project_dir, services, (redis_url, prefix), executors)

    def wait_for_partitions(self) -> None:
        """Wait until every executor holds some of the partitions and all are held."""

        def held() -> list[float]:
            found = [read_metrics(e.metrics_port) for e in self.executors]
            return [metric_total(m, "tickwork_executor_partitions") if m else 0.0 for m in found]

        wait_until(
            lambda: all(held()) and sum(held()) == SPREAD_ATTEMPTS,
            START_TIMEOUT_SECONDS,
            "the executors to share the partitions out",
            self.services,
        )

    def run_spread(self, name: str, tasks: int, timeout: float) -> SpreadRun:
        """``tasks`` echo> tasks spread over :data:`SPREAD_ATTEMPTS` parallel attempts
        created in one transaction; wait until every one succeeded."""
        spread = [
            tasks // SPREAD_ATTEMPTS + (i < tasks % SPREAD_ATTEMPTS) for i in range(SPREAD_ATTEMPTS)
        ]
        sizes = [size for size in spread if size]
        url = self.engine.url.render_as_string(hide_password=False)
        requests = [
            run_request(url, self.project_dir, f"{name}_{i}", noop_workflow_text(size, True))
            for i, size in enumerate(sizes)
        ]
        cpu_before = [services_cpu_seconds([e]) for e in self.executors]
        agents_before = services_cpu_seconds(self.agents)
        started = time.perf_counter()
        with self.engine.begin() as conn:
            now = SystemClock().now()
            ids = [create_run_attempt(conn, request, now).attempt_id for request in requests]
        states = [self.wait_for_attempt(attempt_id, timeout) for attempt_id in ids]
        wall = time.perf_counter() - started
        cpu = [
            services_cpu_seconds([e]) - b for e, b in zip(self.executors, cpu_before, strict=True)
        ]
        agents = services_cpu_seconds(self.agents) - agents_before
        for attempt_id, state, size in zip(ids, states, sizes, strict=True):
            with self.engine.connect() as conn:
                rows = [r for r in list_attempt_tasks(conn, attempt_id) if not r.is_group]
                logs = list_run_logs(conn, attempt_id)
            check_attempt(f"{name} attempt {attempt_id}", size, state, rows, logs)
        return SpreadRun(len(self.executors), sum(sizes), wall, cpu, agents)

    def warm_up(self, err: Console) -> None:
        """Run small attempts until every agent has run a task: the services are ready."""
        executor_port = self.executor.metrics_port
        wait_until(
            lambda: read_metrics(executor_port) is not None,
            START_TIMEOUT_SECONDS,
            "the executor's metrics endpoint",
            self.services,
        )
        done: list[float | None] = []
        for round_number in range(1, WARMUP_ROUNDS + 1):
            self.run_attempt(f"warmup_{round_number}", WARMUP_TASKS, True, START_TIMEOUT_SECONDS)
            done = [self.agent_tasks(agent) for agent in self.agents]
            if all(count is not None and count > 0 for count in done):
                return
            shown = ["no metrics" if count is None else f"{count:g}" for count in done]
            err.print(f"  warm-up {round_number}: tasks run per agent: {', '.join(shown)}")
        raise BenchFailed(
            f"after {WARMUP_ROUNDS} warm-up attempts not every agent had run a task "
            f"(tickwork_agent_tasks_total per agent: {done})"
        )

    @staticmethod
    def agent_tasks(agent: Service) -> float | None:
        """Task runs the agent has ended (0 before the first); None if it does not answer."""
        metrics = read_metrics(agent.metrics_port)
        if metrics is None:
            return None
        return metric_total(metrics, "tickwork_agent_tasks_total") or 0.0

    def run_attempt(
        self, name: str, tasks: int, parallel: bool, timeout: float, *, tap: bool = False
    ) -> AttemptRun:
        """Create an attempt of ``tasks`` echo> tasks and wait until it succeeded; with
        ``tap``, note the agents' start and end of each task from their events."""
        request = run_request(
            self.engine.url.render_as_string(hide_password=False),
            self.project_dir,
            name,
            noop_workflow_text(tasks, parallel),
        )
        metrics_before = self.agent_metrics()
        executor_before = read_metrics(self.executor.metrics_port)
        with ExitStack() as stack:
            events = (
                stack.enter_context(EventTap(self.redis_url, self.redis_prefix)) if tap else None
            )
            cpu_before = self.cpu_seconds()
            created_at = time.time()
            started = time.perf_counter()
            with self.engine.begin() as conn:
                attempt_id = create_run_attempt(conn, request, SystemClock().now()).attempt_id
            state = self.wait_for_attempt(attempt_id, timeout)
            ended = time.perf_counter()
            cpu_after = self.cpu_seconds()
        metrics_after = self.agent_metrics()
        executor_after = read_metrics(self.executor.metrics_port)
        with self.engine.connect() as conn:
            rows = [r for r in list_attempt_tasks(conn, attempt_id) if not r.is_group]
            logs = list_run_logs(conn, attempt_id)
        rows.sort(key=lambda r: r.position)
        check_attempt(name, tasks, state, rows, logs)
        return AttemptRun(
            name=name,
            tasks=tasks,
            created_at=created_at,
            wall_seconds=ended - started,
            rows=rows,
            agent_metrics=metric_differences(metrics_before, metrics_after),
            executor_metrics=metric_differences(executor_before, executor_after),
            agent_times={} if events is None else {r.id: events.times(r.id) for r in rows},
            executor_cpu_seconds=cpu_after[0] - cpu_before[0],
            agent_cpu_seconds=cpu_after[1] - cpu_before[1],
        )

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds used so far by the executor and by all agents together."""
        return services_cpu_seconds([self.executor]), services_cpu_seconds(self.agents)

    def agent_metrics(self) -> dict[str, float] | None:
        """Every agent's metrics, summed by series; None if one cannot be read."""
        summed: dict[str, float] = {}
        for agent in self.agents:
            metrics = read_metrics(agent.metrics_port)
            if metrics is None:
                return None
            for key, value in metrics.items():
                summed[key] = summed.get(key, 0.0) + value
        return summed

    def wait_for_attempt(self, attempt_id: int, timeout: float) -> AttemptState:
        """Poll the attempt's state until it is done; fail if a service dies or on timeout."""
        deadline = time.monotonic() + timeout
        next_check = 0.0
        while True:
            with self.engine.connect() as conn:
                state = get_attempt_state(conn, attempt_id)
            if state.is_done:
                return state
            now = time.monotonic()
            if now >= next_check:
                for service in self.services:
                    service.check_alive()
                next_check = now + 0.5
            if now > deadline:
                raise BenchFailed(
                    f"attempt {attempt_id} still {state.value} after {timeout:.0f} s; "
                    f"executor log:\n{self.executor.log_tail()}"
                )
            time.sleep(ATTEMPT_POLL_SECONDS)

    def close(self) -> None:
        self.engine.dispose()


@dataclass(frozen=True)
class SpreadRun:
    """A fan-out spread over several attempts, run by ``executors`` executor processes."""

    executors: int
    tasks: int
    wall_seconds: float
    executor_cpu_seconds: list[float]  # each executor's process group
    agent_cpu_seconds: float

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_seconds

    def cpu_ms_per_task(self, seconds: float) -> float:
        return 1000 * seconds / self.tasks


def run_executor_counts(
    counts: Sequence[int], url: str, redis_url: str, tasks: int, work_dir: Path, err: Console
) -> list[SpreadRun]:
    """For each count, fresh executors and agents running one spread fan-out (a count
    given twice runs twice, e.g. ``1,2,3,3,2,1``; its keys hold the last run)."""
    runs = []
    for index, count in enumerate(counts):
        with ExitStack() as stack:
            prefix = stack.enter_context(redis_prefix(redis_url))
            services = stack.enter_context(running([]))
            directory = work_dir / f"executors-{index}-{count}"
            directory.mkdir()
            tickwork = Tickwork.start(services, url, redis_url, f"{prefix}tw:", directory, count)
            stack.callback(tickwork.close)
            tickwork.warm_up(err)
            tickwork.wait_for_partitions()
            run = tickwork.run_spread(f"spread_{count}", tasks, ATTEMPT_TIMEOUT_SECONDS)
            err.print(describe_spread(run), highlight=False, soft_wrap=True)
            runs.append(run)
    return runs


def describe_spread(run: SpreadRun) -> str:
    each = ", ".join(f"{run.cpu_ms_per_task(s):.2f}" for s in run.executor_cpu_seconds)
    return (
        f"(d) {run.executors} executor(s): {run.tasks:,} tasks in {SPREAD_ATTEMPTS} attempts "
        f"in {run.wall_seconds:.2f} s ({run.tasks_per_s:,.0f} tasks/s; CPU per task: "
        f"executors {each} ms, agents {run.cpu_ms_per_task(run.agent_cpu_seconds):.2f} ms)"
    )


def spread_figures(runs: Sequence[SpreadRun]) -> dict[str, Any]:
    """The ``executors_<N>_*`` figures of each count."""
    out: dict[str, Any] = {}
    for run in runs:
        key = f"executors_{run.executors}"
        each = [round(run.cpu_ms_per_task(s), 2) for s in run.executor_cpu_seconds]
        out[f"{key}_tasks_per_s"] = round(run.tasks_per_s, 1)
        out[f"{key}_wall_seconds"] = round(run.wall_seconds, 3)
        out[f"{key}_executor_cpu_ms_per_task"] = round(sum(each), 2)
        out[f"{key}_executor_cpu_ms_per_task_each"] = each
        out[f"{key}_agent_cpu_ms_per_task"] = round(run.cpu_ms_per_task(run.agent_cpu_seconds), 2)
    return out


def check_attempt(
    name: str, tasks: int, state: AttemptState, rows: list[TaskRow], logs: list[RunLog]
) -> None:
    """Fail unless the attempt succeeded, ran each of its tasks exactly once, and every
    run's log is whole in the store."""
    problems = []
    if state is not AttemptState.SUCCESS:
        problems.append(f"attempt ended {state.value}")
    if len(rows) != tasks:
        problems.append(f"{len(rows)} tasks stored, {tasks} expected")
    failed = [r for r in rows if r.state is not TaskState.SUCCESS]
    if failed:
        examples = [(r.full_name, r.state.value, r.error) for r in failed[:3]]
        problems.append(f"{len(failed)} tasks not in success, e.g. {examples}")
    rerun = [r.full_name for r in rows if r.lease_token != 1]
    if rerun:
        problems.append(f"{len(rerun)} tasks dispatched more than once, e.g. {rerun[:3]}")
    unstored = [log.task_full_name for log in logs if not log.stored_bytes or log.missing_bytes]
    if len(logs) != tasks or unstored:
        problems.append(f"{len(logs)} run logs for {tasks} tasks; not whole: {unstored[:3]}")
    if problems:
        raise BenchFailed(f"{name}: " + "; ".join(problems))


def metric_differences(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float]:
    """What each metric grew by over an attempt (empty if either reading is missing)."""
    if before is None or after is None:
        return {}
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def chain_hops(rows: list[TaskRow]) -> tuple[list[float], list[float]]:
    """Hop seconds (``finished_at[n+1] - finished_at[n]``), and the queue gaps
    (``started_at[n+1] - finished_at[n]``), along a chain in definition order."""
    hops: list[float] = []
    gaps: list[float] = []
    for before, after in itertools.pairwise(rows):
        assert before.finished_at and after.finished_at and after.started_at
        hops.append((after.finished_at - before.finished_at).total_seconds())
        gaps.append((after.started_at - before.finished_at).total_seconds())
    return hops, gaps


@dataclass(frozen=True)
class HopParts:
    """Each hop of a chain split in three at the agents' start and end of the later task,
    over the hops whose task the event tap saw start and end; the parts add up to the hop.

    ``dispatch``: the executor's pass that applied task n's result (from its ``now``),
    its commit, publishing, the broker and the agent taking task n+1, to the operator's
    start. ``run``: the operator's start to its end on the agent. ``report``: the end,
    through the event stream, to the ``now`` of the executor pass that applied it.
    ``agent_gap`` is task n's end to task n+1's start, both on the agents' clock.
    """

    dispatch: list[float]
    run: list[float]
    report: list[float]
    agent_gap: list[float]


def hop_parts(run: AttemptRun) -> HopParts | None:
    """The chain's hops in parts, from the event tap; None if it saw no whole hop."""
    parts = HopParts([], [], [], [])
    for before, after in itertools.pairwise(run.rows):
        seen_before, seen = run.agent_times.get(before.id), run.agent_times.get(after.id)
        if seen is None or seen.started_at is None or seen.finished_at is None:
            continue
        assert before.finished_at and after.finished_at
        parts.dispatch.append(seen.started_at - before.finished_at.timestamp())
        parts.run.append(seen.finished_at - seen.started_at)
        parts.report.append(after.finished_at.timestamp() - seen.finished_at)
        if seen_before is not None and seen_before.finished_at is not None:
            parts.agent_gap.append(seen.started_at - seen_before.finished_at)
    return parts if parts.dispatch and parts.agent_gap else None


def publish_to_start_mean_ms(run: AttemptRun) -> float | None:
    """The agents' mean time from a task's publishing to its start over the attempt
    (``tickwork_dispatch_start_latency_seconds``), if they report it."""
    total = run.agent_metrics.get("tickwork_dispatch_start_latency_seconds_sum")
    count = run.agent_metrics.get("tickwork_dispatch_start_latency_seconds_count")
    if total is None or not count:
        return None
    return 1000 * total / count


# --- the whole run -----------------------------------------------------------------------


_Tickwork = TypeVar("_Tickwork")
_Raw = TypeVar("_Raw")


@dataclass(frozen=True)
class Round:
    """One round: each of the four parts once."""

    raw: RawResult
    parallel: AttemptRun
    raw_chain: RawChain
    chain: AttemptRun


@dataclass(frozen=True)
class Results:
    """Every round, and the spread fan-outs of ``--executors``."""

    rounds: list[Round]
    spread: list[SpreadRun] = dataclasses.field(default_factory=list)


class Steps:
    """The progress bar on a terminal, and one line per part on stderr."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.bar = progress.add_task("starting", total=total)

    def start(self, description: str) -> None:
        self.progress.update(self.bar, description=description)

    def end(self, line: str) -> None:
        self.say(line)
        self.progress.advance(self.bar)

    def say(self, line: str) -> None:
        self.progress.console.print(line, highlight=False, soft_wrap=True)


def run_all(
    server_url: str,
    redis_url: str,
    sizes: tuple[int, int],
    rounds: int,
    err: Console,
    executor_counts: Sequence[int] = (),
) -> Results:
    """Run the rounds (and one spread fan-out per executor count) in a temporary
    directory, kept (with the logs) after a failure."""
    work_dir = Path(tempfile.mkdtemp(prefix="tickwork-bench-dispatch-"))
    try:
        results = run_parts(server_url, redis_url, sizes, rounds, work_dir, err, executor_counts)
    except BenchFailed:
        err.print(f"service logs kept in {work_dir}", highlight=False, soft_wrap=True)
        raise
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    shutil.rmtree(work_dir, ignore_errors=True)
    return results


def run_parts(
    server_url: str,
    redis_url: str,
    sizes: tuple[int, int],
    rounds: int,
    work_dir: Path,
    err: Console,
    executor_counts: Sequence[int] = (),
) -> Results:
    """Start tickwork's services and the raw workers, run ``rounds`` rounds of the four
    parts, then the spread fan-out with each of ``executor_counts`` executors."""
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with ExitStack() as stack:
        progress = stack.enter_context(
            Progress(*columns, console=err, disable=not err.is_terminal, refresh_per_second=4)
        )
        steps = Steps(progress, total=1 + 4 * rounds)
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url))  # fails early if unreachable

        steps.start("starting the executor, the agents and the raw workers")
        services = stack.enter_context(running([]))
        tickwork = Tickwork.start(services, url, redis_url, f"{prefix}tw:", work_dir)
        stack.callback(tickwork.close)
        workers = stack.enter_context(running([]))
        raw = RawCelery.start(
            workers, redis_url, f"{prefix}raw:", work_dir, ATTEMPT_TIMEOUT_SECONDS
        )
        tickwork.warm_up(err)
        steps.end(f"services ready: an executor, {AGENTS} agents and {AGENTS} raw workers")

        done = [run_round(number, sizes, tickwork, raw, steps) for number in range(1, rounds + 1)]
        spread: list[SpreadRun] = []
        if executor_counts:
            stop_services([*services, *workers])  # nothing else runs while these are timed
            services.clear()
            workers.clear()
            steps.start(f"(d) executors {executor_counts}")
            spread = run_executor_counts(
                executor_counts, url, redis_url, sizes[0], work_dir, progress.console
            )
    return Results(done, spread)


def run_round(
    number: int, sizes: tuple[int, int], tickwork: Tickwork, raw: RawCelery, steps: Steps
) -> Round:
    """The four parts: tickwork's fan-out and chain before raw Celery's in odd rounds,
    after them in even rounds."""
    tasks, links = sizes

    def tickwork_fanout() -> AttemptRun:
        steps.start(f"(a) tickwork fan-out, round {number}")
        run = tickwork.run_attempt(f"parallel_{number}", tasks, True, ATTEMPT_TIMEOUT_SECONDS)
        steps.end(describe_parallel(run))
        return run

    def raw_fanout() -> RawResult:
        steps.start(f"(b) raw Celery fan-out, round {number}")
        run = raw.run_fanout(tasks)
        steps.end(describe_raw(run))
        return run

    def tickwork_chain() -> AttemptRun:
        steps.start(f"(c) tickwork chain, round {number}")
        run = tickwork.run_attempt(
            f"chain_{number}", links, False, ATTEMPT_TIMEOUT_SECONDS, tap=True
        )
        steps.end(describe_chain(run))
        return run

    def raw_chain() -> RawChain:
        steps.start(f"(e) raw Celery chain, round {number}")
        run = raw.run_chain(links)
        steps.end(describe_raw_chain(run))
        return run

    tickwork_first = number % 2 == 1
    parallel, fanout = alternated(tickwork_first, tickwork_fanout, raw_fanout)
    chain, celery_chain = alternated(tickwork_first, tickwork_chain, raw_chain)
    done = Round(fanout, parallel, celery_chain, chain)
    steps.say(describe_round(number, round_figures(done)))
    return done


def alternated(
    tickwork_first: bool, tickwork: Callable[[], _Tickwork], raw: Callable[[], _Raw]
) -> tuple[_Tickwork, _Raw]:
    """Run both, tickwork's first when ``tickwork_first``; (tickwork's run, raw's run)."""
    if tickwork_first:
        ran = tickwork()
        return ran, raw()
    ran_raw = raw()
    return tickwork(), ran_raw


def describe_raw(raw: RawResult) -> str:
    return (
        f"(b) raw Celery fan-out: {raw.tasks:,} tasks in {raw.wall_seconds:.2f} s "
        f"({raw.tasks_per_s:,.0f} tasks/s; sending took {raw.publish_seconds:.2f} s)"
    )


def describe_parallel(run: AttemptRun) -> str:
    return (
        f"(a) tickwork fan-out: {run.tasks:,} tasks in {run.wall_seconds:.2f} s "
        f"({run.tasks_per_s:,.0f} tasks/s; first task queued {run.pickup_ms:.0f} ms after "
        f"the attempt; CPU per task: executor {run.executor_cpu_ms_per_task:.2f} ms, agents "
        f"{run.agent_cpu_ms_per_task:.2f} ms)"
    )


def describe_chain(run: AttemptRun) -> str:
    hops, _ = chain_hops(run.rows)
    line = (
        f"(c) tickwork chain: {run.tasks:,} tasks in {run.wall_seconds:.2f} s, hop "
        f"p50 {1000 * percentile(hops, 0.5):.1f} ms, p99 {1000 * percentile(hops, 0.99):.1f} ms"
    )
    parts = hop_parts(run)
    if parts is None:
        return line + " (the event tap saw no whole hop)"
    means = [1000 * statistics.fmean(v) for v in (parts.dispatch, parts.run, parts.report)]
    return line + (
        f"; mean parts: dispatch {means[0]:.1f} + run {means[1]:.1f} + report {means[2]:.1f} ms;"
        f" agents' end to next start p50 {1000 * percentile(parts.agent_gap, 0.5):.1f} ms"
    )


def describe_raw_chain(run: RawChain) -> str:
    hops = run.hops()
    return (
        f"(e) raw Celery chain: {len(run.links):,} links in {run.wall_seconds:.2f} s, hop "
        f"p50 {1000 * percentile(hops, 0.5):.1f} ms, p99 {1000 * percentile(hops, 0.99):.1f} ms"
        f"; mean end to next start {1000 * statistics.fmean(run.dispatch()):.1f} ms"
    )


def describe_round(number: int, out: dict[str, Any]) -> str:
    return (
        f"round {number}: wall_time_ratio {out['wall_time_ratio']:g}, hop p50 "
        f"{out['hop_p50_ratio_to_celery']:g}x and p99 {out['hop_p99_ratio_to_celery']:g}x "
        "raw Celery's chain"
    )


# The figures listed for each round under "per_round" when there is more than one.
PER_ROUND_KEYS = (
    "wall_time_ratio",
    "hop_p50_ratio_to_celery",
    "hop_p99_ratio_to_celery",
    "hop_p50_ms",
    "hop_p99_ms",
    "celery_chain_hop_p50_ms",
    "celery_chain_hop_p99_ms",
    "tickwork_tasks_per_s",
    "raw_celery_tasks_per_s",
    "executor_cpu_ms_per_task",
)


def figures(results: Results) -> dict[str, Any]:
    """The JSON figures, each the median of its rounds' values (a ratio: of the rounds'
    ratios), the headline ones first; with more than one round, some of each round's."""
    rounds = [round_figures(one) for one in results.rounds]
    keys = dict.fromkeys(key for one in rounds for key in one)  # a tap may miss a round
    out: dict[str, Any] = {
        key: median_figure([one[key] for one in rounds if key in one]) for key in keys
    }
    out["rounds"] = len(rounds)
    if len(rounds) > 1:
        out["per_round"] = {key: [one.get(key) for one in rounds] for key in PER_ROUND_KEYS}
    out.update(spread_figures(results.spread))
    out["meets_targets"] = all(met for *_, met in target_checks(out))
    return out


def median_figure(values: Sequence[float]) -> float:
    """The median; of counts, the lower middle one (a count, for an even number of rounds)."""
    if all(isinstance(value, int) for value in values):
        return statistics.median_low(values)
    return round(statistics.median(values), 3)


def round_figures(one: Round) -> dict[str, Any]:
    """One round's figures: the headline ones first, then what supports them."""
    raw, parallel, chain, raw_chain = one.raw, one.parallel, one.chain, one.raw_chain
    hops, gaps = chain_hops(chain.rows)
    celery_hops = raw_chain.hops()
    p50_ms, p99_ms = 1000 * percentile(hops, 0.5), 1000 * percentile(hops, 0.99)
    celery_p50_ms = 1000 * percentile(celery_hops, 0.5)
    celery_p99_ms = 1000 * percentile(celery_hops, 0.99)
    out: dict[str, Any] = {
        "tickwork_tasks_per_s": round(parallel.tasks_per_s, 1),
        "raw_celery_tasks_per_s": round(raw.tasks_per_s, 1),
        "wall_time_ratio": round(parallel.wall_seconds / raw.wall_seconds, 3),
        "hop_p50_ms": round(p50_ms, 2),
        "hop_p99_ms": round(p99_ms, 2),
        "celery_chain_hop_p50_ms": round(celery_p50_ms, 2),
        "celery_chain_hop_p99_ms": round(celery_p99_ms, 2),
        "hop_p50_ratio_to_celery": round(p50_ms / celery_p50_ms, 3),
        "hop_p99_ratio_to_celery": round(p99_ms / celery_p99_ms, 3),
        "hop_max_ms": round(1000 * max(hops), 2),
        "hop_queue_gap_max_ms": round(1000 * max(gaps), 2),
        "celery_chain_hop_max_ms": round(1000 * max(celery_hops), 2),
        "tickwork_wall_seconds": round(parallel.wall_seconds, 3),
        "tickwork_pickup_ms": round(parallel.pickup_ms, 1),
        "raw_celery_wall_seconds": round(raw.wall_seconds, 3),
        "raw_celery_publish_seconds": round(raw.publish_seconds, 3),
        "chain_wall_seconds": round(chain.wall_seconds, 3),
        "chain_pickup_ms": round(chain.pickup_ms, 1),
        "celery_chain_wall_seconds": round(raw_chain.wall_seconds, 3),
        "tasks": parallel.tasks,
        "chain_tasks": chain.tasks,
        "hop_mean_ms": round(1000 * statistics.fmean(hops), 2),
        "celery_chain_hop_mean_ms": round(1000 * statistics.fmean(celery_hops), 2),
        "celery_chain_dispatch_mean_ms": round(1000 * statistics.fmean(raw_chain.dispatch()), 2),
        "executor_cpu_ms_per_task": round(parallel.executor_cpu_ms_per_task, 2),
        "agent_cpu_ms_per_task": round(parallel.agent_cpu_ms_per_task, 2),
        "celery_worker_cpu_ms_per_task": round(raw.worker_cpu_ms_per_task, 2),
        "chain_executor_cpu_ms_per_task": round(chain.executor_cpu_ms_per_task, 2),
        "chain_agent_cpu_ms_per_task": round(chain.agent_cpu_ms_per_task, 2),
        "celery_chain_worker_cpu_ms_per_link": round(raw_chain.worker_cpu_ms_per_link, 2),
    }
    out.update(hop_part_figures(chain))
    return out


def hop_part_figures(chain: AttemptRun) -> dict[str, Any]:
    """Where tickwork's hop goes: its parts from the event tap, and the agents' pick-up."""
    out: dict[str, Any] = {}
    parts = hop_parts(chain)
    if parts is not None:
        out["hop_agent_gap_p50_ms"] = round(1000 * percentile(parts.agent_gap, 0.5), 2)
        out["hop_agent_gap_p99_ms"] = round(1000 * percentile(parts.agent_gap, 0.99), 2)
        for name in ("dispatch", "run", "report"):
            values = getattr(parts, name)
            out[f"hop_{name}_mean_ms"] = round(1000 * statistics.fmean(values), 2)
        out["hops_tapped"] = len(parts.dispatch)
    mean_ms = publish_to_start_mean_ms(chain)  # in the fan-out it is mostly time queued
    if mean_ms is not None:
        out["chain_publish_to_start_mean_ms"] = round(mean_ms, 2)
    out.update(pass_phase_figures(chain))
    return out


PASS_PHASES = ("statements", "commit", "publish")
"""The phases of an executor's pass its ``tickwork_executor_pass_seconds`` histogram
times: its transaction's statements, its commit, the publish after it."""


def pass_phase_figures(chain: AttemptRun) -> dict[str, Any]:
    """Of the dispatch part of the hop, the executor's own: the mean of each phase over
    the passes that applied or dispatched something during the chain (about one a link),
    from the executor's metrics; nothing where they could not be read."""
    out: dict[str, Any] = {}
    metrics = chain.executor_metrics
    for phase in PASS_PHASES:
        labels = f'{{phase="{phase}"}}'
        count = metrics.get(f"tickwork_executor_pass_seconds_count{labels}", 0.0)
        total = metrics.get(f"tickwork_executor_pass_seconds_sum{labels}", 0.0)
        if count:
            out[f"hop_pass_{phase}_mean_ms"] = round(1000 * total / count, 2)
    passes = metrics.get(f'tickwork_executor_pass_seconds_count{{phase="{PASS_PHASES[0]}"}}')
    if passes:  # each pass observes every phase once
        out["chain_passes_per_link"] = round(passes / chain.tasks, 2)
    return out


def target_checks(out: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """``(key, target, value, met)`` for each target: the value at most the target."""
    checks = (
        ("wall_time_ratio", TARGET_WALL_TIME_RATIO),
        ("hop_p50_ratio_to_celery", TARGET_HOP_RATIO_TO_CELERY),
        ("hop_p99_ratio_to_celery", TARGET_HOP_RATIO_TO_CELERY),
        ("executor_cpu_ms_per_task", TARGET_EXECUTOR_CPU_MS_PER_TASK),
    )
    return [(key, target, out[key], out[key] <= target) for key, target in checks]


def report_targets(out: dict[str, Any], err: Console) -> None:
    """One line per target on stderr: met or missed."""
    for key, target, value, met in target_checks(out):
        verdict = "met" if met else "MISSED"
        err.print(f"target {key} <= {target:g}: {value:g}, {verdict}", highlight=False)


def executor_counts(text: str) -> tuple[int, ...]:
    """``--executors``: a comma-separated list of counts of 1 or more."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("executor counts are 1 or more")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=PARALLEL_TASKS, help="fan-out size")
    parser.add_argument("--chain", type=int, default=CHAIN_TASKS, help="chain length")
    parser.add_argument(
        "--repeat",
        type=int,
        default=DEFAULT_ROUNDS,
        help="rounds of the four parts, tickwork's and raw Celery's alternated; figures are "
        f"the rounds' medians (default {DEFAULT_ROUNDS})",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--executors",
        type=executor_counts,
        default=(),
        help="also run the fan-out spread over 16 attempts with each of these executor "
        "counts, e.g. 1,2,3",
    )
    args = parser.parse_args()
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    sizes = (max(1, args.tasks), max(2, args.chain))
    results = run_guarded(
        lambda: run_all(server_url, redis_url, sizes, max(1, args.repeat), err, args.executors),
        server_url,
        redis_url,
        err,
    )
    if isinstance(results, int):
        return results
    out = figures(results)
    report_targets(out, err)
    print(json.dumps(out))
    if args.check and not out["meets_targets"]:
        err.print("error: a dispatch target was missed (see bench/README.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
