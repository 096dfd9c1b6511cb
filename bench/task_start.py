"""What the supervisor adds to each task's start: ``true`` run N times, bare and supervised.

Each run goes through ``subprocess.run`` in its own process group, as ``run_child`` starts a
task; ``supervised`` adds the supervisor of services/agent/operators/supervisor.py (a Python
start-up, its prctl calls, one fork, and its sweep once ``true`` exits). Progress goes to
stderr; the last stdout line is one JSON object of figures: wall and CPU milliseconds per
run (the CPU time of the children, which other work on the machine inflates less).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

from tickwork.services.agent.operators.base import ResourceLimits
from tickwork.services.agent.operators.process import supervised

COMMAND = ["true"]


def milliseconds_per_run(argv: Sequence[str], runs: int) -> tuple[float, float]:
    """The mean wall and CPU time of one ``argv`` run to its exit, over ``runs`` runs."""
    cpu_before = _children_cpu_seconds()
    started = time.perf_counter()
    for _ in range(runs):
        subprocess.run(argv, check=True, process_group=0, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    return wall * 1000 / runs, (_children_cpu_seconds() - cpu_before) * 1000 / runs


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs of each (default 1000)")
    runs = parser.parse_args().runs
    bare, bare_cpu = milliseconds_per_run(COMMAND, runs)
    print(f"bare: {bare:.2f} ms per run ({bare_cpu:.2f} ms CPU)", file=sys.stderr)
    wrapped, wrapped_cpu = milliseconds_per_run(supervised(COMMAND, ResourceLimits()), runs)
    print(f"supervised: {wrapped:.2f} ms per run ({wrapped_cpu:.2f} ms CPU)", file=sys.stderr)
    figures = {
        "runs": runs,
        "bare_ms": round(bare, 2),
        "supervised_ms": round(wrapped, 2),
        "added_ms": round(wrapped - bare, 2),
        "bare_cpu_ms": round(bare_cpu, 2),
        "supervised_cpu_ms": round(wrapped_cpu, 2),
        "added_cpu_ms": round(wrapped_cpu - bare_cpu, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
