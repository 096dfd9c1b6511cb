"""A rollout from the previous release (tests/e2e/_previous_release.py) to this one on one
store and Redis prefix, the workloads it runs, and what a spec watches of it.

A :class:`Workload` is a workflow of short tasks and long ones, in parallel, each writing
numbered lines. A :class:`LongTask` writes its first lines, waits for the gate file
``switched``, writes the rest, then waits for the gate ``drained`` writing nothing: a
test opens the gates, so a run's first lines reach whichever executor held the attempt
before the switch and the rest the one after, and an agent stopped during the last wait
gives back a run whose log is whole.

The watchers read the store with plain SQL where either release's schema may be there,
and through this release's store module once it migrated.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

from tests.e2e._previous_release import ReleaseServices
from tests.e2e._run import tickwork_command
from tests.fault._cluster import Cluster, Service, base_environment, workflow_text
from tests.support.waiting import wait_until
from tickwork.shared.store import logs as log_store

RUN_SECONDS = 60.0
"""How long the tasks a step of the rollout waits for may take."""
EXIT_SECONDS = 20.0
"""How long a process sent SIGTERM may take to exit."""
COMMAND_SECONDS = 60.0
"""Bound of a one-shot ``tickwork`` command of this release."""
GATE_POLLS = 2400
"""A long task waits at most this many times 0.05 s for a gate, then fails."""
DONE_STATES = ("success", "error", "killed", "canceled")

LogsRead = dict[tuple[str, int], tuple[bytes, int]]
"""Runs' logs by (task name, run): the text and the bytes missing from the store."""


# --- what the tasks write ----------------------------------------------------------------


def numbered(label: str, first: int, last: int) -> bytes:
    """Lines ``<label> <n>``, n from ``first`` to ``last`` zero-padded to 6 digits."""
    return b"".join(f"{label} {n:06d}\n".encode() for n in range(first, last + 1))


def lines_command(label: str, first: int, last: int) -> str:
    """Writes :func:`numbered` ``(label, first, last)``, a line every 10 ms or so."""
    return (
        f"n={first}; while [ $n -le {last} ]; do"
        f" printf '{label} %06d\\n' $n; n=$((n+1)); sleep 0.01; done"
    )


def gate_command(gate: Path) -> str:
    """Waits (bounded) until the file ``gate`` exists."""
    return (
        f"i=0; until [ -e '{gate}' ]; do"
        f" i=$((i+1)); [ $i -le {GATE_POLLS} ] || exit 9; sleep 0.05; done"
    )


@dataclass(frozen=True)
class LongTask:
    """Writes lines 1 to ``first_lines``, waits for the gate ``switched``, writes the rest
    up to ``lines``, then waits for the gate ``drained`` (writing nothing)."""

    name: str
    first_lines: int
    lines: int


@dataclass(frozen=True)
class Workload:
    """A workflow ``name`` running ``shorts`` short tasks and ``longs``, in parallel."""

    name: str
    shorts: int
    longs: tuple[LongTask, ...]

    def label(self, task: str) -> str:
        return f"{self.name}-{task}"

    def short_names(self) -> list[str]:
        return [f"s{n:02d}" for n in range(1, self.shorts + 1)]

    def text(self, gates: Path) -> str:
        """The workflow file's text; ``s<n>`` writes 3n lines."""
        tasks = {s: f"seq -f '{self.label(s)} %06g' 1 {3 * n}" for n, s in self._shorts()}
        for long in self.longs:
            label = self.label(long.name)
            tasks[long.name] = "; ".join(
                [
                    lines_command(label, 1, long.first_lines),
                    gate_command(gates / "switched"),
                    lines_command(label, long.first_lines + 1, long.lines),
                    gate_command(gates / "drained"),
                ]
            )
        return workflow_text(tasks, parallel=True)

    def _shorts(self) -> list[tuple[int, str]]:
        return list(enumerate(self.short_names(), 1))

    def written(self) -> dict[str, bytes]:
        """What every run of each task writes, by task name."""
        found = {s: numbered(self.label(s), 1, 3 * n) for n, s in self._shorts()}
        for long in self.longs:
            found[long.name] = numbered(self.label(long.name), 1, long.lines)
        return found

    def first_part(self, long: LongTask) -> bytes:
        """What ``long`` writes before the gate ``switched``."""
        return numbered(self.label(long.name), 1, long.first_lines)


# --- watching the store ------------------------------------------------------------------


def operator_tasks(engine: sa.Engine, attempt_id: int) -> dict[str, tuple[int, str, int]]:
    """The attempt's operator tasks by short name: id, state and last lease token."""
    query = sa.text(
        "SELECT id, full_name, state, lease_token FROM tasks"
        " WHERE attempt_id = :attempt AND NOT is_group"
    )
    with engine.connect() as conn:
        rows = conn.execute(query, {"attempt": attempt_id}).all()
    return {
        str(r.full_name).rsplit("+", 1)[-1]: (int(r.id), str(r.state), int(r.lease_token))
        for r in rows
    }


def tasks_succeeded(engine: sa.Engine, attempt_id: int, names: list[str]) -> bool:
    """Whether the attempt's tasks ``names`` all exist and succeeded."""
    tasks = operator_tasks(engine, attempt_id)
    return all(name in tasks and tasks[name][1] == "success" for name in names)


def attempt_state(engine: sa.Engine, attempt_id: int) -> str:
    query = sa.text("SELECT state FROM attempts WHERE id = :attempt")
    with engine.connect() as conn:
        return str(conn.execute(query, {"attempt": attempt_id}).scalar_one())


def old_log_size(log_dir: Path, attempt_id: int, task_id: int, token: int) -> int:
    """The size of the old executor's file of a run
    (``<attempt>/<task>.<task id>.<token>.log``); -1 while there is none."""
    found = sorted((log_dir / str(attempt_id)).glob(f"*.{task_id}.{token}.log"))
    return found[0].stat().st_size if found else -1


def stored_reach(engine: sa.Engine, attempt_id: int, task_id: int, token: int) -> int:
    """How far the stored log of a run reaches (this release's schema); -1 if unlisted."""
    with engine.connect() as conn:
        runs = log_store.list_run_logs(conn, attempt_id, task_id=task_id)
    return max((r.size_bytes for r in runs if r.lease_token == token), default=-1)


def chunks_and_runs(engine: sa.Engine) -> list[tuple[Any, ...]]:
    """Every stored log chunk (its key, size and a digest of its data) and run row."""
    with engine.connect() as conn:
        chunks = conn.execute(
            sa.text(
                "SELECT task_id, lease_token, byte_offset, size_bytes, compressed, md5(data)"
                " FROM task_log_chunks ORDER BY 1, 2, 3"
            )
        ).all()
        runs = conn.execute(
            sa.text(
                "SELECT id, task_id, lease_token, path, size_bytes, ended_at, pruned_at"
                " FROM task_logs ORDER BY id"
            )
        ).all()
    return [tuple(row) for row in [*chunks, *runs]]


def expected_logs(engine: sa.Engine, attempt_id: int, workload: Workload) -> LogsRead:
    """Every run of every task (1 to its last lease token) with what the task wrote, and
    nothing missing."""
    written = workload.written()
    return {
        (name, token): (written[name], 0)
        for name, (_, _, last) in operator_tasks(engine, attempt_id).items()
        for token in range(1, last + 1)
    }


# --- reading logs through the API ---------------------------------------------------------


def logs_read(api: httpx.Client, attempt_id: int) -> LogsRead:
    """Each run ``/api/logs/<attempt>/files`` lists, read whole from ``/files/<id>``."""
    listed = api.get(f"/api/logs/{attempt_id}/files")
    assert listed.status_code == 200, listed.text
    found: LogsRead = {}
    for item in listed.json()["items"]:
        key = (str(item["task"]).rsplit("+", 1)[-1], int(item["run"]))
        assert key not in found, f"{key} listed twice"
        read = api.get(f"/api/logs/{attempt_id}/files/{item['id']}")
        assert read.status_code == 200, read.text
        found[key] = (read.content, int(item["missing_bytes"]))
    return found


# --- the processes -------------------------------------------------------------------------


def terminate(service: Service) -> int:
    """SIGTERM ``service`` and wait for it to exit; its exit code."""
    service.process.send_signal(signal.SIGTERM)
    return service.wait_exit(EXIT_SECONDS)


@dataclass
class Rollout:
    """The processes of both releases on one store and Redis prefix, and the gates their
    long tasks wait for. This release's cluster exists once it migrated the store (a
    cluster migrates the store it is given)."""

    old: ReleaseServices
    engine: sa.Engine
    root: Path
    stack: ExitStack
    clusters: list[Cluster] = field(default_factory=list)

    @property
    def new(self) -> Cluster:
        assert self.clusters, "this release has not migrated the store yet"
        return self.clusters[0]

    @property
    def gates(self) -> Path:
        return self.root / "gates"

    @property
    def old_logs(self) -> Path:
        """The old executor's ``TICKWORK_LOG_DIR``."""
        return self.root / "previous" / "task-logs"

    def upgrade(self) -> Cluster:
        """Migrate the store with this release's ``tickwork db upgrade``; its cluster."""
        self.tickwork("db", "upgrade")
        old = self.old
        cluster = Cluster(old.database_url, old.redis_url, old.redis_prefix, self.root / "new")
        self.clusters.append(self.stack.enter_context(cluster))
        return cluster

    def tickwork(self, *args: str) -> str:
        """This release's ``tickwork ARGS`` on the store; its output (it must succeed)."""
        done = subprocess.run(
            [*tickwork_command(), *args],
            cwd=self.root,
            env={**base_environment(), "TICKWORK_DATABASE_URL": self.old.database_url},
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
            check=False,
        )
        assert done.returncode == 0, f"tickwork {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def services(self) -> list[Service]:
        """Every process started, of either release."""
        new = {id(s): s for c in self.clusters for s in c.services.values()}  # once each
        return [*self.old.services.values(), *new.values()]

    def explain(self, attempt_id: int | None = None) -> str:
        """Both releases' processes' log tails (and the attempt's tasks)."""
        return "\n".join([*(c.explain(attempt_id) for c in self.clusters), self.old.explain()])

    def wait(self, condition: str, check: Callable[[], bool], timeout: float = RUN_SECONDS) -> None:
        """Wait until ``check()``; fail naming ``condition``, with the processes' logs."""
        try:
            wait_until(condition, check, timeout, poll=0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.explain()}") from None

    def first_parts_filed(self, attempt_id: int, workload: Workload) -> bool:
        """Whether the attempt's short tasks succeeded and the old executor's files of
        its long tasks' first runs hold their first lines."""
        tasks = operator_tasks(self.engine, attempt_id)
        return tasks_succeeded(self.engine, attempt_id, workload.short_names()) and all(
            long.name in tasks
            and old_log_size(self.old_logs, attempt_id, tasks[long.name][0], 1)
            == len(workload.first_part(long))
            for long in workload.longs
        )

    def long_runs_quiet(self, attempts: dict[int, Workload]) -> bool:
        """Whether every long task runs and its run has its last line stored: it waits,
        writing nothing, for the gate ``drained``."""
        for attempt_id, workload in attempts.items():
            tasks = operator_tasks(self.engine, attempt_id)
            for long in workload.longs:
                if long.name not in tasks or tasks[long.name][1] != "running":
                    return False
                task_id, _, token = tasks[long.name]
                reach = stored_reach(self.engine, attempt_id, task_id, token)
                if reach != len(workload.written()[long.name]):
                    return False
        return True

    def stop_in_turn(self, agents: list[Service], running: dict[int, Workload]) -> list[int]:
        """SIGTERM each agent and wait for it to exit, then for the long tasks it gave
        back to run again (on an agent still there) as far as their quiet wait; the
        agents' exit codes."""
        exits = []
        for agent in agents:
            exits.append(terminate(agent))
            self.wait(
                f"the long tasks {agent.name} gave back run again and wait",
                lambda: self.long_runs_quiet(running),
            )
        return exits

    def attempts_ended(self, attempts: dict[int, Workload]) -> bool:
        return all(attempt_state(self.engine, a) in DONE_STATES for a in attempts)
