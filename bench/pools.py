"""Pool overhead: a 2,000-task fan-out through the executor and agents with every task in
a 50-slot pool, against the same fan-out in no pool, in the same run.

One ``tickwork executor`` and two ``tickwork agent --concurrency 1`` processes on a
throwaway PostgreSQL database and a Redis key prefix (as bench/dispatch.py's fan-out).
The cases alternate (none, pool, none, pool...) so that a drift of the machine falls on
both; each is one attempt of one ``_parallel: true`` group of ``echo>: x`` tasks, the
pooled one with ``_pool: bench`` on the group. The clock runs from just before the
transaction that creates the attempt until the attempt is seen in ``success`` (polled
every 10 ms). With two agent processes the pool never holds a task back for want of an
agent: what the pool costs is the executor's admission (a locked pool row, a count of its
tasks in flight and a ranked read of its ready tasks, in the passes that may have freed a
slot). Each pooled attempt is also checked never to have had more than 50 tasks in flight
(the executor's queued and running tasks, sampled every 10 ms).

The target: pooled tasks/s at least 0.85 x unpooled (within 15 %), medians of the rounds.
Progress goes to stderr; the last stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import sqlalchemy as sa
from _services import (
    BenchFailed,
    redis_prefix,
    run_guarded,
    running,
    start_executors_and_agents,
)
from _stores import noop_workflow_text, run_request, throwaway_database
from dispatch import services_cpu_seconds
from rich.console import Console

from tickwork.services.compose.embedded import create_run_attempt
from tickwork.shared.clock import utc_now
from tickwork.shared.store import pools as pool_store
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.tables import attempts, tasks

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
TASKS = 2000
SLOTS = 50
ROUNDS = 3
AGENTS = 2
TARGET_RATIO = 0.85
SETTLE_SECONDS = 300


def attempt_state(engine: sa.Engine, attempt_id: int) -> str:
    with engine.connect() as conn:
        query = sa.select(attempts.c.state).where(attempts.c.id == attempt_id)
        return str(conn.execute(query).scalar_one())


def in_flight(engine: sa.Engine, attempt_id: int) -> int:
    query = sa.select(sa.func.count()).where(
        tasks.c.attempt_id == attempt_id, tasks.c.state.in_(["queued", "running"])
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def one_case(
    engine: sa.Engine,
    url: str,
    work_dir: Path,
    services: list,
    pooled: bool,
    tasks_n: int,  # type: ignore[type-arg]
) -> dict[str, float]:
    """One fan-out attempt, timed; its tasks/s, executor CPU ms per task and the most
    tasks it had in flight at once."""
    text = noop_workflow_text(tasks_n, parallel=True)
    if pooled:
        text = "_pool: bench\n" + text
    name = "pooled" if pooled else "plain"
    request = run_request(url, work_dir, name, text)
    executor_cpu = services_cpu_seconds(services[:1])
    began = time.perf_counter()
    with engine.begin() as conn:
        attempt_id = create_run_attempt(conn, request, utc_now()).attempt_id
    most = 0
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        state = attempt_state(engine, attempt_id)
        if state in ("success", "error"):
            break
        most = max(most, in_flight(engine, attempt_id))
        for service in services:
            service.check_alive()
        if time.monotonic() > deadline:
            raise BenchFailed(f"the {name} fan-out did not end in {SETTLE_SECONDS} s")
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    if state != "success":
        raise BenchFailed(f"the {name} fan-out ended in {state}")
    if pooled and most > SLOTS:
        raise BenchFailed(f"{most} pooled tasks were in flight at once, over {SLOTS} slots")
    cpu = services_cpu_seconds(services[:1]) - executor_cpu
    return {
        "tasks_per_s": tasks_n / seconds,
        "seconds": seconds,
        "executor_cpu_ms_per_task": 1000 * cpu / tasks_n,
        "most_in_flight": float(most),
    }


def run(
    server_url: str, redis_url: str, rounds: int, tasks_n: int, err: Console
) -> dict[str, object]:
    with ExitStack() as stack:
        prefix = stack.enter_context(redis_prefix(redis_url))
        url = stack.enter_context(throwaway_database(server_url))
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tickwork-bench-")))
        engine = open_migrated_store(url)
        stack.callback(engine.dispose)
        with engine.begin() as conn:
            pool_store.set_pool(conn, "bench", SLOTS, "bench/pools.py", utc_now())
        services = stack.enter_context(running([]))
        start_executors_and_agents(services, url, redis_url, prefix, work_dir, agents=AGENTS)
        one_case(engine, url, work_dir, services, pooled=True, tasks_n=20)  # warm-up
        results: dict[str, list[dict[str, float]]] = {"plain": [], "pooled": []}
        for index in range(rounds):
            for pooled in (False, True):
                case = "pooled" if pooled else "plain"
                found = one_case(engine, url, work_dir, services, pooled, tasks_n)
                results[case].append(found)
                err.print(
                    f"round {index + 1}/{rounds} {case}: {found['tasks_per_s']:.0f} tasks/s",
                    highlight=False,
                )

    def median(case: str, key: str) -> float:
        return statistics.median(r[key] for r in results[case])

    plain, pooled_rate = median("plain", "tasks_per_s"), median("pooled", "tasks_per_s")
    ratio = pooled_rate / plain
    return {
        "tasks": tasks_n,
        "slots": SLOTS,
        "rounds": rounds,
        "plain_tasks_per_s": round(plain, 1),
        "pooled_tasks_per_s": round(pooled_rate, 1),
        "pooled_vs_plain": round(ratio, 3),
        "plain_executor_cpu_ms_per_task": round(median("plain", "executor_cpu_ms_per_task"), 3),
        "pooled_executor_cpu_ms_per_task": round(median("pooled", "executor_cpu_ms_per_task"), 3),
        "pooled_most_in_flight": max(r["most_in_flight"] for r in results["pooled"]),
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"default {ROUNDS}")
    parser.add_argument("--tasks", type=int, default=TASKS, help=f"default {TASKS}")
    args = parser.parse_args()
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    result = run_guarded(
        lambda: run(server_url, redis_url, max(1, args.rounds), max(10, args.tasks), err),
        server_url,
        redis_url,
        err,
    )
    if isinstance(result, int):
        return result
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
