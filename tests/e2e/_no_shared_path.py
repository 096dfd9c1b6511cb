"""A tickwork deployment whose processes share no path, for the specs of what they store
and serve over the network only.

:func:`start_deployment` runs two executors, two agents and two API replicas on the
cluster of tests/fault/_cluster.py; each executor and API gets an empty state directory
of its own (``TICKWORK_STATE_DIR``, and an old ``TICKWORK_LOG_DIR`` under it), and every
process runs in an empty working directory of its own, so that a file written through a
relative path shows too (:func:`assert_directories_left_empty`). Projects are pushed and
attempts started over REST; the ``tickwork`` client runs with no store URL and no config
file, in a directory of its own. A :func:`gate` is a URL a task waits on, over the
network, for as long as a test wants it to run. :func:`partition_holder` names the
executor holding an attempt's partition, from PostgreSQL's locks.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
from redis import Redis

from tests.e2e._run import tickwork_command
from tests.fault._cluster import COMMAND_TIMEOUT_SECONDS, Cluster, Service, base_environment
from tests.support.servers import find_free_port
from tests.support.waiting import wait_until
from tickwork.services.executor.partitions import MEMBER_KEY
from tickwork.shared.dispatch.events import GROUP
from tickwork.shared.domain.partitions import DEFAULT_PARTITION_COUNT, partition_of
from tickwork.shared.dsl.archive import pack_project

TOKEN = "no-shared-path-admin-token"
PROJECT = "no_shared_path"
START_SECONDS = 30.0
"""How long a process may take to answer after it was started."""
RUN_SECONDS = 45.0
"""How long an attempt may take to end."""
CATCH_SECONDS = 3.0
"""How long to look for a moment an executor holds unacknowledged events."""


@dataclass(frozen=True)
class Process:
    """A started service with the directories it was given, which it must leave empty."""

    service: Service
    state_dir: Path
    cwd: Path


@dataclass(frozen=True)
class Deployment:
    """The processes of a cluster sharing no path, and a client's own directory."""

    cluster: Cluster
    apis: list[Process]
    executors: list[Process]
    agents: list[Process]
    client_dir: Path

    @property
    def endpoints(self) -> list[str]:
        return [f"http://127.0.0.1:{api.service.metrics_port}" for api in self.apis]

    def client(self, endpoint: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.Client(base_url=endpoint, headers=headers, timeout=30, trust_env=False)

    def client_environment(self) -> dict[str, str]:
        """A client's: the token, no store URL, no config file."""
        return {
            **base_environment(),
            "TICKWORK_API_TOKEN": TOKEN,
            "TICKWORK_CONFIG": str(self.client_dir / "no-client.toml"),
        }

    def tickwork(self, endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``tickwork ARGS`` as a client of ``endpoint``: no store URL, no config file, run
        in a directory of its own."""
        return subprocess.run(
            [*tickwork_command(), *args, "--endpoint", endpoint],
            cwd=self.client_dir,
            env=self.client_environment(),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )


def own_directories(cluster: Cluster, label: str) -> tuple[Path, dict[str, str]]:
    """An empty state directory for process ``label``, and the variables that name it (a
    service that still wrote files there, or under an old log directory, would show)."""
    state_dir = cluster.root / "state" / label
    state_dir.mkdir(parents=True)
    return state_dir, {
        "TICKWORK_STATE_DIR": str(state_dir),
        "TICKWORK_LOG_DIR": str(state_dir / "logs"),
    }


def wait_ready(service: Service) -> None:
    wait_until(
        f"{service.name} answers on its metrics port",
        lambda: service.get("/metrics") is not None or not service.is_alive(),
        START_SECONDS,
        poll=0.1,
    )
    assert service.is_alive(), f"{service.name} exited:\n{service.log()}"


def started(service: Service, state_dir: Path) -> Process:
    """``service`` with its state directory and the working directory it runs in."""
    return Process(service, state_dir, Path(f"/proc/{service.pid}/cwd").readlink())


def start_deployment(
    cluster: Cluster, client_dir: Path, agent_env: Mapping[str, str] | None = None
) -> Deployment:
    """Two executors, two agents (with ``agent_env``) and two API replicas."""
    executors, agents, apis = [], [], []
    for n in (1, 2):
        state_dir, env = own_directories(cluster, f"executor-{n}")
        executors.append(started(cluster.start_executor(env, wait=False), state_dir))
    for n in (1, 2):
        # The agent's state directory is its TICKWORK_AGENT_WORK_DIR, scratch space only.
        service = cluster.start_agent(f"agent-{n}", concurrency=2, wait=False, env=agent_env)
        agents.append(started(service, cluster.root / "state" / service.name))
    for n in (1, 2):
        state_dir, env = own_directories(cluster, f"api-{n}")
        env["TICKWORK_API_RATE_LIMIT"] = "0"  # the specs read fast, from one token
        service = cluster.start_api(f"admin:{TOKEN}", workers=1, name=f"api-{n}", env=env)
        apis.append(started(service, state_dir))
    for process in [*executors, *agents]:
        wait_ready(process.service)
    client_dir.mkdir()
    return Deployment(cluster, apis, executors, agents, client_dir)


@contextmanager
def gate() -> Iterator[tuple[str, threading.Event]]:
    """A URL that answers 404 until the event is set, then 200: what a task waits on, over
    the network, for as long as the test wants it to run."""
    opened = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if opened.is_set() else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", find_free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/", opened
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def push_project(deployment: Deployment, files: Mapping[str, str], source: Path) -> None:
    """Pack ``files`` (written in the test's own directory) and push them over REST."""
    source.mkdir()
    for name, text in files.items():
        (source / name).write_text(text, encoding="utf-8")
    with deployment.client(deployment.endpoints[0]) as api:
        pushed = api.put(
            f"/api/projects/{PROJECT}",
            content=pack_project(source),
            headers={"Content-Type": "application/gzip"},
        )
    assert pushed.status_code == 201, pushed.text


def start_attempt(api: httpx.Client, workflow: str) -> int:
    started = api.post("/api/attempts", json={"project": PROJECT, "workflow": workflow})
    assert started.status_code == 201, started.text
    return int(started.json()["id"])


def wait_for_end(api: httpx.Client, attempt_id: int, cluster: Cluster) -> str:
    states: list[str] = []

    def ended() -> bool:
        states.append(api.get(f"/api/attempts/{attempt_id}").json()["state"])
        return states[-1] in ("success", "error", "killed", "canceled")

    try:
        wait_until(f"attempt {attempt_id} ends", ended, RUN_SECONDS, poll=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc} (still {states[-1]})\n{cluster.explain()}") from None
    return states[-1]


def assert_directories_left_empty(deployment: Deployment) -> None:
    """No API or executor wrote into its state directory or working directory, no agent
    into its working directory, and no agent kept a spooled log in its scratch space."""
    written = {
        str(path): sorted(str(p.relative_to(path)) for p in path.rglob("*"))
        for process in [*deployment.apis, *deployment.executors]
        for path in (process.state_dir, process.cwd)
    }
    for agent in deployment.agents:
        written[str(agent.cwd)] = sorted(str(p) for p in agent.cwd.rglob("*"))
        spool = agent.state_dir / "logs"
        written[str(spool)] = sorted(str(p) for p in spool.rglob("*") if p.is_file())
    assert {path: names for path, names in written.items() if names} == {}


def partition_holder(deployment: Deployment, attempt_id: int) -> Process:
    """The executor holding the attempt's partition, as PostgreSQL's locks say: the one
    with the connection at the client port of the lock's backend."""
    partition = partition_of(attempt_id, DEFAULT_PARTITION_COUNT)
    query = sa.text(
        "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = :key"
        " AND l.objid::bigint = :partition AND l.objsubid = 2"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    with deployment.cluster.engine.connect() as conn:
        port = conn.execute(query, {"key": MEMBER_KEY, "partition": partition}).scalar_one()
    holders = [e for e in deployment.executors if port in local_ports(e.service.pid)]
    assert len(holders) == 1, f"partition {partition} (port {port}): {holders}"
    return holders[0]


def local_ports(pid: int) -> set[int]:
    """The local TCP ports of process ``pid``'s sockets."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def partitions_held(process: Process) -> float:
    return process.service.metric("tickwork_executor_partitions")


def stop_holding_unacknowledged_events(victim: Process, redis: Redis, stream: str) -> int:
    """SIGSTOP the executor just after it read events of ``stream`` and before it
    acknowledged them (it deletes what it acknowledges): how many it left pending."""
    deadline = time.monotonic() + CATCH_SECONDS
    while time.monotonic() < deadline:
        if redis.xlen(stream):
            victim.service.signal_group(signal.SIGSTOP)
            pending = int(redis.xpending(stream, GROUP)["pending"])
            if pending:
                return pending
            victim.service.signal_group(signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError(f"{victim.service.name} never held an unacknowledged event of {stream}")


def claimed_events(executor: Process) -> int:
    """Events the executor said it claimed from others (read by them, never acknowledged)."""
    return sum(int(n) for n in re.findall(r"claimed (\d+) events", executor.service.log()))
