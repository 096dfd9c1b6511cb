"""``tickwork dev``: the API, the scheduler, the executor and two agents as separate local
processes under one command, their log records in one format named by service, all stopped
by Ctrl-C, SIGTERM, or the output's reader going away.

Each run gets a throwaway PostgreSQL database, its own Redis prefix, free ports and a state
directory under the test's temporary directory. Its output goes to a file, so it is JSON
lines (one record each). However a test ends, every process of every session the command
started (the services, their workers and pool processes) is killed.
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
from sqlalchemy.engine import make_url

from tests.e2e._run import Project, sigint_as_on_a_terminal, tickwork_command
from tests.fault._cluster import (
    Ledger,
    base_environment,
    is_running,
    processes_in_session,
    session_of,
    workflow_text,
)
from tests.support.databases import DatabaseSupply
from tests.support.servers import RedisAddress, RespClient, find_free_port
from tests.support.waiting import wait_until
from tickwork.services.agent.worker import SHUTDOWN
from tickwork.services.compose.dev import KILL_WAIT_SECONDS, STOP_GRACE_SECONDS
from tickwork.shared.dispatch.events import stream_key
from tickwork.shared.dispatch.messages import TaskReleased, event_from_json

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

SERVICES = ("api", "scheduler", "executor", "agent.1", "agent.2")
READY_TIMEOUT_SECONDS = 45.0
RUN_TIMEOUT_SECONDS = 45.0
STOP_TIMEOUT_SECONDS = KILL_WAIT_SECONDS + 10.0
"""What is left KILL_WAIT_SECONDS after SIGTERM is SIGKILLed; this leaves room for the rest."""
FAIL_TIMEOUT_SECONDS = 30.0
"""Well before any retry of a minute would end, even on a busy machine (idle: about 2 s)."""
STARTED = re.compile(r"^(?P<name>\S+) started pid=(?P<pid>\d+)$")
RECORD_KEYS = {"time", "service", "level", "logger", "message"}
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
    """A running ``tickwork dev`` and where its output goes (through ``reader``, a ``cat``
    a test may kill, if there is one)."""

    process: subprocess.Popen[bytes]
    output_path: Path
    api_url: str
    reader: subprocess.Popen[bytes] | None = None

    def output(self) -> str:
        """The complete lines written so far."""
        text = self.output_path.read_text(encoding="utf-8", errors="replace")
        return text[: text.rfind("\n") + 1]

    def records(self) -> list[dict[str, Any]]:
        """The output's lines, each a JSON record."""
        return [json.loads(line) for line in self.output().splitlines()]

    def messages(self, service: str) -> list[str]:
        """The messages of one service's records (``dev`` for the command's own)."""
        return [r["message"] for r in self.records() if r["service"] == service]

    def service_pids(self) -> dict[str, int]:
        """Each service's pid, as the command reported it; also its session id."""
        started = (STARTED.match(m) for m in self.messages("dev"))
        return {m["name"]: int(m["pid"]) for m in started if m is not None}

    def has_printed(self, name: str) -> bool:
        """Whether the service wrote a record of its own."""
        return bool(self.messages(name))

    def has_said(self, message_start: str) -> bool:
        """Whether the command wrote a record of its own starting so."""
        return any(m.startswith(message_start) for m in self.messages("dev"))

    def live_processes(self) -> list[int]:
        """Pids of every live process in a service's session."""
        sessions = self.service_pids().values()
        return [pid for s in sessions for pid in processes_in_session(s) if is_running(pid)]

    def kill_everything(self) -> None:
        """SIGKILL every process the command started, then the command itself."""
        for pid in self.live_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for process in (self.process, self.reader):
            if process is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_SECONDS)


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
    """The ``released`` events agents left in the event streams under ``redis_prefix``
    (every partition's, and the single stream of old)."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = sorted(client.scan_iter(match=f"{stream_key(redis_prefix, None)}*", count=1000))
        entries = [
            entry
            for key in keys
            if client.type(key) == b"stream"
            for entry in cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(key))
        ]
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
def running_dev(
    arguments: list[str], root: Path, *, through_reader: bool = False, **environ: str
) -> Iterator[DevProcess]:
    """``tickwork dev`` started in its own session, its output in a file (written by a
    ``cat`` reading a pipe, if ``through_reader``); killed with every process it started
    however the test ends. Without ``--api-port`` it says where its API is in its first
    record."""
    output_path = root / "dev.log"
    with output_path.open("wb") as output, (root / "dev.err").open("wb") as errors:
        reader = None
        if through_reader:
            reader = subprocess.Popen(
                ["cat"], stdin=subprocess.PIPE, stdout=output, start_new_session=True
            )
        process = subprocess.Popen(
            arguments,
            cwd=root,
            env={**base_environment(), **environ},
            stdin=subprocess.DEVNULL,
            stdout=reader.stdin if reader is not None else output,
            stderr=errors,
            start_new_session=True,
            preexec_fn=sigint_as_on_a_terminal,  # the tests' Ctrl-C is a terminal's
        )
    if reader is not None and reader.stdin is not None:
        reader.stdin.close()  # tickwork dev holds the only writing end
    dev = DevProcess(process, output_path, "", reader)
    try:
        if "--api-port" in arguments:
            dev.api_url = f"http://127.0.0.1:{arguments[arguments.index('--api-port') + 1]}"
        else:
            wait_until(
                f"the first record; output so far:\n{dev.output()}",
                lambda: bool(dev.output()) or process.poll() is not None,
                READY_TIMEOUT_SECONDS,
                poll=0.1,
            )
            first = dev.records()[0]["message"] if dev.output() else ""
            found = re.match(r"api at (http://127\.0\.0\.1:\d+) ", first)
            assert found, f"the first record does not say where the API is: {dev.output()}"
            dev.api_url = found[1]
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
            lambda: dev.has_said("pushed project examples") or dev.process.poll() is not None,
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

        # Then it ends with the status for SIGINT, having stopped every service process
        assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 130, dev.output()
        assert not dev.live_processes(), f"left of {services}: {dev.live_processes()}"
        assert "SIGINT received" in dev.messages("dev")


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
    assert time.monotonic() - began < FAIL_TIMEOUT_SECONDS, explained


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
        said = "agent.1 was killed by SIGKILL, so the others are stopped"
        assert said in dev.messages("dev"), dev.output()
        assert not dev.live_processes()


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
            lambda: dev.has_said("pushed project project") or dev.process.poll() is not None,
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

        # Then it ends with the status for SIGINT
        assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 130, dev.output()
        output = dev.output()
        # and the agent running the task waited out the grace and gave the task back
        grace_over = f"grace of {STOP_GRACE_SECONDS:g}s over: releasing running tasks"
        assert grace_over in dev.messages(agent), output
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


def test_the_stop_grace_ends_well_before_what_is_left_is_sigkilled() -> None:
    # An agent's grace must be over, its tasks given back and its pool stopped (2 to 3 s)
    # before the SIGKILL
    assert STOP_GRACE_SECONDS + 5 <= KILL_WAIT_SECONDS


# --- two clusters side by side, each stopped its own way -----------------------------------


@dataclass
class SideBySide:
    """Two ``tickwork dev`` started one after the other on their default ports, each on a
    database of its own: ``first`` writes to a file, ``second`` through a reader."""

    first: DevProcess
    second: DevProcess
    first_database: str
    second_database: str


@pytest.fixture(scope="module")
def side_by_side(
    empty_postgres_databases: DatabaseSupply,
    redis_server_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SideBySide]:
    databases = [empty_postgres_databases.take() for _ in range(2)]
    roots = [tmp_path_factory.mktemp(name) for name in ("first", "second")]
    arguments = [
        [
            *tickwork_command(),
            "dev",
            "--state-dir",
            str(root / "state"),
            "--redis-url",
            redis_server_url,
        ]
        for root in roots
    ]
    try:
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(
                running_dev(arguments[0], roots[0], TICKWORK_DEV_DATABASE_URL=databases[0])
            )
            wait_for_every_service(first, SERVICES)
            second = stack.enter_context(
                running_dev(
                    [*arguments[1], "--agents", "1"],
                    roots[1],
                    through_reader=True,
                    TICKWORK_DEV_DATABASE_URL=databases[1],
                )
            )
            wait_for_every_service(second, SERVICES[:-1])
            yield SideBySide(first, second, *databases)
    finally:
        with RespClient(RedisAddress.from_url(redis_server_url)) as client:
            for url in databases:
                client.delete_keys_with_prefix(f"tickwork-dev:{make_url(url).database}:")
        for url in databases:
            empty_postgres_databases.give_back(url)


def wait_for_every_service(dev: DevProcess, services: tuple[str, ...]) -> None:
    """Wait (bounded) until every service wrote a record, the API is ready and every
    metrics port the first records name answers."""
    named = (re.match(r"metrics +\S+ (http://\S+)", m) for m in dev.messages("dev"))
    urls = [f"{dev.api_url}/readyz", *(m[1] for m in named if m is not None)]

    def ready() -> bool:
        if dev.process.poll() is not None:
            return True
        if not all(dev.has_printed(name) for name in services):
            return False
        try:
            return all(httpx.get(url, timeout=2).status_code == 200 for url in urls)
        except httpx.HTTPError:
            return False

    wait_until(
        f"every service runs; output so far:\n{dev.output()}",
        ready,
        READY_TIMEOUT_SECONDS,
        poll=0.2,
    )
    assert dev.process.poll() is None, dev.output()


def test_two_devs_run_side_by_side_on_free_ports_and_databases_of_their_own(
    side_by_side: SideBySide,
) -> None:
    # Given two tickwork dev started with no port asked for, each on its own database
    first, second = side_by_side.first, side_by_side.second

    # Then each serves its own API, named in its first record
    assert first.api_url != second.api_url
    for dev in (first, second):
        assert httpx.get(f"{dev.api_url}/readyz", timeout=5).status_code == 200
    # and runs on its own database and Redis keys, said in its first records
    for dev, url in ((first, side_by_side.first_database), (second, side_by_side.second_database)):
        name = make_url(url).database
        said = " ".join(dev.messages("dev"))
        assert f"/{name} (" in said, dev.output()
        assert f"keys prefixed tickwork-dev:{name}:" in said, dev.output()


def test_every_output_line_is_one_record_named_by_its_service_without_banner_or_warning(
    side_by_side: SideBySide,
) -> None:
    # Given a tickwork dev whose services all started, its output not a terminal
    dev = side_by_side.first

    # Then every line is one JSON record: when, which service, level, logger, message
    lines = dev.output().splitlines()
    for line in lines:
        record = json.loads(line)
        assert record.keys() >= RECORD_KEYS, line
        assert record["service"] in ("dev", *SERVICES), line
    # and every service logged through it: nothing printed around the log
    records = dev.records()
    assert not [r for r in records if r["logger"] == "output"], dev.output()

    # with gunicorn's own lines and its access lines among them
    def api_loggers() -> set[str]:
        return {r["logger"] for r in dev.records() if r["service"] == "api"}

    wait_until(
        f"gunicorn's records; the API's: {api_loggers()}",
        lambda: {"gunicorn.error", "gunicorn.access"} <= api_loggers(),
        STOP_TIMEOUT_SECONDS,
        poll=0.1,
    )
    # and neither Celery's banner nor its warning about root, once per agent
    output = dev.output()
    assert "[config]" not in output and ".> transport" not in output, output
    assert "SecurityWarning" not in output and "superuser" not in output, output
    if os.geteuid() == 0:
        for agent in ("agent.1", "agent.2"):
            root_lines = [m for m in dev.messages(agent) if m.startswith("running as root")]
            assert len(root_lines) == 1, dev.output()
    assert (dev.output_path.parent / "dev.err").read_text() == ""


def test_sigterm_stops_every_service_process_and_waits_for_them(
    side_by_side: SideBySide,
) -> None:
    # Given a running tickwork dev
    dev = side_by_side.first
    services = dev.service_pids()
    assert sorted(services) == sorted(SERVICES), dev.output()

    # When it gets SIGTERM
    dev.process.send_signal(signal.SIGTERM)

    # Then it ends with the status for SIGTERM, no process of any service left behind
    assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 143, dev.output()
    assert not dev.live_processes(), f"left of {services}: {dev.live_processes()}"
    assert "SIGTERM received" in dev.messages("dev")
    # and the other tickwork dev serves on
    other = side_by_side.second
    assert httpx.get(f"{other.api_url}/readyz", timeout=5).status_code == 200


def test_the_output_reader_going_away_stops_every_service_process(
    side_by_side: SideBySide,
) -> None:
    # Given a running tickwork dev whose output a pipe takes to a reader
    dev = side_by_side.second
    assert dev.reader is not None
    services = dev.service_pids()
    assert sorted(services) == sorted(SERVICES[:-1]), dev.output()

    # When the reader dies (as tee does on Ctrl-C, or head once it has its lines)
    dev.reader.kill()
    dev.reader.wait(timeout=STOP_TIMEOUT_SECONDS)

    # Then tickwork dev stops without a signal of its own, with the status for SIGPIPE
    assert dev.process.wait(timeout=STOP_TIMEOUT_SECONDS) == 141, dev.output()
    # leaving no process of any service behind
    assert not dev.live_processes(), f"left of {services}: {dev.live_processes()}"
    # and says why on stderr, with nothing else there
    errors = (dev.output_path.parent / "dev.err").read_text()
    assert errors == "tickwork dev: the output's reader is gone; stopping the services\n"
