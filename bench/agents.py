"""Horizontal agent scaling: many agent processes on one machine, a fan-out of sleeping
``sh>`` tasks that fills every slot, and some agents killed (SIGKILL) in the middle of it.

One ``tickwork executor`` on a throwaway PostgreSQL database and ``--agents`` ``tickwork
agent --concurrency C`` processes (no metrics port, no database URL), all under a fresh
Redis key prefix. Two fan-outs of ``--tasks`` ``sh>: sleep S`` tasks run one after
another:

1. **steady**: nothing is disturbed. Measured: the time until every slot runs a task,
   end-to-end time against the ideal (``ceil(tasks / slots) * S``), the executor's and
   Redis's CPU and Redis's commands per running task per second while the slots are full
   (heartbeats, the reaper, dispatch and results), per task over the whole fan-out, and the
   agents' memory under load (one reading when the slots are full);
2. **kill**: once half the tasks have started, ``--kill`` agents get SIGKILL at once (each
   agent's process group: its Celery main process and its pool processes; the task
   supervisors then end their commands). Checked: every task ends in success exactly
   once, the killed agents' runs run again once (token 2) and nothing else does; measured:
   the takeover time, from the kill to each re-run's start, against the bound the lease
   settings give (lease TTL + reaper interval + the reaper's grace).

Before any work, each agent's memory (RSS and PSS from ``/proc/PID/smaps_rollup``) is read
idle. If the requested fleet would not fit in the machine's available memory (measured on
the first agent), fewer agents run, with the tasks and kills scaled alike; the JSON says
so and ``meets_targets`` is then false.

Progress goes to stderr (a live line on a terminal, JSON lines otherwise); the last stdout
line is one JSON object of figures. See bench/README.md for how to read them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from _agent_fleet import (
    HEARTBEAT_SECONDS,
    IDLE_SECONDS,
    LEASE_TTL_SECONDS,
    OWN_APPLICATION,
    REAPER_SECONDS,
    DatabaseReading,
    Fleet,
    Kill,
    Memory,
    ProcessTree,
    RedisReading,
    Reporter,
    RunTap,
    Sample,
    Scale,
    agent_processes,
    kill_agents,
    measure_idle,
    memory_of,
    start_fleet,
    start_private_redis,
    task_ids_in,
)
from _services import BenchFailed, Service, redis_prefix, run_guarded, running
from _stores import percentile, run_request, throwaway_database
from rich.console import Console
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from tickwork.services.compose.embedded import create_run_attempt
from tickwork.shared.clock import SystemClock
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.logs import list_run_logs
from tickwork.shared.store.sessions import get_attempt_state
from tickwork.shared.store.tasks import TaskRow, list_attempt_tasks

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
AGENTS, CONCURRENCY, TASKS, SLEEP_SECONDS, KILL = 50, 20, 5000, 5.0, 10
REDIS_SERVER = shutil.which("redis-server")
MAX_TASKS = 9999  # the executor's default attempt limit (10,000) less the group
TARGET_WALL_RATIO = 1.5  # end-to-end at most 1.5 x the ideal

STALL_SECONDS = 30.0  # nothing started or ended for this long: the rest will not run
CONNECTIONS_SECONDS = 5.0  # between counts of the database's connections
SAMPLE_SECONDS = 1.0  # executor CPU and Redis counters, between readings
FULL_FRACTION = 0.9  # the slots count as full from this share of the peak of runs


# --- progress -------------------------------------------------------------------------


# --- the fleet ------------------------------------------------------------------------


# --- one fan-out ----------------------------------------------------------------------


@dataclass
class FanOut:
    """One fan-out attempt: its timings, counters and rows."""

    name: str
    created_at: float
    ended_at: float
    attempt_succeeded: bool
    rows: list[TaskRow]
    ended_logs: dict[int, int]  # task id -> runs whose result was recorded
    log_created: dict[tuple[int, int], float]  # (task id, token) -> dispatched (unix s)
    starts: dict[tuple[int, int], float]
    finishes: dict[tuple[int, int], float]
    successes: dict[tuple[int, int], int]
    samples: list[Sample]
    database: tuple[DatabaseReading, DatabaseReading]
    agents_cpu_seconds: float
    most_connections: int
    load: Memory | None = None
    load_running: int = 0  # runs whose processes the load reading counted
    kill: Kill | None = None
    stalled_marks: dict[str, int] = field(default_factory=dict)  # unfinished tasks' leases

    @property
    def wall_seconds(self) -> float:
        return self.ended_at - self.created_at


def sleep_workflow_text(tasks: int, sleep_seconds: float) -> str:
    """One group of ``tasks`` ``sh>: sleep S`` tasks, fanned out."""
    lines = ["+all:", "  _parallel: true"]
    for index in range(tasks):
        lines += [f"  +t{index:05d}:", f"    sh>: sleep {sleep_seconds:g}"]
    return "\n".join(lines) + "\n"


def running_count(tap: RunTap, killed: set[tuple[int, int]]) -> int:
    """Runs started and not finished, the killed ones left out."""
    return len(tap.starts.keys() - tap.finishes.keys() - killed)


def run_fanout(
    fleet: Fleet,
    engine: Engine,
    stores: tuple[str, str],  # the database's URL and the server's
    project_dir: Path,
    name: str,
    reporter: Reporter,
    kill: int = 0,
) -> FanOut:
    """Create the fan-out's attempt and watch it to its end, sampling the counters; with
    ``kill``, SIGKILL that many agents once half the tasks have started; without, read
    the agents' memory once the slots are full (or the first run has ended)."""
    url, server_url = stores
    scale = fleet.scale
    database = make_url(url).database or ""
    text = sleep_workflow_text(scale.tasks, scale.sleep_seconds)
    request = run_request(url, project_dir, name, text)
    timeout = 120 + 10 * scale.ideal_seconds + (scale.takeover_bound_seconds if kill else 0)
    with RunTap(*fleet.redis_at) as tap:
        database_before = DatabaseReading.read(server_url, database)
        agents_cpu = fleet.agents_cpu_seconds()
        samples = [fleet.sample()]
        created_at = time.time()
        with engine.begin() as conn:
            attempt_id = create_run_attempt(conn, request, SystemClock().now()).attempt_id
        watch = Watch(fleet, tap, reporter, name, kill, engine, attempt_id)
        deadline = time.monotonic() + timeout
        while not attempt_done(engine, attempt_id):
            if time.monotonic() > deadline:
                raise BenchFailed(
                    f"the {name} fan-out did not end in {timeout:.0f} s; executor log:\n"
                    f"{fleet.executor.log_tail()}"
                )
            if time.time() - samples[-1].at >= SAMPLE_SECONDS:
                samples.append(fleet.sample())
                fleet.check()
            watch.step((server_url, database))
            if watch.stalled():
                reporter.event(f"{name}: nothing ran for {STALL_SECONDS:g} s; stopped waiting")
                break
            time.sleep(0.2)
        ended_at = time.time()
        samples.append(fleet.sample())
    agents_cpu = fleet.agents_cpu_seconds() - agents_cpu
    if watch.kill is not None:
        watch.kill.orphans = sum(
            run in watch.kill.runs for run in task_ids_in(ProcessTree.read().parent).values()
        )
    with engine.connect() as conn:
        rows = [r for r in list_attempt_tasks(conn, attempt_id) if not r.is_group]
        logs = list_run_logs(conn, attempt_id)
        state = get_attempt_state(conn, attempt_id)
    stalled = [row for row in rows if not row.state.is_terminal]
    marks = fleet.lease_marks([row.id for row in stalled])
    if state is not AttemptState.SUCCESS:
        reporter.event(f"the {name} attempt ended in {state.value}")
    ended_logs: dict[int, int] = {}
    for log in logs:
        if log.ended_at is not None:
            ended_logs[log.task_id] = ended_logs.get(log.task_id, 0) + 1
    time.sleep(2.0)  # the executor's backends report their counts at most a second late
    return FanOut(
        name=name,
        created_at=created_at,
        ended_at=ended_at,
        attempt_succeeded=state is AttemptState.SUCCESS,
        rows=rows,
        ended_logs=ended_logs,
        log_created={(log.task_id, log.lease_token): log.created_at.timestamp() for log in logs},
        starts=dict(tap.starts),
        finishes=dict(tap.finishes),
        successes=dict(tap.successes),
        samples=samples,
        database=(database_before, DatabaseReading.read(server_url, database)),
        agents_cpu_seconds=agents_cpu,
        most_connections=watch.most_connections,
        load=watch.load,
        load_running=watch.load_running,
        kill=watch.kill,
        stalled_marks=marks,
    )


def attempt_done(engine: Engine, attempt_id: int) -> bool:
    with engine.connect() as conn:
        return get_attempt_state(conn, attempt_id).is_done


@dataclass
class Watch:
    """What happens while a fan-out runs: the live line, the memory reading under load,
    the kill, and the most database connections seen."""

    fleet: Fleet
    tap: RunTap
    reporter: Reporter
    name: str
    kill_count: int
    engine: Engine
    attempt_id: int
    kill: Kill | None = None
    load: Memory | None = None
    load_running: int = 0
    most_connections: int = 0
    peak: int = 0
    running: int = 0
    most_runs: int = 0  # runs with processes, at the most (read every sample)
    events_seen: int = 0
    last_event_at: float = field(default_factory=time.time)
    _connections_read: float = 0.0
    _next_count: float = 0.0

    def step(self, database: tuple[str, str]) -> None:
        """Look once: read what is due, kill or read the load when it is time, say how
        things stand."""
        killed = self.kill.runs if self.kill is not None else set()
        running = running_count(self.tap, killed)
        self.peak = max(self.peak, running)
        started, finished = len(self.tap.starts), len(self.tap.finishes)
        if started + finished != self.events_seen:
            self.events_seen, self.last_event_at = started + finished, time.time()
        self.running = running
        tasks, slots = self.fleet.scale.tasks, len(self.fleet.agents) * self.fleet.scale.concurrency
        if time.monotonic() - self._connections_read >= CONNECTIONS_SECONDS:
            self._connections_read = time.monotonic()
            found = DatabaseReading.read(*database).connections
            self.most_connections = max(self.most_connections, found)
        if self.kill_count and self.kill is None and started >= tasks // 2:
            self._kill()
        if not self.kill_count and self.load is None and started:
            self._read_load(slots)
        self.reporter.status(
            f"{self.name}: {started:,}/{tasks:,} started, {finished:,} finished, "
            f"{running:,}/{slots:,} running (peak {self.peak:,})",
            phase=self.name,
            started=started,
            finished=finished,
            running=running,
        )

    def stalled(self) -> bool:
        """Whether the tasks left will not run: none runs, no run started or ended for
        :data:`STALL_SECONDS`, and any kill is that long past its takeover bound (its
        agents' tasks have been given out again if they ever will be)."""
        now = time.time()
        if self.running or now - self.last_event_at < STALL_SECONDS:
            return False
        bound = self.fleet.scale.takeover_bound_seconds
        return self.kill is None or now - self.kill.at > bound + STALL_SECONDS

    def _kill(self) -> None:
        with self.engine.connect() as conn:
            rows = list_attempt_tasks(conn, self.attempt_id)
        task_ids = [row.id for row in rows if not row.is_group]
        self.kill = kill_agents(self.fleet, self.kill_count, task_ids)
        self.reporter.event(
            f"{self.name}: killed {len(self.kill.agents)} agents holding "
            f"{len(self.kill.runs)} runs ({len(self.kill.survivors_runs)} on the others)",
            killed_agents=len(self.kill.agents),
            killed_runs=len(self.kill.runs),
        )

    def _read_load(self, slots: int) -> None:
        """Read the memory under load once, at about the most runs: when 90 % of the
        slots have their run's processes (they start a little after the event saying the
        run started, later on a busy machine), or, should that never be, as soon as the
        runs with processes fall below 90 % of the most seen."""
        if time.monotonic() < self._next_count:
            return
        self._next_count = time.monotonic() + SAMPLE_SECONDS
        pids, runs = agent_processes(self.fleet)
        self.most_runs = max(self.most_runs, runs)
        if runs < FULL_FRACTION * slots and runs >= FULL_FRACTION * self.most_runs:
            return
        load = self.load = memory_of(pids)
        self.load_running = runs
        self.reporter.event(
            f"{self.name}: under load, {runs} runs: {load.rss_kib / 1024**2:.2f} GiB RSS, "
            f"{load.pss_kib / 1024**2:.2f} GiB PSS in {load.processes} processes",
        )


# --- figures --------------------------------------------------------------------------


def running_curve(fanout: FanOut) -> list[tuple[float, int]]:
    """``(time, runs running from then on)`` at every start and end the tap saw; a killed
    run ends at the kill."""
    ends = dict(fanout.finishes)
    if fanout.kill is not None:
        for run in fanout.kill.runs:
            ends.setdefault(run, fanout.kill.at)
    events = []
    for run, started_at in fanout.starts.items():
        events.append((started_at, 1))
        if run in ends:
            events.append((ends[run], -1))
    events.sort()  # at one time, an end before a start
    level, points = 0, []
    for at, change in events:
        level += change
        points.append((at, level))
    return points


def mean_level(points: Sequence[tuple[float, int]], begin: float, end: float) -> float:
    """The mean of the step function ``points`` over ``[begin, end]``."""
    total, level, last = 0.0, 0, begin
    for at, after in points:
        if at <= begin:
            level = after
            continue
        if at >= end:
            break
        total += level * (at - last)
        last, level = at, after
    total += level * (end - last)
    return total / (end - begin) if end > begin else float(level)


@dataclass(frozen=True)
class Window:
    """The stretch of a fan-out whose counters are read per running task: from the
    first sample after the runs reach :data:`FULL_FRACTION` of their peak to the last
    sample before the last start (after it, the slots drain)."""

    first: Sample
    last: Sample
    mean_running: float

    @property
    def seconds(self) -> float:
        return self.last.at - self.first.at

    def per_running_task_s(self, amount: float) -> float:
        return amount / (self.mean_running * self.seconds)


def full_window(fanout: FanOut, points: Sequence[tuple[float, int]]) -> Window:
    peak = max((level for _, level in points), default=0)
    first_full = next((at for at, level in points if level >= FULL_FRACTION * peak), 0.0)
    last_start = max(fanout.starts.values(), default=fanout.ended_at)
    inside = [s for s in fanout.samples if first_full <= s.at <= last_start]
    if len(inside) < 3:  # too short to read: the whole fan-out
        inside = fanout.samples
    first, last = inside[0], inside[-1]
    return Window(first, last, mean_level(points, first.at, last.at))


def steady_figures(fanout: FanOut, scale: Scale, idle_memory: Memory) -> dict[str, Any]:
    """What the undisturbed fan-out measured."""
    points = running_curve(fanout)
    peak = max((level for _, level in points), default=0)
    full_at = next((at for at, level in points if level >= scale.slots), None)
    peak_at = next((at for at, level in points if level == peak), fanout.created_at)
    window = full_window(fanout, points)
    first, last = fanout.samples[0], fanout.samples[-1]
    tasks = scale.tasks
    exec_window = window.last.executor_cpu_seconds - window.first.executor_cpu_seconds
    redis_window = window.last.redis.cpu_seconds - window.first.redis.cpu_seconds
    calls_window = window.last.redis.calls_since(window.first.redis)
    calls_phase = last.redis.calls_since(first.redis)
    before, after = fanout.database
    out: dict[str, Any] = {
        "wall_seconds": round(fanout.wall_seconds, 2),
        "ideal_seconds": scale.ideal_seconds,
        "wall_vs_ideal": round(fanout.wall_seconds / scale.ideal_seconds, 3),
        "seconds_to_all_slots_running": (
            None if full_at is None else round(full_at - fanout.created_at, 2)
        ),
        "peak_running": peak,
        "seconds_to_peak_running": round(peak_at - fanout.created_at, 2),
        "starts_per_s": round(tasks / (max(fanout.starts.values()) - fanout.created_at), 1),
        "window_seconds": round(window.seconds, 1),
        "window_mean_running": round(window.mean_running, 1),
        "executor_cpu_ms_per_running_task_s": round(
            1000 * window.per_running_task_s(exec_window), 4
        ),
        "redis_cpu_ms_per_running_task_s": round(1000 * window.per_running_task_s(redis_window), 4),
        "redis_calls_per_running_task_s": round(
            window.per_running_task_s(sum(calls_window.values())), 3
        ),
        "redis_calls_per_running_task_s_by_command": {
            name: round(window.per_running_task_s(n), 4)
            for name, n in sorted(calls_window.items(), key=lambda item: -item[1])
        },
        "heartbeats_per_running_task_s": round(1 / scale.heartbeat_seconds, 4),
        "executor_cpu_ms_per_task": round(
            1000 * (last.executor_cpu_seconds - first.executor_cpu_seconds) / tasks, 3
        ),
        "redis_cpu_ms_per_task": round(
            1000 * (last.redis.cpu_seconds - first.redis.cpu_seconds) / tasks, 3
        ),
        "redis_calls_per_task": round(sum(calls_phase.values()) / tasks, 2),
        "redis_calls_per_task_by_command": {
            name: round(n / tasks, 3)
            for name, n in sorted(calls_phase.items(), key=lambda item: -item[1])
        },
        "agents_cpu_ms_per_task": round(1000 * fanout.agents_cpu_seconds / tasks, 2),
        "pg_commits_per_task": round((after.commits - before.commits) / tasks, 2),
        "pg_rows_written_per_task": round((after.rows_written - before.rows_written) / tasks, 2),
        "pg_connections_most": fanout.most_connections,
        "redis_clients_most": max(s.redis.clients for s in fanout.samples),
        "reruns": sum(row.lease_token != 1 for row in fanout.rows),
        "not_success": sum(row.state is not TaskState.SUCCESS for row in fanout.rows),
    }
    if fanout.load is not None and fanout.load_running:
        load = fanout.load
        out["load_running"] = fanout.load_running
        out["load_rss_gib"] = round(load.rss_kib / 1024**2, 2)
        out["load_pss_gib"] = round(load.pss_kib / 1024**2, 2)
        out["load_processes"] = load.processes
        grown_rss, grown_pss = (
            load.rss_kib - idle_memory.rss_kib,
            load.pss_kib - idle_memory.pss_kib,
        )
        out["rss_mib_per_running_slot"] = round(grown_rss / 1024 / fanout.load_running, 2)
        out["pss_mib_per_running_slot"] = round(grown_pss / 1024 / fanout.load_running, 2)
    return out


def kill_figures(fanout: FanOut, scale: Scale) -> dict[str, Any]:
    """What the fan-out with the kill showed: exactly once, takeover, the survivors."""
    kill = fanout.kill
    if kill is None:
        raise BenchFailed(f"the {fanout.name} fan-out ended before half its tasks had started")
    by_id = {row.id: row for row in fanout.rows}
    runs_by_task: dict[int, set[int]] = {}
    for (task_id, token), count in fanout.successes.items():
        if count:
            runs_by_task.setdefault(task_id, set()).add(token)
    expected_token = {task_id: 1 for task_id in by_id}
    for task_id, token in kill.runs:
        expected_token[task_id] = token + 1
    takeovers = [
        fanout.starts[(t, k + 1)] - kill.at for t, k in kill.runs if (t, k + 1) in fanout.starts
    ]
    requeues = [
        fanout.log_created[(t, k + 1)] - kill.at
        for t, k in kill.runs
        if (t, k + 1) in fanout.log_created
    ]
    disturbed = [
        (t, k)
        for t, k in kill.survivors_runs
        if by_id[t].lease_token != k
        or by_id[t].lost_count
        or by_id[t].state is not TaskState.SUCCESS
    ]
    out: dict[str, Any] = {
        "wall_seconds": round(fanout.wall_seconds, 2),
        "attempt_succeeded": fanout.attempt_succeeded,
        "killed_agents": len(kill.agents),
        "killed_at_seconds": round(kill.at - fanout.created_at, 2),
        "killed_runs": len(kill.runs),
        "survivors_runs_at_kill": len(kill.survivors_runs),
        "not_success": sum(row.state is not TaskState.SUCCESS for row in fanout.rows),
        "results_recorded_not_once": sum(fanout.ended_logs.get(t, 0) != 1 for t in by_id),
        "succeeded_under_two_tokens": sum(len(tokens) > 1 for tokens in runs_by_task.values()),
        "unexpected_tokens": sum(row.lease_token != expected_token[row.id] for row in fanout.rows),
        "survivors_runs_disturbed": len(disturbed),
        "orphan_processes": kill.orphans,
        "tasks_never_ended": sum(fanout.stalled_marks.values()),
        "never_ended_lease_marks": fanout.stalled_marks,
        "takeover_seen": len(takeovers),
        "requeue_seconds_max": round(max(requeues), 2) if requeues else None,
        "takeover_seconds_min": round(min(takeovers), 2) if takeovers else None,
        "takeover_seconds_p50": round(percentile(takeovers, 0.5), 2) if takeovers else None,
        "takeover_seconds_max": round(max(takeovers), 2) if takeovers else None,
        "takeover_bound_seconds": scale.takeover_bound_seconds,
    }
    return out


def idle_figures(
    fleet: Fleet, baseline: RedisReading, idle: tuple[RedisReading, RedisReading]
) -> dict[str, Any]:
    """Memory per idle agent and what idle agents cost Redis."""
    agents = fleet.scale.agents
    before, after = idle
    seconds = IDLE_SECONDS
    return {
        "idle_agent_rss_mib": round(fleet.idle.rss_kib / 1024 / agents, 1),
        "idle_agent_pss_mib": round(fleet.idle.pss_kib / 1024 / agents, 1),
        "idle_pss_mib_per_process": round(
            fleet.idle.pss_kib / 1024 / (agents + fleet.idle_pool_processes), 1
        ),
        "idle_processes_per_agent": round(fleet.idle.processes / agents, 1),
        "memory_available_gib_at_start": round(fleet.memory_available_kib / 1024**2, 1),
        "redis_clients_before_agents": baseline.clients,
        "redis_clients_per_idle_agent": round((before.clients - baseline.clients) / agents, 2),
        "redis_idle_calls_per_s": round(sum(after.calls_since(before).values()) / seconds, 1),
        "redis_idle_cpu_ms_per_s": round(
            1000 * (after.cpu_seconds - before.cpu_seconds) / seconds, 2
        ),
    }


def target_checks(out: dict[str, Any]) -> dict[str, bool]:
    """Each target of bench/README.md, met or not (the kill's only when one ran)."""
    checks = {
        "at_requested_scale": bool(out["at_requested_scale"]),
        "end_to_end_within_1_5x_ideal": out["steady_wall_vs_ideal"] <= TARGET_WALL_RATIO,
    }
    if "kill_killed_runs" in out:
        checks["every_task_exactly_once"] = (
            out["kill_attempt_succeeded"]
            and out["kill_not_success"] == 0
            and out["kill_results_recorded_not_once"] == 0
            and out["kill_succeeded_under_two_tokens"] == 0
        )
        bound, longest = out["kill_takeover_bound_seconds"], out["kill_takeover_seconds_max"]
        checks["takeover_within_lease_bound"] = out["kill_takeover_seen"] == out[
            "kill_killed_runs"
        ] and (longest is None or longest <= bound)
        checks["survivors_undisturbed"] = (
            out["kill_survivors_runs_disturbed"] == 0 and out["kill_unexpected_tokens"] == 0
        )
    return checks


def figures(
    fleet: Fleet,
    wanted: Scale,
    idle: dict[str, Any],
    steady: FanOut,
    killed: FanOut | None,
) -> dict[str, Any]:
    scale = fleet.scale
    out: dict[str, Any] = {
        "agents": scale.agents,
        "concurrency": scale.concurrency,
        "slots": scale.slots,
        "tasks": scale.tasks,
        "sleep_seconds": scale.sleep_seconds,
        "kill": scale.kill,
        "at_requested_scale": scale == wanted,
        "lease_ttl_seconds": scale.lease_ttl_seconds,
        "heartbeat_seconds": scale.heartbeat_seconds,
        "reaper_seconds": REAPER_SECONDS,
    }
    if scale != wanted:
        out["requested"] = {"agents": wanted.agents, "tasks": wanted.tasks, "kill": wanted.kill}
    out.update(idle)
    out.update({f"steady_{k}": v for k, v in steady_figures(steady, scale, fleet.idle).items()})
    clients = out["steady_redis_clients_most"] - out["redis_clients_before_agents"]
    out["redis_clients_per_slot_under_load"] = round(clients / scale.slots, 2)
    if killed is not None:
        out.update({f"kill_{k}": v for k, v in kill_figures(killed, scale).items()})
    out["targets"] = target_checks(out)
    out["meets_targets"] = all(out["targets"].values())
    return out


# --- the whole run --------------------------------------------------------------------


def run_all(server_url: str, redis_url: str | None, wanted: Scale, err: Console) -> dict[str, Any]:
    """Both fan-outs in a temporary directory, kept (with the logs) after a failure."""
    work_dir = Path(tempfile.mkdtemp(prefix="tickwork-bench-agents-"))
    reporter = Reporter(err)
    try:
        out = run_phases(server_url, redis_url, wanted, work_dir, reporter)
    except BenchFailed:
        reporter.close()
        err.print(f"service logs kept in {work_dir}", highlight=False, soft_wrap=True)
        raise
    except BaseException:
        reporter.close()
        shutil.rmtree(work_dir, ignore_errors=True)
        raise
    reporter.close()
    shutil.rmtree(work_dir, ignore_errors=True)
    return out


def run_phases(
    server_url: str, redis_url: str | None, wanted: Scale, work_dir: Path, reporter: Reporter
) -> dict[str, Any]:
    """Start everything, measure the idle fleet, run both fan-outs; the figures. Without
    ``redis_url``, a private ``redis-server`` serves the run."""
    redis_services: list[Service] = []
    with ExitStack() as stack:
        if redis_url is None:
            redis_services = stack.enter_context(running([]))
            redis_url = start_private_redis(redis_services, REDIS_SERVER or "", work_dir)
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url))
        own_url = make_url(url).update_query_dict({"application_name": OWN_APPLICATION})
        engine = create_store_engine(own_url.render_as_string(hide_password=False), pool_size=1)
        stack.callback(engine.dispose)
        with redis.Redis.from_url(redis_url, socket_timeout=10) as client:
            baseline = RedisReading.read(client)
        services = stack.enter_context(running([]))
        fleet = start_fleet(services, url, (redis_url, prefix), work_dir, wanted, reporter)
        stack.callback(fleet.redis_client.close)
        idle = idle_figures(fleet, baseline, measure_idle(fleet, reporter))
        project_dir = work_dir / "project"
        project_dir.mkdir()
        stores = (url, server_url)
        steady = run_fanout(fleet, engine, stores, project_dir, "steady", reporter)
        reporter.event(
            f"steady: {fleet.scale.tasks:,} tasks in {steady.wall_seconds:.1f} s "
            f"(ideal {fleet.scale.ideal_seconds:g} s)"
        )
        killed = None
        if fleet.scale.kill:
            killed = run_fanout(
                fleet, engine, stores, project_dir, "kill", reporter, kill=fleet.scale.kill
            )
            reporter.event(f"kill: {fleet.scale.tasks:,} tasks in {killed.wall_seconds:.1f} s")
        out = figures(fleet, wanted, idle, steady, killed)
        out["redis"] = "private" if redis_services else "shared"
        return out


def report_targets(out: dict[str, Any], err: Console) -> None:
    for name, met in out["targets"].items():
        err.print(f"target {name}: {'met' if met else 'MISSED'}", highlight=False)


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
        return value

    return parse


def parse_scale(argv: Sequence[str] | None = None) -> tuple[Scale, bool]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=positive(int), default=AGENTS, help=f"default {AGENTS}")
    parser.add_argument(
        "--concurrency",
        type=positive(int),
        default=CONCURRENCY,
        help=f"slots per agent; default {CONCURRENCY}",
    )
    parser.add_argument(
        "--tasks", type=positive(int), default=TASKS, help=f"fan-out size; default {TASKS}"
    )
    parser.add_argument(
        "--sleep",
        type=positive(float),
        default=SLEEP_SECONDS,
        help=f"seconds each task sleeps; default {SLEEP_SECONDS:g}",
    )
    parser.add_argument(
        "--kill", type=int, default=KILL, help=f"agents killed mid-run (0: no kill); default {KILL}"
    )
    parser.add_argument(
        "--lease-ttl",
        type=positive(float),
        default=LEASE_TTL_SECONDS,
        help=f"the agents' lease TTL; default theirs, {LEASE_TTL_SECONDS:g} s",
    )
    parser.add_argument(
        "--heartbeat",
        type=positive(float),
        default=HEARTBEAT_SECONDS,
        help=f"the agents' heartbeat; default theirs, {HEARTBEAT_SECONDS:g} s",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.tasks > MAX_TASKS:
        parser.error(f"--tasks is at most {MAX_TASKS} (the executor's attempt limit)")
    if not 0 <= args.kill < args.agents:
        parser.error("--kill is 0 or more and fewer than --agents")
    if args.heartbeat >= args.lease_ttl:
        parser.error("--heartbeat must be shorter than --lease-ttl")
    scale = Scale(
        args.agents,
        args.concurrency,
        args.tasks,
        args.sleep,
        args.kill,
        args.lease_ttl,
        args.heartbeat,
    )
    return scale, args.check


def main() -> int:
    wanted, check = parse_scale()
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    # Without a Redis named for it, the run gets a server of its own: the shared one's
    # counters would hold everyone else's commands too.
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL")
    if redis_url is None and REDIS_SERVER is None:
        redis_url = DEFAULT_REDIS_URL
    shown = redis_url or "a private redis-server"
    out = run_guarded(lambda: run_all(server_url, redis_url, wanted, err), server_url, shown, err)
    if isinstance(out, int):
        return out
    report_targets(out, err)
    print(json.dumps(out))
    if check and not out["meets_targets"]:
        err.print("error: an agents target was missed (see bench/README.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
