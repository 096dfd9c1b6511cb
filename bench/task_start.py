"""What a supervised start costs a task: ``true`` run bare, and started as ``run_child`` does.

Two ways of starting ``true`` and waiting for its end, each in a process group of its own:

- ``bare``: ``subprocess.run`` (a vfork and an exec), the floor;
- ``started``: under one of this process's task supervisors
  (services/agent/operators/supervisor.py), as every ``sh>`` and ``py>`` task starts.

They alternate in rounds of ``--batch`` runs (A B A B ...); the figures are the medians
over the rounds, wall and CPU milliseconds per run. CPU counts this process and every
process it waited for, and for ``started`` the supervisor and the commands it reaped.
Progress goes to stderr; the last stdout line is one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tickwork.services.agent.operators.base import ResourceLimits
from tickwork.services.agent.operators.process import Supervisors, start_task

COMMAND = ["true"]
TARGET_STARTED_TO_BARE = 3.0
"""A supervised start costs at most this many times a bare fork and exec of the command."""


def run_bare() -> None:
    subprocess.run(COMMAND, check=True, process_group=0, stdin=subprocess.DEVNULL)


def run_started() -> None:
    child = start_task(
        COMMAND,
        cwd=os.getcwd(),
        env=os.environ,
        limits=ResourceLimits(),
        output=sys.stderr.fileno(),
        given_input=None,
    )
    if child.wait(timeout=10) != 0:
        raise SystemExit("error: a supervised `true` failed")


def cpu_seconds() -> float:
    """This process's CPU, its reaped children's, and its idle supervisors' with theirs."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for supervisor in Supervisors._idle:
        fields = Path(f"/proc/{supervisor.pid}/stat").read_text().rpartition(")")[2].split()
        # utime, stime, cutime, cstime: fields 14 to 17 of stat(5), after pid and comm.
        total += sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def one_round(run: Callable[[], None], runs: int) -> tuple[float, float]:
    """Wall and CPU milliseconds per run of ``runs`` runs."""
    cpu_before, started = cpu_seconds(), time.perf_counter()
    for _ in range(runs):
        run()
    wall = time.perf_counter() - started
    return wall * 1000 / runs, (cpu_seconds() - cpu_before) * 1000 / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of each (default 10)")
    parser.add_argument("--batch", type=int, default=100, help="runs per round (default 100)")
    args = parser.parse_args()
    ways = {"bare": run_bare, "started": run_started}
    run_started()  # a supervisor starts once per slot of an agent process, not per task
    walls: dict[str, list[float]] = {name: [] for name in ways}
    cpus: dict[str, list[float]] = {name: [] for name in ways}
    for number in range(1, args.rounds + 1):
        for name, run in ways.items():
            wall, cpu = one_round(run, args.batch)
            walls[name].append(wall)
            cpus[name].append(cpu)
        print(
            f"round {number}/{args.rounds}: "
            + ", ".join(f"{name} {walls[name][-1]:.2f} ms" for name in ways),
            file=sys.stderr,
        )
    figures: dict[str, object] = {"runs_per_way": args.rounds * args.batch}
    for name in ways:
        figures[f"{name}_ms"] = round(statistics.median(walls[name]), 2)
        figures[f"{name}_cpu_ms"] = round(statistics.median(cpus[name]), 2)
    ratio = statistics.median(s / b for s, b in zip(walls["started"], walls["bare"], strict=True))
    cpu_ratio = statistics.median(s / b for s, b in zip(cpus["started"], cpus["bare"], strict=True))
    figures["started_to_bare"] = round(ratio, 2)
    figures["started_to_bare_cpu"] = round(cpu_ratio, 2)
    figures["target_started_to_bare"] = TARGET_STARTED_TO_BARE
    figures["meets_targets"] = ratio <= TARGET_STARTED_TO_BARE
    print(
        f"started/bare {ratio:.2f} (target at most {TARGET_STARTED_TO_BARE:g}), "
        f"CPU {cpu_ratio:.2f}",
        file=sys.stderr,
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
