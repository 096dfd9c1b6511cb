"""``tickwork standalone``: API, scheduler, executor and agents in one process on SQLite."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e._standalone import (
    client_environment,
    run_tickwork,
    running_standalone,
    start_standalone,
    wait_for_attempt,
    wait_ready,
)
from tests.support.files import write_under
from tests.support.stored_logs import sqlite_url, stored_runs
from tests.support.waiting import wait_until
from tickwork.services.compose.standalone import CHANNEL_TIMEOUT_SECONDS, FOLLOW_STREAMS

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _project(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_under(directory, name, textwrap.dedent(text))
    return directory


TICKING = """\
    schedule:
      cron>: "@every 2s"
      catchup: none
    +hello:
      echo>: tick ${session_time}
"""


def test_a_project_pushed_at_start_fires_its_schedule_and_the_session_succeeds(
    tmp_path: Path,
) -> None:
    # Given a project whose workflow runs every two seconds
    project = _project(tmp_path / "ticks", {"tick.dig": TICKING})
    # When standalone starts with it
    with running_standalone(tmp_path / "state", "--project", str(project)) as standalone:
        # Then it says where the API, its docs and the schedule are
        output = standalone.output()
        assert f"{standalone.endpoint}/api/docs" in output
        assert "schedule ticks/tick: cron>: @every 2s" in output

        # And the scheduler emits a session that the executor runs to success
        def a_session_succeeded() -> bool:
            items = standalone.get("/api/sessions?project=ticks")["items"]
            return any(s["last_attempt"]["state"] == "success" for s in items)

        wait_until("a scheduled session succeeded", a_session_succeeded, 30.0, poll=0.2)
        # And its task's log is in the store the API reads
        logs = stored_runs(sqlite_url(standalone.state_dir))
        assert any("tick " in run.text for run in logs)


def test_it_refuses_to_serve_other_machines_without_tokens(tmp_path: Path) -> None:
    # When standalone is bound to every address and no token is configured
    environ = client_environment("http://unused")
    completed = run_tickwork(
        "standalone",
        "--state-dir",
        str(tmp_path),
        "--bind",
        "0.0.0.0:0",
        env=environ,
        timeout_seconds=30,
    )
    # Then it does not start, and says why in one line
    assert completed.exit_code == 2, completed.stderr
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1
    assert "TICKWORK_API_TOKENS" in errors[0]
    assert "Traceback" not in completed.stderr


def test_with_tokens_the_api_asks_for_one_even_on_loopback(tmp_path: Path) -> None:
    with running_standalone(
        tmp_path / "state", environ={"TICKWORK_API_TOKENS": "admin:s3cret-token"}
    ) as standalone:
        assert "auth     on" in standalone.output()
        assert standalone.tickwork("sessions", "--json").exit_code == 0
        assert standalone.tickwork("sessions", token="wrong").exit_code == 6


def test_sigterm_stops_it_within_a_bound_killing_running_tasks(tmp_path: Path) -> None:
    # Given a standalone running a long `sleep` task
    marker = tmp_path / "sleep-pid"
    project = _project(
        tmp_path / "sleepy",
        {
            "nap.dig": "+nap:\n  sh>: sh nap.sh\n",
            "nap.sh": f"echo $$ > {marker}.tmp; mv {marker}.tmp {marker}; exec sleep 300\n",
        },
    )
    standalone = start_standalone(tmp_path / "state", "--project", str(project))
    try:
        wait_ready(standalone)
        started = standalone.tickwork("start", "sleepy", "nap", "--json")
        assert started.exit_code == 0, started.explain()
        wait_until("the sleep task started", marker.exists, 30.0, poll=0.1)
        pid = int(marker.read_text())
        # When it gets SIGTERM
        began = time.monotonic()
        exit_code = standalone.stop(timeout_seconds=15.0)
        # Then it exits soon, and the task's process is gone
        assert time.monotonic() - began < 15.0
        assert exit_code == 0, standalone.output()
        wait_until("the sleep process is gone", lambda: not _alive(pid), 5.0)
    finally:
        standalone.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_task_left_running_by_a_killed_process_runs_again_after_a_restart(
    tmp_path: Path,
) -> None:
    # Given a task that sleeps on its first run and succeeds on its second
    marker = tmp_path / "first-run-pid"
    project = _project(
        tmp_path / "again",
        {
            "once.dig": "+once:\n  sh>: sh once.sh\n",
            "once.sh": f"[ -e {marker} ] && exit 0\n"
            f"echo $$ > {marker}.tmp; mv {marker}.tmp {marker}; exec sleep 300\n",
        },
    )
    state = tmp_path / "state"
    first = start_standalone(state, "--project", str(project))
    try:
        wait_ready(first)
        started = first.tickwork("start", "again", "once", "--json")
        assert started.exit_code == 0, started.explain()
        attempt_id = started.json()["id"]
        wait_until("the first run started", marker.exists, 30.0, poll=0.1)
        # When the process dies without a chance to clean up (and its command with it)
        first.kill()
        _kill(int(marker.read_text()))
    finally:
        first.kill()
    # Then a new process on the same state runs the task again, and the attempt succeeds
    with running_standalone(state) as second:
        assert wait_for_attempt(second, attempt_id, 30.0)["state"] == "success"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_slow_clients_and_log_followers_cannot_take_every_api_thread(tmp_path: Path) -> None:
    # Given a standalone running a task that does not end soon
    project = _project(tmp_path / "slow", {"nap.dig": "+nap:\n  sh>: echo napping; sleep 120\n"})
    with running_standalone(tmp_path / "state", "--project", str(project)) as standalone:
        started = standalone.tickwork("start", "slow", "nap", "--json")
        assert started.exit_code == 0, started.explain()
        attempt_id = started.json()["id"]
        follow = f"{standalone.endpoint}/api/logs/{attempt_id}/follow"
        host, port = standalone.endpoint.removeprefix("http://").split(":")
        with contextlib.ExitStack() as held:
            # When 50 clients send half a header block and stop, and followers open streams
            for _ in range(50):
                client = held.enter_context(socket.create_connection((host, int(port)), 5.0))
                client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            statuses = []
            for _ in range(FOLLOW_STREAMS + 1):
                stream = held.enter_context(httpx.stream("GET", follow, timeout=10.0))
                statuses.append(stream.status_code)
            # Then followers past the limit are told to come back later
            assert statuses == [200] * FOLLOW_STREAMS + [503]
            # And the API still answers at once
            for _ in range(5):
                began = time.monotonic()
                assert httpx.get(standalone.endpoint + "/healthz", timeout=5.0).status_code == 200
                assert httpx.get(standalone.endpoint + "/api/sessions", timeout=5.0).is_success
                assert time.monotonic() - began < 2.0
            # And a client that sends nothing more is dropped after the channel timeout
            silent = socket.create_connection((host, int(port)), 5.0)
            held.callback(silent.close)
            silent.sendall(b"GET /healthz HTTP/1.1\r\n")
            silent.settimeout(CHANNEL_TIMEOUT_SECONDS * 3)
            began = time.monotonic()
            assert silent.recv(1024) == b""
            assert time.monotonic() - began < CHANNEL_TIMEOUT_SECONDS * 3


def _post_json(headers: str) -> bytes:
    return (
        f"POST /api/attempts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
    ).encode()


UNREADABLE_REQUESTS = {
    "a-chunk-size-that-is-not-hex": (
        _post_json("Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        400,
    ),
    "a-malformed-request-line": (b"GARBAGE\r\n\r\n", 400),
    "a-content-length-that-is-not-a-number": (_post_json("Content-Length: 1x\r\n\r\n{}"), 400),
    "a-300-kb-header": (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 300_000 + b"\r\n\r\n",
        431,
    ),
    "a-compressed-body": (_post_json("Transfer-Encoding: gzip\r\n\r\n{}"), 501),
    "a-huge-content-length": (_post_json("Content-Length: 99999999999999\r\n\r\n{}"), 413),
}


def _answer(host: str, port: int, raw: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send ``raw``; the status line, headers and body of the answer."""
    with socket.create_connection((host, port), 10.0) as client:
        client.sendall(raw)
        received = b""
        while not _whole_answer(received) and (data := client.recv(65536)):
            received += data
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return lines[0], headers, body


def _whole_answer(received: bytes) -> bool:
    """Whether ``received`` holds a header block and as much body as it announces."""
    head, found, body = received.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n"):
        if found and line.lower().startswith("content-length:"):
            return len(body) >= int(line.split(":", 1)[1])
    return False


def test_requests_waitress_cannot_read_are_answered_with_problem_documents(
    tmp_path: Path,
) -> None:
    with running_standalone(tmp_path / "state") as standalone:
        host, port = standalone.endpoint.removeprefix("http://").split(":")
        for name, (raw, status) in UNREADABLE_REQUESTS.items():
            # When a request waitress cannot read is sent
            status_line, headers, body = _answer(host, int(port), raw)
            # Then the answer is a problem document of the matching status
            assert status_line.split(" ")[1] == str(status), (name, status_line)
            assert headers.get("Content-Type") == "application/problem+json", (name, headers)
            document = json.loads(body)
            assert document["status"] == status, name
            assert document["detail"], name
        # And a body shorter than its Content-Length, then a half-close, is refused, not parsed
        body = '{"project": "p", "workflow": "wf", "session_time": "2026-01-02T00:00:00Z"}'
        with socket.create_connection((host, int(port)), 10.0) as client:
            client.sendall(_post_json(f"Content-Length: 100\r\n\r\n{body}"))
            client.shutdown(socket.SHUT_WR)
            received = b""
            while not _whole_answer(received) and (data := client.recv(65536)):
                received += data
        head, _, answer = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), received
        assert b"Content-Type: application/problem+json" in head
        assert "74 of the 100 bytes" in json.loads(answer)["detail"]
        # And one that closes outright after a short body costs nothing but its connection
        with socket.create_connection((host, int(port)), 10.0) as client:
            client.sendall(_post_json(f"Content-Length: 100\r\n\r\n{body}"))
        assert httpx.get(standalone.endpoint + "/healthz", timeout=5.0).status_code == 200
        assert "Traceback" not in standalone.output()
        assert httpx.get(standalone.endpoint + "/api/sessions", timeout=5.0).json()["items"] == []
