"""Embedded-mode throughput: ``echo>`` tasks per second on SQLite, fanned out and chained.

Each case runs in a state directory of its own through
``tickwork.services.compose.embedded.run_workflow``
with no display; each task's log goes to the run's SQLite store, as chunks (no file per
task). The directories are removed together at the end, not one by one. Progress
goes to stderr (a bar on a terminal, one line per case otherwise); the last stdout line is
one JSON object of figures. A run that does not end in success, or runs a task other than
exactly once, stops the benchmark with exit status 1."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    event,
    func,
    select,
)

from tickwork.services.compose.embedded import RunRequest, default_session_time, run_workflow
from tickwork.shared.clock import SystemClock
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.logs import list_run_logs
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.sessions import get_attempt
from tickwork.shared.store.tasks import list_attempt_tasks

# Targets on a 2-core machine; see bench/README.md.
TARGET_PARALLEL_TASKS_PER_S = 1000.0
TARGET_CHAIN_TASKS_PER_S = 1000.0
TARGET_RATIO_2000_VS_500 = 0.8
TARGET_RATIO_10000_VS_500 = 1.0
"""Flat with size: a 10,000-task fan-out at least as fast per task as a 500-task one."""
FLOOR_LINKS = 2000
"""Links of the floor chain (:func:`floor_ms_per_link`)."""
MAX_TASKS = 10_100
"""The attempt limit for the runs: above the default 10,000, so that a 10,000-task group
(plus its parents) fits."""


@dataclass(frozen=True)
class Case:
    """One workflow shape: ``tasks`` echo> tasks in one group, fanned out or chained."""

    name: str
    tasks: int
    parallel: bool


CASES = (
    Case("parallel_500", 500, parallel=True),
    Case("parallel_2000", 2000, parallel=True),
    Case("parallel_10000", 10_000, parallel=True),
    Case("chain_500", 500, parallel=False),
)


@dataclass(frozen=True)
class CaseResult:
    """How long one case took and how many SQL statements it ran."""

    case: Case
    attempt_seconds: float  # run_workflow(): attempt created -> its end seen by the loop
    wall_seconds: float  # parse + store set-up (migrations) + the run
    sql_statements: int  # sent to the driver during run_workflow(); an executemany is one
    loop_cpu_seconds: float  # CPU of the thread that runs the executor's loop, in the run

    @property
    def tasks_per_s(self) -> float:
        return self.case.tasks / self.attempt_seconds


class BenchFailed(Exception):
    """A run ended in something other than success, or ran the wrong set of tasks."""


def workflow_text(case: Case) -> str:
    """A workflow whose one group holds ``case.tasks`` echo> tasks."""
    lines = ["+all:"]
    if case.parallel:
        lines.append("  _parallel: true")
    for index in range(case.tasks):
        lines += [f"  +t{index:05d}:", f"    echo>: task {index}"]
    return "\n".join(lines) + "\n"


@contextmanager
def counting_statements(engine: Engine) -> Iterator[list[int]]:
    """Count the SQL statements ``engine`` runs inside the block (an executemany is one)."""
    count = [0]

    def on_execute(*_args: Any) -> None:
        count[0] += 1

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield count
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


def run_case(case: Case, parent: Path) -> CaseResult:
    """Run one case in a new state directory under ``parent`` (left for the caller to
    remove) and check that every task ran once."""
    project_dir = Path(tempfile.mkdtemp(prefix=f"{case.name}-", dir=parent))
    started = time.perf_counter()
    definition = parse_workflow_text(workflow_text(case), "bench.dig", project_dir)
    request = RunRequest(
        definition=definition,
        project_dir=project_dir,
        state_dir=project_dir / ".tickwork",
        database_url=f"sqlite:///{project_dir / 'tickwork.db'}",
        params={},
        session_time=default_session_time(definition, SystemClock().now()),
        max_tasks_per_attempt=MAX_TASKS,
    )
    engine = open_migrated_store(request.database_url)
    run_started, cpu_started = time.perf_counter(), time.thread_time()
    with counting_statements(engine) as statements:
        outcome = run_workflow(request, engine=engine)
    ended, cpu_ended = time.perf_counter(), time.thread_time()
    check_run(engine, case, outcome.attempt_id, outcome.state)
    engine.dispose()
    return CaseResult(
        case=case,
        attempt_seconds=ended - run_started,
        wall_seconds=ended - started,
        sql_statements=statements[0],
        loop_cpu_seconds=cpu_ended - cpu_started,
    )


_FLOOR = MetaData()
_FLOOR_TASKS = Table(
    "floor_tasks",
    _FLOOR,
    Column("id", Integer, primary_key=True),
    Column("state", String(16), nullable=False),
    Column("lease_token", Integer, nullable=False),
    Column("output_params", JSON),
    Column("updated_at", DateTime, nullable=False),
)
_FLOOR_LOGS = Table(
    "floor_logs",
    _FLOOR,
    Column("id", Integer, primary_key=True),
    Column("task_id", Integer, nullable=False),
    Column("data", Text, nullable=False),
)
_END = (
    _FLOOR_TASKS.update()
    .where(_FLOOR_TASKS.c.id == bindparam("ended"), _FLOOR_TASKS.c.lease_token == 1)
    .values(state="success", output_params=bindparam("output"), updated_at=bindparam("now"))
)
_READY = (
    _FLOOR_TASKS.update()
    .where(_FLOOR_TASKS.c.id == bindparam("next"), _FLOOR_TASKS.c.state == "blocked")
    .values(state="ready", updated_at=bindparam("now"))
    .returning(*_FLOOR_TASKS.c)
)
_QUEUE = (
    _FLOOR_TASKS.update()
    .where(_FLOOR_TASKS.c.id == bindparam("next"), _FLOOR_TASKS.c.state == "ready")
    .values(state="queued", lease_token=_FLOOR_TASKS.c.lease_token + 1, updated_at=bindparam("now"))
    .returning(_FLOOR_TASKS.c.id, _FLOOR_TASKS.c.lease_token)
)
_LOG = _FLOOR_LOGS.insert().values(task_id=bindparam("ended"), data=bindparam("data"))


def floor_ms_per_link(parent: Path) -> float:
    """The least a chain link costs on this machine, measured in the same run: a chain of
    :data:`FLOOR_LINKS` links on an engine of the store's own set-up (``create_store_engine``:
    WAL, ``synchronous=NORMAL``, ``BEGIN IMMEDIATE``), each link one transaction of the
    writes a link of ``chain_500`` makes, as single-row SQLAlchemy Core statements on two
    bare tables: end the task with its output, make the next one ready (its row returned),
    queue it (its token raised), store a log row and a chunk row. No executor, no agent,
    no thread, no index beyond the keys."""
    directory = Path(tempfile.mkdtemp(prefix="floor-", dir=parent))
    engine = create_store_engine(f"sqlite:///{directory / 'floor.db'}")
    try:
        now = SystemClock().now()
        with engine.begin() as conn:
            _FLOOR.create_all(conn)
            rows = [  # the first in flight under token 1, as each next one is once queued
                {
                    "id": i,
                    "state": "queued" if i == 0 else "blocked",
                    "lease_token": 1 if i == 0 else 0,
                    "updated_at": now,
                }
                for i in range(FLOOR_LINKS + 1)
            ]
            conn.execute(_FLOOR_TASKS.insert(), rows)
        with engine.connect() as conn:
            started = time.perf_counter()
            for link in range(FLOOR_LINKS):
                values = {
                    "ended": link,
                    "next": link + 1,
                    "now": now,
                    "output": {"n": link},
                    "data": "task",
                }
                with conn.begin():
                    conn.execute(_END, values)
                    conn.execute(_READY, values).all()
                    conn.execute(_QUEUE, values).all()
                    conn.execute(_LOG, values)
                    conn.execute(_LOG, values)
            seconds = time.perf_counter() - started
            ended = conn.execute(select(func.count()).where(_FLOOR_TASKS.c.state == "success"))
            if ended.scalar_one() != FLOOR_LINKS:
                raise BenchFailed("floor: a link did not end its task and queue the next")
            return 1000 * seconds / FLOOR_LINKS
    finally:
        engine.dispose()


def check_run(engine: Engine, case: Case, attempt_id: int, state: AttemptState) -> None:
    """Fail unless the attempt succeeded, ran each of its tasks exactly once and stored
    each run's whole log."""
    with engine.connect() as conn:
        attempt = get_attempt(conn, attempt_id)
        operators = [t for t in list_attempt_tasks(conn, attempt_id) if not t.is_group]
        logs = list_run_logs(conn, attempt_id)
    problems = []
    if state is not AttemptState.SUCCESS or attempt.state is not AttemptState.SUCCESS:
        problems.append(f"attempt ended {state.value} (stored: {attempt.state.value})")
    if len(operators) != case.tasks:
        problems.append(f"{len(operators)} tasks stored, {case.tasks} expected")
    not_done = [t.full_name for t in operators if t.state is not TaskState.SUCCESS]
    if not_done:
        problems.append(f"{len(not_done)} tasks not in success, e.g. {not_done[:3]}")
    ran_again = [t.full_name for t in operators if t.lease_token != 1]
    if (
        len(logs) != case.tasks
        or len({log.task_full_name for log in logs}) != case.tasks
        or ran_again
    ):
        problems.append(f"{len(logs)} runs logged for {case.tasks} tasks; rerun: {ran_again[:3]}")
    unstored = [log.task_full_name for log in logs if not log.stored_bytes or log.missing_bytes]
    if unstored:
        problems.append(f"{len(unstored)} logs not whole in the store, e.g. {unstored[:3]}")
    if problems:
        raise BenchFailed(f"{case.name}: " + "; ".join(problems))


def median_result(results: list[CaseResult]) -> CaseResult:
    """The run with the median attempt duration (the only run when there is one)."""
    ordered = sorted(results, key=lambda r: r.attempt_seconds)
    return ordered[(len(ordered) - 1) // 2]


def describe(result: CaseResult) -> str:
    """One human line about a case."""
    return (
        f"{result.case.name}: {result.tasks_per_s:,.0f} tasks/s "
        f"({result.attempt_seconds:.2f} s run, {result.wall_seconds:.2f} s wall, "
        f"{result.sql_statements / result.case.tasks:.1f} SQL statements/task)"
    )


@dataclass(frozen=True)
class Results:
    """The median run of each case, and the median floor (measured after each chain run)."""

    cases: dict[str, CaseResult]
    floor_ms_per_link: float


def run_all(repeat: int, err: Console) -> Results:
    """Run every case ``repeat`` times, each chain run followed by the floor, reporting on
    stderr; the median run of each case and the median floor."""
    chosen: dict[str, CaseResult] = {}
    floors: list[float] = []
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with (
        Progress(
            *columns, console=err, disable=not err.is_terminal, refresh_per_second=4
        ) as progress,
        tempfile.TemporaryDirectory(prefix="tickwork-bench-local-") as parent,
    ):
        bar = progress.add_task("starting", total=len(CASES) * repeat)
        for case in CASES:
            results = []
            for round_number in range(1, repeat + 1):
                progress.update(bar, description=f"{case.name} ({round_number}/{repeat})")
                results.append(run_case(case, Path(parent)))
                if not case.parallel:
                    floors.append(floor_ms_per_link(Path(parent)))
                progress.advance(bar)
            chosen[case.name] = median_result(results)
            progress.console.print(describe(chosen[case.name]), highlight=False, soft_wrap=True)
    floor = statistics.median_low(floors)
    err.print(
        f"floor: {floor:.3f} ms a link (bare statements, same engine set-up)", highlight=False
    )
    return Results(chosen, floor)


def figures(measured: Results) -> dict[str, Any]:
    """The JSON figures: tasks/s per case, the size ratios, the chain against its floor,
    and the supporting times."""
    results = measured.cases
    parallel_500 = results["parallel_500"].tasks_per_s
    parallel_2000 = results["parallel_2000"].tasks_per_s
    parallel_10000 = results["parallel_10000"].tasks_per_s
    chain = results["chain_500"]
    chain_ms_per_task = 1000 * chain.attempt_seconds / chain.case.tasks
    out: dict[str, Any] = {
        "parallel_500_tasks_per_s": round(parallel_500, 1),
        "parallel_2000_tasks_per_s": round(parallel_2000, 1),
        "parallel_10000_tasks_per_s": round(parallel_10000, 1),
        "chain_500_tasks_per_s": round(chain.tasks_per_s, 1),
        "parallel_ratio_2000_vs_500": round(parallel_2000 / parallel_500, 3),
        "parallel_ratio_10000_vs_500": round(parallel_10000 / parallel_500, 3),
        "chain_ms_per_task": round(chain_ms_per_task, 2),
        "chain_loop_cpu_ms_per_task": round(1000 * chain.loop_cpu_seconds / chain.case.tasks, 2),
        "chain_floor_ms_per_link": round(measured.floor_ms_per_link, 3),
        "chain_vs_floor": round(chain_ms_per_task / measured.floor_ms_per_link, 2),
    }
    for name, result in results.items():
        out[f"{name}_wall_seconds"] = round(result.wall_seconds, 3)
        out[f"{name}_attempt_seconds"] = round(result.attempt_seconds, 3)
        out[f"{name}_sql_per_task"] = round(result.sql_statements / result.case.tasks, 1)
    out["meets_targets"] = (
        min(parallel_500, parallel_2000, parallel_10000) >= TARGET_PARALLEL_TASKS_PER_S
        and chain.tasks_per_s >= TARGET_CHAIN_TASKS_PER_S
        and parallel_2000 / parallel_500 >= TARGET_RATIO_2000_VS_500
        and parallel_10000 / parallel_500 >= TARGET_RATIO_10000_VS_500
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the median counts")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    err = Console(stderr=True)
    try:
        results = run_all(max(1, args.repeat), err)
    except BenchFailed as exc:
        err.print(f"error: {exc}", highlight=False)
        return 1
    out = figures(results)
    print(json.dumps(out))
    if args.check and not out["meets_targets"]:
        err.print("error: a throughput target was missed (see bench/README.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
