"""A task whose agent is killed dies with it, with every process it started, however started.

The test runs a real cluster (tests/fault/_cluster.py): one ``tickwork executor`` and two
``tickwork agent`` processes, each in its own session. The task's command starts
grandchildren three ways (a fork chain, a pipeline, and a double fork into a session of its
own), and each writes a side effect tagged with the run's lease token. The agent running
the task is killed with SIGKILL; the test finds the run's processes through /proc (a mark
in their environment and their lease token) and requires them gone within seconds, and the
side effects to be those of the replacement run only. Every wait is bounded; on the way
out every process of the task is killed too, even one that left the cluster's sessions.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
import uuid
from pathlib import Path

import pytest

from tests.fault._cluster import (
    STOP_TIMEOUT_SECONDS,
    Cluster,
    command_line,
    is_running,
    session_of,
    workflow_text,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow]

GONE_WITHIN_SECONDS = 2.0
"""How long after the agent's SIGKILL a process of its task may still exist."""
FIRST_START_SECONDS = 20.0


def task_command(mark: str, effects: Path, ledger_start: str, ledger_end: str) -> str:
    """A command that forks a chain, a pipeline and a setsid()-ed double fork, each writing
    ``<kind> <lease token>`` to ``effects`` after a while, and ends once all three did."""
    effect = 'echo "{kind} $TICKWORK_LEASE_TOKEN" >> "$EFFECTS"'
    return "\n".join(
        [
            f"export MARK={mark} EFFECTS={shlex.quote(str(effects))}",
            f"sh -c {shlex.quote('sleep 4 && ' + effect.format(kind='chain'))} &",
            f"sleep 4 | (cat; {effect.format(kind='pipeline')}) &",
            f"(setsid sh -c {shlex.quote('sleep 2 && ' + effect.format(kind='escaped'))} &)",
            ledger_start,
            "wait",
            'until grep -q "escaped $TICKWORK_LEASE_TOKEN" "$EFFECTS"; do sleep 0.1; done',
            ledger_end,
        ]
    )


def environment_of(pid: int) -> set[str]:
    """The ``NAME=value`` strings process ``pid`` was started with; empty once it is gone."""
    with contextlib.suppress(OSError):
        return set(Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0"))
    return set()


def processes_of_run(mark: str, token: int) -> list[int]:
    """Live (not zombie) processes started with ``MARK=mark`` and lease token ``token`` in
    their environment, or with ``mark`` in their command line (the shell and its parent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        environment = environment_of(pid)
        with contextlib.suppress(OSError):
            marked = (
                f"MARK={mark}" in environment or mark.encode() in (entry / "cmdline").read_bytes()
            )
            started = f"TICKWORK_LEASE_TOKEN={token}" in environment
            if marked and started and is_running(pid):
                found.append(pid)
    return found


def describe(pids: list[int]) -> str:
    return "\n".join(f"  {pid}: {' '.join(command_line(pid))[:120]}" for pid in pids)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def sleepers(mark: str, token: int) -> list[int]:
    """The run's ``sleep`` processes: one per way of forking, once all three started."""
    return [pid for pid in processes_of_run(mark, token) if command_line(pid)[:1] == ["sleep"]]


@pytest.mark.timeout(60)
def test_a_killed_agents_task_dies_with_it_and_only_the_replacement_does_the_work(
    cluster: Cluster,
) -> None:
    # Given two agents, and a task whose command forks a chain, a pipeline and a process
    # that double-forks into a session of its own
    cluster.start_executor()
    agents = [cluster.start_agent("agent-a"), cluster.start_agent("agent-b")]
    mark, effects = uuid.uuid4().hex, cluster.project_dir / "effects.txt"
    ledger = cluster.ledger
    command = task_command(mark, effects, ledger.note("start", "work"), ledger.note("end", "work"))
    attempt = cluster.submit("dead_agent", workflow_text({"work": command}))
    first = cluster.wait_for_start("work", FIRST_START_SECONDS)
    try:
        wait_until("the three sleepers run", lambda: len(sleepers(mark, first.token)) == 3, 5)
        running = [agent for agent in agents if agent.pid == session_of(first.pid)]
        assert len(running) == 1, cluster.explain(attempt)

        # When the agent running it is killed
        killed_at = time.monotonic()
        running[0].signal_group(signal.SIGKILL)
        running[0].wait_exit(STOP_TIMEOUT_SECONDS)

        # Then within seconds no process of that run is left, not even the one that left
        left: list[int] = []

        def none_left() -> bool:
            left[:] = processes_of_run(mark, first.token)
            return not left

        remaining = GONE_WITHIN_SECONDS - (time.monotonic() - killed_at)
        try:
            wait_until("the killed agent's task is gone", none_left, max(remaining, 0.0))
        except AssertionError as exc:
            raise AssertionError(f"{exc}; still running:\n{describe(left)}") from None

        # And the other agent's run is the only one that does the work
        state = cluster.wait_for_attempt_end(attempt, 40)
        task = cluster.task(attempt, "work")
        explained = cluster.explain(attempt)
        assert state == "success", explained
        assert task.lease_token > first.token, explained
        written = sorted(effects.read_text().splitlines())
        token = task.lease_token
        assert written == [f"chain {token}", f"escaped {token}", f"pipeline {token}"], explained
        assert [end.token for end in ledger.ends("work")] == [token], explained
        assert cluster.applied_results(attempt, "work") == [token], explained
    finally:
        kill_all(processes_of_run(mark, first.token))
