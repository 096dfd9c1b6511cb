"""The processes of bench/failover.py: a store, a Redis prefix and the services of one
part, started, fed and watched."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _services import (
    BenchFailed,
    Service,
    free_port,
    is_ready,
    service_env,
    start_service,
    wait_until,
)
from _stores import run_request
from sqlalchemy import func, select

from tickwork.services.compose.embedded import create_run_attempt
from tickwork.shared.clock import SystemClock
from tickwork.shared.dispatch.messages import DEFAULT_QUEUE
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.sessions import get_attempt_state
from tickwork.shared.store.tables import task_logs, tasks
from tickwork.shared.store.tasks import TaskRow, list_attempt_tasks

BIN_DIR = Path(sys.executable).parent
DRAIN_GRACE_SECONDS = 30.0  # the agent's default: longer than the task
POLL_SECONDS = 0.01
START_TIMEOUT_SECONDS = 60.0  # a service up and ready, a warm-up attempt done
ATTEMPT_TIMEOUT_SECONDS = 120.0
EXIT_TIMEOUT_SECONDS = 60.0  # a signalled service gone


class Cluster:
    """The store, the Redis prefix and the services of one part; starts and feeds them."""

    def __init__(self, url: str, redis_at: tuple[str, str], work_dir: Path) -> None:
        self.url = url
        self.redis_url, self.redis_prefix = redis_at
        self.work_dir = work_dir
        work_dir.mkdir(exist_ok=True)
        self.engine = open_migrated_store(url)
        self.project_dir = work_dir / "project"
        self.project_dir.mkdir(exist_ok=True)
        self.services: list[Service] = []
        self._serial = itertools.count(1)

    def close(self) -> None:
        self.engine.dispose()

    def _start(self, kind: str, command: list[str], env: dict[str, str]) -> Service:
        """Start ``tickwork <command>`` on a metrics port of its own, named ``kind-<n>``."""
        port = free_port()
        env = service_env(**env, TICKWORK_METRICS_PORT=str(port))
        argv = [str(BIN_DIR / "tickwork"), *command, "--metrics-port", str(port)]
        name = f"{kind}-{next(self._serial)}"
        service = start_service(name, argv, env, self.work_dir, self.work_dir, port)
        self.services.append(service)
        return service

    def start_executor(self) -> Service:
        env = {
            "TICKWORK_DATABASE_URL": self.url,
            "TICKWORK_REDIS_URL": self.redis_url,
            "TICKWORK_REDIS_PREFIX": self.redis_prefix,
            # One partition: one executor holds it and works, the other stands by, and
            # the handover of a stopped executor's partition is what part (1) measures.
            "TICKWORK_EXECUTOR_PARTITIONS": "1",
        }
        return self._start("executor", ["executor"], env)

    def start_agent(self, queue: str = DEFAULT_QUEUE) -> Service:
        env = {"TICKWORK_REDIS_URL": self.redis_url, "TICKWORK_REDIS_PREFIX": self.redis_prefix}
        command = ["agent", "--concurrency", "1", "--queues", queue]
        return self._start("agent", [*command, "--grace", f"{DRAIN_GRACE_SECONDS:g}"], env)

    def start_scheduler(self) -> Service:
        return self._start("scheduler", ["scheduler"], {"TICKWORK_DATABASE_URL": self.url})

    def wait_ready(self, service: Service) -> None:
        """Wait until the service's ``/readyz`` answers 200."""
        wait_until(
            lambda: is_ready(service.metrics_port),
            START_TIMEOUT_SECONDS,
            f"{service.name} to be ready",
            [service],
        )

    def create_attempt(self, name: str, text: str) -> int:
        """Store workflow ``name`` and create an attempt of it; the executor picks it up."""
        request = run_request(self.url, self.project_dir, name, text)
        with self.engine.begin() as conn:
            return create_run_attempt(conn, request, SystemClock().now()).attempt_id

    def wait_for_attempt(self, attempt_id: int, alive: Sequence[Service]) -> AttemptState:
        """Poll the attempt until it is done; fail if one of ``alive`` dies or on timeout."""
        states: list[AttemptState] = []

        def done() -> bool:
            with self.engine.connect() as conn:
                states.append(get_attempt_state(conn, attempt_id))
            return states[-1].is_done

        wait_until(done, ATTEMPT_TIMEOUT_SECONDS, f"attempt {attempt_id} to end", alive, 0.05)
        return states[-1]

    def tasks_done(self, attempt_id: int) -> int:
        """How many of the attempt's tasks have succeeded."""
        query = select(func.count()).where(
            tasks.c.attempt_id == attempt_id,
            tasks.c.state == TaskState.SUCCESS.value,
            tasks.c.is_group.is_(False),
        )
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def operator_tasks(self, attempt_id: int) -> list[TaskRow]:
        """The attempt's operator tasks in definition order."""
        with self.engine.connect() as conn:
            rows = [r for r in list_attempt_tasks(conn, attempt_id) if not r.is_group]
        return sorted(rows, key=lambda r: r.position)

    def applied_tokens(self, task_id: int) -> list[int]:
        """Lease tokens of the results applied to a task: one ``task_logs`` row each."""
        query = select(task_logs.c.lease_token).where(task_logs.c.task_id == task_id)
        with self.engine.connect() as conn:
            return [int(token) for token in conn.scalars(query.order_by(task_logs.c.id))]


def check_succeeded(name: str, state: AttemptState, rows: list[TaskRow], length: int) -> None:
    """Fail unless the attempt succeeded with all ``length`` of its tasks."""
    succeeded = sum(1 for r in rows if r.state is TaskState.SUCCESS)
    if state is not AttemptState.SUCCESS or succeeded != length:
        raise BenchFailed(
            f"{name}: attempt ended {state.value} with {succeeded} of {length} tasks succeeded"
        )


def wait_exit(service: Service) -> float:
    """Wait for the service's main process to exit; the monotonic time it was seen gone."""
    deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
    while service.process.poll() is None:
        if time.monotonic() > deadline:
            raise BenchFailed(f"{service.name} still running {EXIT_TIMEOUT_SECONDS:.0f} s on")
        time.sleep(POLL_SECONDS)
    return time.monotonic()
