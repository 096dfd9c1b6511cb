"""Distributed dispatch: no-op tasks through the executor, Celery and agents, and raw Celery.

Three parts, one after another so that none takes CPU from another while it is timed:

(b) raw Celery: 2,000 no-op tasks sent with ``delay()`` to two ``celery worker`` processes
    (prefork, one worker process each) with the settings of tickwork's agents (JSON only,
    ``task_acks_late``, prefetch 1, no remote control, no events, no gossip, mingle or
    heartbeat), and waited for through a Redis result backend. The clock runs from the
    first send to the last result (bench/_raw_celery_app.py, run as a child process);
(a) fan-out: one group with ``_parallel: true`` and 2,000 ``echo>: x`` tasks through a
    real ``tickwork executor`` and two ``tickwork agent --concurrency 1`` processes. The
    clock runs from just before the transaction that creates the attempt until this
    process sees the attempt in ``success`` in the store (polled every 10 ms);
(c) chain: one group of 200 ``echo>: x`` tasks, each waiting for the one before, on the
    same services. The figure is the per-hop latency; see below.

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

To show where a hop goes, the chain runs with a tap on the agents' event stream
(bench/_event_tap.py): the agents' own start and end of each task split the hop into
dispatch (executor pass, publish, broker, agent pick-up), run (the no-op) and report
(event stream, executor wake-up), which add up to it; and task n's end to task n+1's
start on the agents is reported as ``hop_agent_gap_*``.

Before the clock starts, warm-up attempts of 10 tasks run until both agents have run a
task (seen on their metrics endpoints), so that start-up is not timed. The raw workers
are likewise waited for (their ``worker_ready`` signal) and warmed up with 20 tasks.

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
starts and after it ends, and divided by every task it sent (warm-up and all rounds).

**More executors** (``--executors 1,2,3``, off by default). After the three parts, for
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
otherwise); the last stdout line is one JSON object of figures. ``--repeat N`` runs each
part N times and keeps the run with the median wall time of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from _event_tap import AgentTimes, EventTap
from _services import (
    BenchFailed,
    Service,
    metric_total,
    read_metrics,
    redis_prefix,
    run_guarded,
    running,
    service_env,
    start_executors_and_agents,
    start_service,
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
RAW_WARMUP_TASKS = 20
ATTEMPT_POLL_SECONDS = 0.01
START_TIMEOUT_SECONDS = 60.0  # a service up, a worker ready, a warm-up attempt done
ATTEMPT_TIMEOUT_SECONDS = 300.0  # a timed attempt, or the raw client's batch
BENCH_DIR = Path(__file__).resolve().parent
BIN_DIR = Path(sys.executable).parent

# Targets; see bench/README.md.
TARGET_WALL_TIME_RATIO = 1.2
TARGET_HOP_P50_MS = 5.0
TARGET_HOP_P99_MS = 15.0
TARGET_EXECUTOR_CPU_MS_PER_TASK = 1.0
SPREAD_ATTEMPTS = 16  # the executors' default partition count: one attempt per partition


# --- processes and stores: bench/_services.py ----------------------------------------------


# --- (b) raw Celery ----------------------------------------------------------------------


@dataclass(frozen=True)
class RawResult:
    """The raw-Celery run: how long sending took and how long until the last result."""

    tasks: int
    publish_seconds: float
    wall_seconds: float
    worker_cpu_ms_per_task: float  # both workers' process groups, over every task sent

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_seconds


def group_cpu_seconds(pgid: int) -> float:
    """User and system CPU seconds of the live processes in process group ``pgid``, with
    what their reaped children had used."""
    total_ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # the process has gone
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # from the state on: field 3 is [0]
        if int(fields[2]) == pgid:
            total_ticks += sum(int(value) for value in fields[11:15])  # utime .. cstime
    return total_ticks / os.sysconf("SC_CLK_TCK")


def services_cpu_seconds(services: Sequence[Service]) -> float:
    """The summed CPU seconds of the services' process groups."""
    return sum(group_cpu_seconds(service.process.pid) for service in services)


def run_raw_celery(
    tasks: int, rounds: int, redis_url: str, prefix: str, work_dir: Path
) -> list[RawResult]:
    """``rounds`` runs on two prefork workers of one process each, from a child process."""
    ready_dir = work_dir / "raw-ready"
    ready_dir.mkdir()
    pythonpath = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH")) if p)
    env = service_env(
        TICKWORK_REDIS_URL=redis_url,
        TICKWORK_REDIS_PREFIX=prefix,
        TICKWORK_BENCH_READY_DIR=str(ready_dir),
        PYTHONPATH=pythonpath,
    )
    with running([]) as services:
        for index in range(1, AGENTS + 1):
            command = [
                str(BIN_DIR / "celery"),
                "--app",
                "_raw_celery_app",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                "1",
                "--prefetch-multiplier",
                "1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--hostname",
                f"raw{index}@%h",
                "--loglevel",
                "WARNING",
            ]
            services.append(start_service(f"raw-worker-{index}", command, env, work_dir, work_dir))
        wait_until(
            lambda: len(list(ready_dir.iterdir())) >= AGENTS,
            START_TIMEOUT_SECONDS,
            "the raw Celery workers to be ready",
            services,
        )
        client = [
            sys.executable,
            str(BENCH_DIR / "_raw_celery_app.py"),
            "--tasks",
            str(tasks),
            "--warmup",
            str(RAW_WARMUP_TASKS),
            "--rounds",
            str(rounds),
            "--timeout",
            str(ATTEMPT_TIMEOUT_SECONDS),
        ]
        cpu_before = services_cpu_seconds(services)
        try:
            done = subprocess.run(
                client,
                env=env,
                capture_output=True,
                text=True,
                timeout=(rounds + 1) * ATTEMPT_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BenchFailed("the raw Celery client did not finish in time") from None
        if done.returncode != 0:
            raise BenchFailed(f"the raw Celery client failed: {done.stderr.strip()[-800:]}")
        cpu_seconds = services_cpu_seconds(services) - cpu_before
        for service in services:
            service.check_alive()
    found = json.loads(done.stdout.strip().splitlines()[-1])
    cpu_ms = 1000 * cpu_seconds / (RAW_WARMUP_TASKS + rounds * found["tasks"])
    return [RawResult(found["tasks"], publish, wall, cpu_ms) for publish, wall in found["rounds"]]


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


_Timed = TypeVar("_Timed", RawResult, AttemptRun)


@dataclass(frozen=True)
class Results:
    """The run of each part that counts."""

    raw: RawResult
    parallel: AttemptRun
    chain: AttemptRun
    spread: list[SpreadRun] = dataclasses.field(default_factory=list)  # --executors


def run_all(
    server_url: str,
    redis_url: str,
    sizes: tuple[int, int],
    repeat: int,
    err: Console,
    executor_counts: Sequence[int] = (),
) -> Results:
    """Run the three parts (and one spread fan-out per executor count) in a temporary
    directory, kept (with the logs) after a failure."""
    work_dir = Path(tempfile.mkdtemp(prefix="tickwork-bench-dispatch-"))
    try:
        results = run_parts(server_url, redis_url, sizes, repeat, work_dir, err, executor_counts)
    except BenchFailed:
        err.print(f"service logs kept in {work_dir}", highlight=False, soft_wrap=True)
        raise
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    shutil.rmtree(work_dir, ignore_errors=True)
    return results


def median_by_wall(runs: Sequence[_Timed]) -> _Timed:
    """The run with the median wall time (the only run when there is one)."""
    return sorted(runs, key=lambda run: run.wall_seconds)[(len(runs) - 1) // 2]


def run_parts(
    server_url: str,
    redis_url: str,
    sizes: tuple[int, int],
    repeat: int,
    work_dir: Path,
    err: Console,
    executor_counts: Sequence[int] = (),
) -> Results:
    """Raw Celery first, then tickwork's services for the fan-out and the chain; each part
    ``repeat`` times, of which the run with the median wall time counts; then the spread
    fan-out with each of ``executor_counts`` executors."""
    tasks, chain = sizes
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with ExitStack() as stack:
        progress = stack.enter_context(
            Progress(*columns, console=err, disable=not err.is_terminal, refresh_per_second=4)
        )

        def say(line: str) -> None:
            progress.console.print(line, highlight=False, soft_wrap=True)

        bar = progress.add_task("starting", total=2 + 2 * repeat)
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url))  # fails early if unreachable

        progress.update(bar, description=f"(b) raw Celery, {tasks:,} tasks x {repeat}")
        raws = run_raw_celery(tasks, repeat, redis_url, f"{prefix}raw:", work_dir)
        for raw in raws:
            say(describe_raw(raw))
        progress.advance(bar)

        progress.update(bar, description="starting the executor and agents")
        services = stack.enter_context(running([]))
        tickwork = Tickwork.start(services, url, redis_url, f"{prefix}tw:", work_dir)
        stack.callback(tickwork.close)
        tickwork.warm_up(err)
        say(f"services ready: an executor and {AGENTS} agents")
        progress.advance(bar)

        raw = median_by_wall(raws)
        parallels: list[AttemptRun] = []
        for round_number in range(1, repeat + 1):
            progress.update(bar, description=f"(a) tickwork fan-out ({round_number}/{repeat})")
            run = tickwork.run_attempt(
                f"parallel_{round_number}", tasks, True, ATTEMPT_TIMEOUT_SECONDS
            )
            parallels.append(run)
            say(describe_parallel(run, raw))
            progress.advance(bar)

        chains: list[AttemptRun] = []
        for round_number in range(1, repeat + 1):
            progress.update(bar, description=f"(c) tickwork chain ({round_number}/{repeat})")
            run = tickwork.run_attempt(
                f"chain_{round_number}", chain, False, ATTEMPT_TIMEOUT_SECONDS, tap=True
            )
            chains.append(run)
            say(describe_chain(run))
            progress.advance(bar)
        spread: list[SpreadRun] = []
        if executor_counts:
            stop_services(services)  # nothing else runs while the executor counts are timed
            services.clear()
            progress.update(bar, description=f"(d) executors {executor_counts}")
            spread = run_executor_counts(
                executor_counts, url, redis_url, tasks, work_dir, progress.console
            )
    return Results(raw, median_by_wall(parallels), median_by_wall(chains), spread)


def describe_raw(raw: RawResult) -> str:
    return (
        f"(b) raw Celery: {raw.tasks:,} tasks in {raw.wall_seconds:.2f} s "
        f"({raw.tasks_per_s:,.0f} tasks/s; sending took {raw.publish_seconds:.2f} s)"
    )


def describe_parallel(run: AttemptRun, raw: RawResult) -> str:
    return (
        f"(a) tickwork fan-out: {run.tasks:,} tasks in {run.wall_seconds:.2f} s "
        f"({run.tasks_per_s:,.0f} tasks/s, {run.wall_seconds / raw.wall_seconds:.2f}x raw "
        f"Celery's time; first task queued {run.pickup_ms:.0f} ms after the attempt; "
        f"CPU per task: executor {run.executor_cpu_ms_per_task:.2f} ms, agents "
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


def figures(results: Results) -> dict[str, Any]:
    """The JSON figures: the five headline ones first, then what supports them."""
    raw, parallel, chain = results.raw, results.parallel, results.chain
    hops, gaps = chain_hops(chain.rows)
    ratio = parallel.wall_seconds / raw.wall_seconds
    p50_ms, p99_ms = 1000 * percentile(hops, 0.5), 1000 * percentile(hops, 0.99)
    out: dict[str, Any] = {
        "tickwork_tasks_per_s": round(parallel.tasks_per_s, 1),
        "raw_celery_tasks_per_s": round(raw.tasks_per_s, 1),
        "wall_time_ratio": round(ratio, 3),
        "hop_p50_ms": round(p50_ms, 2),
        "hop_p99_ms": round(p99_ms, 2),
        "hop_max_ms": round(1000 * max(hops), 2),
        "hop_queue_gap_max_ms": round(1000 * max(gaps), 2),
        "tickwork_wall_seconds": round(parallel.wall_seconds, 3),
        "tickwork_pickup_ms": round(parallel.pickup_ms, 1),
        "raw_celery_wall_seconds": round(raw.wall_seconds, 3),
        "raw_celery_publish_seconds": round(raw.publish_seconds, 3),
        "chain_wall_seconds": round(chain.wall_seconds, 3),
        "chain_pickup_ms": round(chain.pickup_ms, 1),
        "tasks": parallel.tasks,
        "chain_tasks": chain.tasks,
    }
    out["hop_mean_ms"] = round(1000 * statistics.fmean(hops), 2)
    out["executor_cpu_ms_per_task"] = round(parallel.executor_cpu_ms_per_task, 2)
    out["agent_cpu_ms_per_task"] = round(parallel.agent_cpu_ms_per_task, 2)
    out["celery_worker_cpu_ms_per_task"] = round(raw.worker_cpu_ms_per_task, 2)
    out["chain_executor_cpu_ms_per_task"] = round(chain.executor_cpu_ms_per_task, 2)
    out["chain_agent_cpu_ms_per_task"] = round(chain.agent_cpu_ms_per_task, 2)
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
    out.update(spread_figures(results.spread))
    out["meets_targets"] = all(met for *_, met in target_checks(out))
    return out


def target_checks(out: dict[str, Any]) -> list[tuple[str, str, float, float, str, bool]]:
    """``(key, operator, target, value, unit, met)`` for each target."""
    checks = (
        ("wall_time_ratio", "<=", TARGET_WALL_TIME_RATIO, ""),
        ("hop_p50_ms", "<", TARGET_HOP_P50_MS, " ms"),
        ("hop_p99_ms", "<", TARGET_HOP_P99_MS, " ms"),
        ("executor_cpu_ms_per_task", "<=", TARGET_EXECUTOR_CPU_MS_PER_TASK, " ms"),
    )
    return [
        (key, op, target, out[key], unit, out[key] <= target if op == "<=" else out[key] < target)
        for key, op, target, unit in checks
    ]


def report_targets(out: dict[str, Any], err: Console) -> None:
    """One line per target on stderr: met or missed."""
    for key, op, target, value, unit, met in target_checks(out):
        verdict = "met" if met else "MISSED"
        err.print(
            f"target {key} {op} {target:g}{unit}: {value:g}{unit}, {verdict}", highlight=False
        )


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
    parser.add_argument("--repeat", type=int, default=1, help="runs per part; the median counts")
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
