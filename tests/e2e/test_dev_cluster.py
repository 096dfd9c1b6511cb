"""``tickwork dev``: the API, the scheduler, the executor and two agents as separate local
processes under one command, their output prefixed, all stopped by Ctrl-C.

Each run gets a throwaway PostgreSQL database, its own Redis prefix, free ports and a state
directory under the test's temporary directory. However a test ends, every process of
every session the command started (the services, their workers and pool processes) is
killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis

from services.agent.worker import SHUTDOWN
from services.cli.dev import KILL_WAIT_SECONDS, STOP_GRACE_SECONDS
from shared.dispatch.events import EventStream
from shared.dispatch.messages import TaskReleased, event_from_json
from tests.e2e._run import Project, tickwork_command
from tests.fault._cluster import (
    Ledger,
    base_environment,
    is_running,
    processes_in_session,
    session_of,
    workflow_text,
)
from tests.support.servers import find_free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

SERVICES = ("api", "scheduler", "executor", "agent.1", "agent.2")
READY_TIMEOUT_SECONDS = 45.0
RUN_TIMEOUT_SECONDS = 45.0
STOP_TIMEOUT_SECONDS = 15.0
"""honcho SIGKILLs a service 5 s after SIGTERM; this leaves room for the rest."""
FAIL_TIMEOUT_SECONDS = 15.0
STARTED_LINE = re.compile(r"\| (?P<name>\S+) started \(pid=(?P<pid>\d+)\)$", re.MULTILINE)
LONG_TASK_SECONDS = 60
"""How long the task that Ctrl-C interrupts would sleep: far longer than the stop grace."""


def free_port_block(count: int) -> int:
    """The first of ``count`` consecutive TCP ports on this machine that were free a
    moment ago (tried at up to 50 random places)."""
    for _ in range(50):
        base = random.randint(20_000, 60_000)
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("0.0.0.0", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"found no {count} consecutive free ports")


@dataclass
class DevProcess:
    """A running ``tickwork dev`` and where its output goes."""

    process: subprocess.Popen[bytes]
    output_path: Path
    api_url: str

    def output(self) -> str:
        return self.output_path.read_text(encoding="utf-8", errors="replace")

    def service_pids(self) -> dict[str, int]:
        """Each service's pid, as honcho reported it; also its session id."""
        return {m["name"]: int(m["pid"]) for m in STARTED_LINE.finditer(self.output())}

    def has_printed(self, name: str) -> bool:
        """Whether the service printed a line of its own, prefixed with its name."""
        pattern = rf"^\d\d:\d\d:\d\d {re.escape(name)} +\| "
        return re.search(pattern, self.output(), re.MULTILINE) is not None

    def live_processes(self) -> list[int]:
        """Pids of every live process in a service's session."""
        sessions = self.service_pids().values()
        return [pid for s in sessions for pid in processes_in_session(s) if is_running(pid)]

    def kill_everything(self) -> None:
        """SIGKILL every process the command started, then the command itself."""
        for pid in self.live_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # it and honcho's readers
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)


def processes_in_group(group: int) -> list[int]:
    """Pids of every live process whose process group is ``group``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # not a process, or gone
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) == group and is_running(int(entry.name)):
            found.append(int(entry.name))
    return found


def released_tasks(redis_url: str, redis_prefix: str) -> list[TaskReleased]:
    """The ``released`` events agents left in the event stream under ``redis_prefix``."""
    client = redis.Redis.from_url(redis_url)
    try:
        stream = EventStream(client, redis_prefix)
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(stream.key))
    finally:
        client.close()
    events = (event_from_json(json.loads(fields[b"e"])) for _id, fields in entries)
    return [event for event in events if isinstance(event, TaskReleased)]


def dev_arguments(database_url: str, redis_url: str, redis_prefix: str, root: Path) -> list[str]:
    """``tickwork dev`` on these servers, free ports and a state directory under ``root``."""
    return [
        *tickwork_command(),
        "dev",
        "--database-url",
        database_url,
        "--redis-url",
        redis_url,
        "--redis-prefix",
        redis_prefix,
        "--api-port",
        str(find_free_port()),
        "--metrics-base-port",
        str(free_port_block(len(SERVICES) - 1)),
        "--state-dir",
        str(root / "state"),
    ]


@contextlib.contextmanager
def running_dev(arguments: list[str], root: Path) -> Iterator[DevProcess]:
    """``tickwork dev`` started in its own session, its output in a file; killed with
    every process it started however the test ends."""
    output_path = root / "dev.log"
    api_port = arguments[arguments.index("--api-port") + 1]
    with output_path.open("wb") as output:
        process = subprocess.Popen(
            arguments,
            cwd=root,
            env=base_environment(),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    dev = DevProcess(process, output_path, f"http://127.0.0.1:{api_port}")
    try:
        yield dev
    finally:
        dev.kill_everything()


def wait_for_attempt(dev: DevProcess, attempt_id: str) -> dict[str, Any]:
    """Poll an attempt until it ends (bounded); fail with the command's output."""
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    while True:
        attempt: dict[str, Any] = httpx.get(f"{dev.api_url}/api/attempts/{attempt_id}").json()
        if attempt["state"] in ("success", "error", "killed", "canceled"):
            return attempt
        assert time.monotonic() < deadline, (
            f"attempt {attempt_id} still {attempt['state']}:\n{dev.output()}"
        )
        time.sleep(0.2)


def test_dev_runs_each_service_as_a_process_runs_hello_and_stops_them_all_on_ctrl_c(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    # Given tickwork dev with the examples, on a throwaway database and free ports
    project = Project.copy_of_examples(tmp_path).root
    arguments = [
        *dev_arguments(postgres_url, redis_url, redis_prefix, tmp_path),
        "--project",
        str(project),
    ]
    with running_dev(arguments, tmp_path) as dev:
        # When the project has been pushed over REST
        wait_until(
            f"the examples were pushed; output so far:\n{dev.output()}",
            lambda: "| pushed project examples" in dev.output() or dev.process.poll() is not None,
            READY_TIMEOUT_SECONDS,
            poll=0.2,
        )
        assert dev.process.poll() is None, dev.output()

        # Then each service runs as a process of its own, its lines prefixed with its name
        assert sorted(dev.service_pids()) == sorted(SERVICES), dev.output()
        wait_until(
            "every service printed a prefixed line",
            lambda: all(dev.has_printed(name) for name in SERVICES),
            READY_TIMEOUT_SECONDS,
            poll=0.2,
        )
        # and the API answers
        assert httpx.get(f"{dev.api_url}/readyz").status_code == 200

        # When hello is started over REST
        started = httpx.post(
            f"{dev.api_url}/api/attempts", json={"project": "examples", "workflow": "hello"}
        )
        assert started.status_code == 201, started.text

        # Then it succeeds on the agents
        attempt = wait_for_attempt(dev, started.json()["id"])
        assert attempt["state"] == "success", dev.output()

        # When Ctrl-C (SIGINT) reaches tickwork dev
        services = dev.service_pids()
        dev.process.send_signal(signal.SIGINT)

        # Then it ends with honcho's status for SIGINT, and so does every service process
        assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 130, dev.output()
        wait_until(
            f"no process of {services} is left",
            lambda: not dev.live_processes(),
            STOP_TIMEOUT_SECONDS,
            poll=0.2,
        )
        assert "SIGINT received" in dev.output()


def test_an_unreachable_database_is_one_line_and_exit_status_5_before_anything_starts(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    # Given a database URL naming a port nobody listens on
    unreachable = f"postgresql://postgres@127.0.0.1:{find_free_port()}/tickwork_dev"

    # When tickwork dev starts on it
    began = time.monotonic()
    completed = subprocess.run(
        dev_arguments(unreachable, redis_url, redis_prefix, tmp_path),
        cwd=tmp_path,
        env=base_environment(),
        capture_output=True,
        text=True,
        timeout=FAIL_TIMEOUT_SECONDS,
        check=False,
    )

    # Then it says why in one line and exits with status 5 (a server out of reach), quickly,
    # having started nothing
    explained = f"exit {completed.returncode}\n{completed.stdout}\n{completed.stderr}"
    assert completed.returncode == 5, explained
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, explained
    assert lines[0].startswith("error: cannot use database postgresql://postgres@127.0.0.1:")
    assert completed.stdout == "", explained
    assert time.monotonic() - began < 10.0, explained


def test_when_one_service_dies_the_others_are_stopped_and_the_status_names_it(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    # Given tickwork dev whose services all run
    arguments = dev_arguments(postgres_url, redis_url, redis_prefix, tmp_path)
    with running_dev(arguments, tmp_path) as dev:
        wait_until(
            f"every service printed a prefixed line; output so far:\n{dev.output()}",
            lambda: all(dev.has_printed(name) for name in SERVICES),
            READY_TIMEOUT_SECONDS,
            poll=0.2,
        )

        # When the first agent is killed
        os.kill(dev.service_pids()["agent.1"], signal.SIGKILL)

        # Then the others are stopped, and the command fails naming the agent
        assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 1, dev.output()
        assert "error: agent.1 was killed by SIGKILL, so the others were stopped" in dev.output()
        wait_until(
            "no service process is left", lambda: not dev.live_processes(), STOP_TIMEOUT_SECONDS
        )


def test_ctrl_c_lets_an_agent_give_back_a_running_task_after_the_grace_as_in_kubernetes(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    # Given tickwork dev with a project whose one task notes its start, then sleeps far
    # longer than the stop grace
    ledger = Ledger(tmp_path / "ledger.txt")
    project = Project.empty(tmp_path)
    task = ledger.task("sleep", sleep_seconds=LONG_TASK_SECONDS)
    project.write("long.dig", workflow_text({"sleep": task}))
    arguments = [
        *dev_arguments(postgres_url, redis_url, redis_prefix, tmp_path),
        "--project",
        str(project.root),
    ]
    with running_dev(arguments, tmp_path) as dev:
        wait_until(
            f"the project was pushed; output so far:\n{dev.output()}",
            lambda: "| pushed project project" in dev.output() or dev.process.poll() is not None,
            READY_TIMEOUT_SECONDS,
            poll=0.2,
        )
        assert dev.process.poll() is None, dev.output()

        # and the task runs on an agent
        started = httpx.post(
            f"{dev.api_url}/api/attempts", json={"project": "project", "workflow": "long"}
        )
        assert started.status_code == 201, started.text
        wait_until(
            f"the task started; output so far:\n{dev.output()}",
            lambda: bool(ledger.starts("sleep")),
            RUN_TIMEOUT_SECONDS,
            poll=0.2,
        )
        run = ledger.starts("sleep")[0]
        shell = run.pid  # it leads the task's own process group
        assert not released_tasks(redis_url, redis_prefix)
        agents = {pid: name for name, pid in dev.service_pids().items()}
        agent = agents[session_of(shell) or 0]

        # When Ctrl-C (SIGINT) reaches tickwork dev
        dev.process.send_signal(signal.SIGINT)

        # Then it ends with honcho's status for SIGINT
        assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 130, dev.output()
        output = dev.output()
        # and the agent running the task waited out the grace and gave the task back
        grace_over = rf"^\S+ {re.escape(agent)} +\| .*grace of {STOP_GRACE_SECONDS:g}s over: "
        assert re.search(grace_over + "releasing running tasks$", output, re.MULTILINE), output
        released = [(e.lease_token, e.reason) for e in released_tasks(redis_url, redis_prefix)]
        assert released == [(run.token, SHUTDOWN)], output
        # with its pool processes stopped by the worker, not by a SIGTERM of their own
        assert "exited with 'signal 15 (SIGTERM)'" not in output, output
        # and nothing of the task's shell is left (the cleanup kills the agent's session,
        # which holds the task's process group, whatever happens)
        wait_until(
            f"no process of the task's group {shell} is left",
            lambda: not processes_in_group(shell),
            STOP_TIMEOUT_SECONDS,
            poll=0.2,
        )
        assert not ledger.ends("sleep"), ledger.text()


def test_the_stop_grace_ends_well_before_honcho_sigkills_what_is_left() -> None:
    # An agent's grace must be over, its tasks given back and its pool stopped (2 to 3 s)
    # before honcho's SIGKILL
    assert STOP_GRACE_SECONDS + 5 <= KILL_WAIT_SECONDS
