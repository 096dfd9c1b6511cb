"""A fleet of agent processes for bench/agents.py: starting them lean, reading their
process trees and memory from /proc, and reading what Redis and PostgreSQL did meanwhile.

Every figure here comes from the kernel or the servers, never from the services' own
metrics: agents run without a metrics port (the least memory ``tickwork agent`` allows).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis
from _event_tap import EventTap
from _services import (
    BenchFailed,
    Service,
    free_port,
    is_ready,
    service_env,
    start_executors_and_agents,
    start_service,
    wait_until,
)
from rich.console import Console

from tickwork.services.agent.config import AGENT_SETTINGS
from tickwork.services.executor.config import EXECUTOR_SETTINGS
from tickwork.services.executor.report import Recovery
from tickwork.shared.store.engine import libpq_url

READY_LINE = '"logger": "celery.apps.worker"'
"""The agent's log line saying its Celery worker consumes (``... ready.``, at INFO)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OWN_APPLICATION = "bench-agents"
"""The ``application_name`` of the benchmark's own connections, left out of the count."""
LIVE_SECONDS = 5.0  # between progress lines when stderr is not a terminal
IDLE_SECONDS = 5.0  # Redis read with every agent idle, before any work
START_SECONDS_PER_AGENT = 6.0  # allowed to each agent to start (two cores, shared)
MEMORY_RESERVE_KIB = 4 * 1024 * 1024  # left to the rest of the machine
MEMORY_FLOOR_KIB = 1024 * 1024  # below this much available, the run stops
LOAD_KIB_PER_SLOT = 16 * 1024  # a running slot's memory over its idle pool process (measured)


def setting_default(settings: Sequence[Any], name: str) -> float:
    """The declared default of a ``TICKWORK_*`` setting, as a number."""
    return float(next(s.default for s in settings if s.name == name))


LEASE_TTL_SECONDS = setting_default(AGENT_SETTINGS, "TICKWORK_LEASE_TTL_SECONDS")
HEARTBEAT_SECONDS = setting_default(AGENT_SETTINGS, "TICKWORK_HEARTBEAT_SECONDS")
REAPER_SECONDS = setting_default(EXECUTOR_SETTINGS, "TICKWORK_REAPER_SECONDS")
REAPER_GRACE_SECONDS = Recovery().grace_seconds


def start_agents(
    services: list[Service],
    first: int,
    count: int,
    concurrency: int,
    redis_at: tuple[str, str],
    work_dir: Path,
    lease_args: Sequence[str] = (),
) -> list[Service]:
    """Start ``count`` ``tickwork agent`` processes named ``agent-<first>``... with the
    least memory the command allows: no metrics port (no metrics files, no HTTP thread),
    a work directory each under ``work_dir`` (a killed agent leaves its own behind), and
    no database URL (an agent never gets one). Each is appended to ``services`` as it
    starts, so that it is stopped whatever happens next."""
    redis_url, prefix = redis_at
    env = service_env(TICKWORK_REDIS_URL=redis_url, TICKWORK_REDIS_PREFIX=prefix)
    tickwork = str(Path(sys.executable).parent / "tickwork")
    started = []
    for index in range(first, first + count):
        agent_dir = work_dir / f"agent-{index}"
        agent_dir.mkdir()
        command = [
            tickwork,
            "agent",
            "--concurrency",
            str(concurrency),
            "--metrics-port",
            "0",
            "--work-dir",
            str(agent_dir),
            *lease_args,
        ]
        service = start_service(f"agent-{index}", command, env, work_dir, work_dir)
        services.append(service)
        started.append(service)
    return started


def start_private_redis(services: list[Service], redis_server: str, work_dir: Path) -> str:
    """A ``redis-server`` of the benchmark's own on a free port, keeping nothing on disk,
    so that its CPU and command counts are the fleet's alone; its URL once it answers.
    It is appended to ``services`` (stopped with them)."""
    port = free_port()
    command = [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(work_dir), "--maxclients", "10000"]
    services.append(start_service("redis", command, dict(os.environ), work_dir, work_dir))
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            with redis.Redis.from_url(url, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    wait_until(answers, 30, "the private Redis to answer", services)
    return url


def is_consuming(agent: Service) -> bool:
    """Whether the agent's Celery worker said it is ready (it consumes its queue)."""
    try:
        with agent.log_path.open("rb") as log:
            return any(READY_LINE.encode() in line and b" ready." in line for line in log)
    except OSError:
        return False


# --- processes ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessTree:
    """Every process's parent at one moment (from ``/proc/<pid>/stat``)."""

    parent: dict[int, int]

    @classmethod
    def read(cls) -> ProcessTree:
        parent: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _stat_fields(int(entry.name))
                if stat is not None:
                    parent[int(entry.name)] = int(stat[1])
        return cls(parent)

    def children(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {}
        for pid, ppid in self.parent.items():
            found.setdefault(ppid, []).append(pid)
        return found

    def descendants(self, root: int) -> list[int]:
        """``root``'s descendants, at any depth (``root`` not included)."""
        children = self.children()
        found, todo = [], list(children.get(root, []))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` from the state on (field 3 is ``[0]``); None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of one process (all its threads, and its reaped
    children); 0 if it is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


@dataclass
class Memory:
    """Resident (RSS) and proportional (PSS) memory of some processes, in KiB."""

    rss_kib: int = 0
    pss_kib: int = 0
    processes: int = 0

    def add(self, pid: int) -> None:
        """Add ``pid``'s ``/proc/<pid>/smaps_rollup`` (nothing if it is gone)."""
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            return
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            if name == "Rss":
                self.rss_kib += int(rest.split()[0])
            elif name == "Pss":
                self.pss_kib += int(rest.split()[0])
        self.processes += 1


def memory_of(pids: Iterable[int]) -> Memory:
    total = Memory()
    for pid in pids:
        total.add(pid)
    return total


def available_memory_kib() -> int:
    """``MemAvailable`` from /proc/meminfo: what can be used without swapping."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    raise OSError("no MemAvailable in /proc/meminfo")


def task_ids_in(pids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """``pid -> (task id, lease token)`` of the processes whose environment names a run
    (``TICKWORK_TASK_ID``: supervisors and what they started)."""
    found = {}
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(item.partition(b"=")[::2] for item in raw.split(b"\0") if b"=" in item)
        if b"TICKWORK_TASK_ID" in env and b"TICKWORK_LEASE_TOKEN" in env:
            found[pid] = (int(env[b"TICKWORK_TASK_ID"]), int(env[b"TICKWORK_LEASE_TOKEN"]))
    return found


# --- the agents' events ---------------------------------------------------------------


class RunTap(EventTap):
    """The agents' ``started`` and ``finished`` events of every run, by (task id, token),
    on the agents' clock; ``successes`` counts the ``finished`` events of each run that
    reported success (a result sent again counts again)."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        super().__init__(redis_url, prefix)
        self.starts: dict[tuple[int, int], float] = {}
        self.finishes: dict[tuple[int, int], float] = {}
        self.successes: dict[tuple[int, int], int] = {}

    def __enter__(self) -> RunTap:
        super().__enter__()
        return self

    def _note(self, raw: bytes | None) -> None:
        try:
            body: Any = json.loads(raw) if raw is not None else None
        except ValueError:
            return
        if not isinstance(body, dict) or not isinstance(body.get("task_id"), int):
            return
        run = (int(body["task_id"]), int(body.get("lease_token", 0)))
        if body.get("kind") == "started":
            self.starts.setdefault(run, float(body["started_at"]))
        elif body.get("kind") == "finished":
            self.finishes.setdefault(run, float(body["finished_at"]))
            if body.get("outcome") == "success":
                self.successes[run] = self.successes.get(run, 0) + 1


# --- the servers ----------------------------------------------------------------------


@dataclass(frozen=True)
class RedisReading:
    """What Redis had done by one moment: its CPU seconds (main process, user and system),
    commands by name, and its clients."""

    cpu_seconds: float
    calls: dict[str, int]
    clients: int

    @classmethod
    def read(cls, client: redis.Redis) -> RedisReading:
        cpu: Any = client.info("cpu")
        stats: Any = client.info("commandstats")
        clients: Any = client.info("clients")
        calls = {
            name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in stats.items()
            if isinstance(value, dict)
        }
        return cls(
            float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            calls,
            int(clients["connected_clients"]),
        )

    def calls_since(self, before: RedisReading) -> dict[str, int]:
        grown = {name: n - before.calls.get(name, 0) for name, n in self.calls.items()}
        return {name: n for name, n in grown.items() if n > 0}


@dataclass(frozen=True)
class DatabaseReading:
    """One database's counters in ``pg_stat_database`` and its open connections."""

    commits: int
    rows_written: int  # inserted + updated + deleted
    connections: int

    @classmethod
    def read(cls, server_url: str, database: str) -> DatabaseReading:
        query = (
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted,"
            " (SELECT count(*) FROM pg_stat_activity"
            "  WHERE datname = %(db)s AND application_name <> %(own)s)"
            " FROM pg_stat_database WHERE datname = %(db)s"
        )
        with psycopg.connect(libpq_url(server_url), autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(query, {"db": database, "own": OWN_APPLICATION}).fetchone()
        if row is None:
            raise LookupError(f"no database {database!r}")
        return cls(int(row[0]), int(row[1]), int(row[2]))


# --- the fleet and its runs -----------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """How big a run is."""

    agents: int
    concurrency: int
    tasks: int
    sleep_seconds: float
    kill: int
    lease_ttl_seconds: float = LEASE_TTL_SECONDS
    heartbeat_seconds: float = HEARTBEAT_SECONDS

    @property
    def slots(self) -> int:
        return self.agents * self.concurrency

    @property
    def ideal_seconds(self) -> float:
        return math.ceil(self.tasks / self.slots) * self.sleep_seconds

    @property
    def takeover_bound_seconds(self) -> float:
        """The latest a killed agent's task may start again: its lease outlives the agent
        by at most its TTL, a reaper pass comes within its interval, and a task must have
        been quiet for the reaper's grace."""
        return self.lease_ttl_seconds + REAPER_SECONDS + REAPER_GRACE_SECONDS

    def fitted(self, agents: int) -> Scale:
        """The same run with ``agents`` agents, tasks and kills in proportion."""
        share = agents / self.agents
        kill = min(agents - 1, max(1, round(self.kill * share))) if self.kill else 0
        tasks = max(1, round(self.tasks * share))
        return Scale(
            agents,
            self.concurrency,
            tasks,
            self.sleep_seconds,
            kill,
            self.lease_ttl_seconds,
            self.heartbeat_seconds,
        )


class Reporter:
    """Progress on stderr: a live status line on a terminal, JSON lines otherwise."""

    def __init__(self, err: Console) -> None:
        self.err = err
        self.live = err.status("starting") if err.is_terminal else None
        self._last_line = 0.0
        if self.live is not None:
            self.live.start()

    def event(self, message: str, **values: Any) -> None:
        """A step worth a line of its own."""
        if self.live is not None:
            self.err.print(message, highlight=False, soft_wrap=True)
        else:
            self._json(message, values)

    def status(self, message: str, **values: Any) -> None:
        """How things stand now: the live line, or a JSON line every few seconds."""
        if self.live is not None:
            self.live.update(message)
        elif time.monotonic() - self._last_line >= LIVE_SECONDS:
            self._json(message, values)

    def _json(self, message: str, values: dict[str, Any]) -> None:
        self._last_line = time.monotonic()
        line = {"time": round(time.time(), 3), "message": message, **values}
        self.err.print(json.dumps(line), highlight=False, soft_wrap=True, markup=False)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


@dataclass
class Fleet:
    """The executor and the agents, with what is needed to watch them."""

    services: list[Service]
    executor: Service
    agents: list[Service]  # those alive
    scale: Scale
    redis_at: tuple[str, str]  # URL and key prefix
    redis_client: redis.Redis
    idle: Memory = field(default_factory=Memory)
    idle_pool_processes: int = 0
    killed: list[Service] = field(default_factory=list)
    memory_available_kib: int = 0  # before the first agent started

    def sample(self) -> Sample:
        return Sample(
            time.time(),
            process_cpu_seconds(self.executor.process.pid),
            RedisReading.read(self.redis_client),
        )

    def lease_marks(self, task_ids: Sequence[int]) -> dict[str, int]:
        """How many of the tasks have each lease value, run ids left out (``1:queued``,
        ``2:running``...: what the reaper sees of them)."""
        prefix = self.redis_at[1]
        if not task_ids:
            return {}
        values: Any = self.redis_client.mget([f"{prefix}lease:{i}" for i in task_ids])
        counts: dict[str, int] = {}
        for value in values:
            token, _, holder = (value or b"none").decode().partition(":")
            mark = f"{token}:{holder if holder.isalpha() else 'held'}" if holder else token
            counts[mark] = counts.get(mark, 0) + 1
        return counts

    def lease_owners(self, task_ids: Sequence[int]) -> dict[tuple[int, int], int]:
        """``(task id, token) -> pid`` of the pool process holding each task's lease now
        (marks such as ``queued`` or ``done`` name no process and are left out)."""
        prefix = self.redis_at[1]
        values: Any = self.redis_client.mget([f"{prefix}lease:{i}" for i in task_ids])
        owners = {}
        for task_id, value in zip(task_ids, values, strict=True):
            token, _, owner = (value or b"").decode().partition(":")
            parts = owner.split("/")  # host/pid/run id
            if token.isdigit() and len(parts) >= 3 and parts[-2].isdigit():
                owners[(task_id, int(token))] = int(parts[-2])
        return owners

    def check(self) -> None:
        """Fail if a service died (killed agents aside) or memory runs low."""
        for service in [self.executor, *self.agents]:
            service.check_alive()
        left = available_memory_kib()
        if left < MEMORY_FLOOR_KIB:
            raise BenchFailed(f"only {left // 1024} MiB of memory left; stopped the run")

    def agent_memory(self) -> Memory:
        """RSS and PSS of every agent process and everything it started."""
        tree = ProcessTree.read()
        pids = [p for a in self.agents for p in (a.process.pid, *tree.descendants(a.process.pid))]
        return memory_of(pids)

    def agents_cpu_seconds(self) -> float:
        """CPU seconds of the agents' processes and what they reaped (tasks included)."""
        tree = ProcessTree.read()
        pids = [p for a in self.agents for p in (a.process.pid, *tree.descendants(a.process.pid))]
        return sum(process_cpu_seconds(pid) for pid in pids)


def start_fleet(
    services: list[Service],
    database_url: str,
    redis_at: tuple[str, str],
    work_dir: Path,
    wanted: Scale,
    reporter: Reporter,
) -> Fleet:
    """The executor, one agent whose idle memory says how many fit, then the rest; each
    agent consuming before the function returns."""
    redis_url, prefix = redis_at
    available = available_memory_kib()
    start_executors_and_agents(services, database_url, redis_url, prefix, work_dir, agents=0)
    executor = services[0]
    lease_args = [
        f"--lease-ttl={wanted.lease_ttl_seconds:g}",
        f"--heartbeat={wanted.heartbeat_seconds:g}",
    ]
    first = start_agents(services, 1, 1, wanted.concurrency, redis_at, work_dir, lease_args)
    wait_until(lambda: is_consuming(first[0]), 120, "the first agent to consume", services)
    wait_until(lambda: is_ready(executor.metrics_port), 60, "the executor to be ready", services)
    time.sleep(1.0)  # its pool processes settle
    scale = fit_to_memory(wanted, first[0], reporter)
    agents = first + start_agents(
        services, 2, scale.agents - 1, scale.concurrency, redis_at, work_dir, lease_args
    )
    began = time.monotonic()

    def all_consuming() -> bool:
        consuming = sum(map(is_consuming, agents))
        message = f"agents consuming: {consuming}/{len(agents)}"
        reporter.status(message, agents_consuming=consuming)
        return consuming == len(agents)

    timeout = START_SECONDS_PER_AGENT * len(agents) + 60
    wait_until(all_consuming, timeout, f"{len(agents)} agents to consume", services, 0.5)
    reporter.event(
        f"{len(agents)} agents x {scale.concurrency} consuming "
        f"after {time.monotonic() - began:.1f} s",
        agents=len(agents),
    )
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    fleet = Fleet(services, executor, agents, scale, redis_at, client)
    fleet.memory_available_kib = available
    return fleet


def fit_to_memory(wanted: Scale, probe: Service, reporter: Reporter) -> Scale:
    """``wanted``, or fewer agents if ``wanted`` would not fit in the available memory:
    each agent as ``probe`` idles, plus :data:`LOAD_KIB_PER_SLOT` per slot under load."""
    tree = ProcessTree.read()
    idle = memory_of([probe.process.pid, *tree.descendants(probe.process.pid)])
    per_agent = idle.pss_kib + wanted.concurrency * LOAD_KIB_PER_SLOT
    budget = available_memory_kib() + idle.pss_kib - MEMORY_RESERVE_KIB
    fits = max(2, budget // per_agent) if budget > 0 else 0
    if fits >= wanted.agents:
        return wanted
    if fits < 2:
        raise BenchFailed(f"not even two agents fit in memory ({budget // 1024} MiB to use)")
    scale = wanted.fitted(int(fits))
    reporter.event(
        f"{wanted.agents} agents would need about {wanted.agents * per_agent // 1024**2} GiB "
        f"(one idles at {idle.pss_kib // 1024} MiB PSS, +{LOAD_KIB_PER_SLOT // 1024} MiB per "
        f"running slot); {budget // 1024**2} GiB is free to use: running {scale.agents} "
        f"agents, {scale.tasks} tasks, killing {scale.kill}",
        fitted_agents=scale.agents,
    )
    return scale


def measure_idle(fleet: Fleet, reporter: Reporter) -> tuple[RedisReading, RedisReading]:
    """The agents' memory before any work, and Redis over :data:`IDLE_SECONDS` of idling."""
    tree = ProcessTree.read()
    pools = [tree.descendants(a.process.pid) for a in fleet.agents]
    fleet.idle = memory_of(
        [p for a, pool in zip(fleet.agents, pools, strict=True) for p in (a.process.pid, *pool)]
    )
    fleet.idle_pool_processes = sum(map(len, pools))
    before = RedisReading.read(fleet.redis_client)
    time.sleep(IDLE_SECONDS)
    after = RedisReading.read(fleet.redis_client)
    reporter.event(
        f"idle: {fleet.idle.rss_kib / 1024 / len(fleet.agents):.0f} MiB RSS, "
        f"{fleet.idle.pss_kib / 1024 / len(fleet.agents):.0f} MiB PSS per agent "
        f"({fleet.idle_pool_processes} pool processes)",
    )
    return before, after


@dataclass(frozen=True)
class Sample:
    """Counters at one moment of a fan-out."""

    at: float  # time.time()
    executor_cpu_seconds: float
    redis: RedisReading


@dataclass
class Kill:
    """What the kill did: when, which agents, and the runs they held."""

    at: float
    agents: list[str]
    runs: set[tuple[int, int]]  # (task id, token) whose lease a killed agent held
    survivors_runs: set[tuple[int, int]]  # held by the other agents at that moment
    orphans: int = 0  # processes of killed runs still alive a few seconds later


def agent_processes(fleet: Fleet) -> tuple[list[int], int]:
    """The pids of the live agents and of everything they started, and how many runs
    those processes belong to (the task processes name their run in their environment)."""
    tree = ProcessTree.read()
    pids = [p for a in fleet.agents for p in (a.process.pid, *tree.descendants(a.process.pid))]
    return pids, len(set(task_ids_in(pids).values()))


def kill_agents(fleet: Fleet, count: int, task_ids: Sequence[int]) -> Kill:
    """SIGKILL the process groups of ``count`` agents spread over the fleet, at once; note
    the runs whose leases they and the others held."""
    agents = fleet.agents
    victims = [agents[i * len(agents) // count] for i in range(count)]
    tree = ProcessTree.read()
    owner = {pid: a for a in agents for pid in tree.descendants(a.process.pid)}
    at = time.time()
    for victim in victims:
        victim.signal_group(signal.SIGKILL)
    for victim in victims:
        with suppress(Exception):
            victim.process.wait(timeout=10)
    held = fleet.lease_owners(task_ids)
    fleet.agents = [a for a in agents if a not in victims]
    fleet.killed += victims
    runs = {run for run, pid in held.items() if owner.get(pid) in victims}
    others = {run for run, pid in held.items() if pid in owner and owner[pid] not in victims}
    return Kill(at, [v.name for v in victims], runs, others)
