"""How ``tickwork api`` serves: slow clients and log follow streams cannot freeze it, a
silent client is dropped, and a request it cannot parse or whose body is broken is
answered with a problem document (never 500, never an HTML page)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.api._seed import NOW, THREE_STEPS, add_project
from tests.api._server import TOKEN, serving, wait_until_healthy
from tests.support.waiting import wait_until
from tickwork.shared.store.tables import task_logs, tasks

pytestmark = pytest.mark.slow

AUTH = f"Authorization: Bearer {TOKEN}\r\n"
HEADER_TIMEOUT_SECONDS = 5  # tickwork api's default
BODY_TIMEOUT_SECONDS = 2  # set for these tests, to keep them quick
SLOW_CLIENTS = 200
FOLLOW_STREAMS = 50
ANSWER_WITHIN_SECONDS = 2.0


@pytest.fixture
def api_url(migrated_postgres_url: str, tmp_path: Path) -> Iterator[str]:
    """A started server (auth on, no rate limit) with a project ``p`` of workflow ``wf``."""
    url = migrated_postgres_url
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        add_project(conn, "p", {"wf": THREE_STEPS})
    engine.dispose()
    (tmp_path / "logs").mkdir()
    with serving(
        url,
        tmp_path,
        "--body-timeout",
        str(BODY_TIMEOUT_SECONDS),
        TICKWORK_API_RATE_LIMIT="0",
        TICKWORK_LOG_DIR=str(tmp_path / "logs"),
    ) as (process, base_url):
        wait_until_healthy(base_url, process)
        yield base_url


def start_attempt(base_url: str) -> int:
    """An attempt nothing runs (no executor): following its logs never ends by itself."""
    body = {"project": "p", "workflow": "wf", "session_time": "2026-01-01T00:00:00Z"}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = httpx.post(f"{base_url}/api/attempts", json=body, headers=headers, timeout=10)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def connect(base_url: str, payload: bytes = b"", timeout: float = 15.0) -> socket.socket:
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    if payload:
        sock.sendall(payload)
    return sock


def exchange(base_url: str, raw: bytes, *, half_close: bool = False) -> tuple[str, str, bytes]:
    """Send ``raw``; the status line, the Content-Type and the body of the answer."""
    with connect(base_url, raw) as sock:
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while b"\r\n\r\n" not in received or not _complete(received):
            data = sock.recv(65536)
            if not data:
                break
            received += data
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return lines[0], headers.get("Content-Type", ""), body


def _complete(received: bytes) -> bool:
    head, _, body = received.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            return len(body) >= int(line.split(":", 1)[1])
    return False


def closed_after(sock: socket.socket) -> float:
    """Seconds until the server closes ``sock`` (what it sends before is dropped)."""
    started = time.monotonic()
    while sock.recv(65536):
        pass
    return time.monotonic() - started


def add_large_log(base_url: str, database_url: str, log_dir: Path, size: int) -> str:
    """A log file of ``size`` bytes of a task of a new attempt; the path to GET it."""
    attempt_id = start_attempt(base_url)
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    task = {"attempt_id": attempt_id, "parent_id": None, "full_name": "+wf+big", "position": 0}
    task |= {"is_group": False, "is_generated": False, "state": "success", "config": {}}
    task |= {"created_at": NOW, "updated_at": NOW}
    (log_dir / "big.log").write_bytes(b"x" * size)
    log = {"attempt_id": attempt_id, "lease_token": 1, "path": "big.log", "size_bytes": size}
    try:
        with engine.begin() as conn:
            task_id = conn.execute(tasks.insert().returning(tasks.c.id), task).scalar_one()
            log |= {"task_id": task_id, "created_at": NOW}
            file_id = conn.execute(task_logs.insert().returning(task_logs.c.id), log).scalar_one()
    finally:
        engine.dispose()
    return f"/api/logs/{attempt_id}/files/{file_id}"


class TestSlowClients:
    def test_healthz_and_the_session_list_answer_while_slow_clients_and_streams_hold_on(
        self, api_url: str
    ) -> None:
        # Given 200 connections that send nothing, half a header block, or headers and
        # no body, and 50 log follow streams of an attempt that never ends
        attempt_id = start_attempt(api_url)
        partial = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: slow"
        no_body = (
            f"POST /api/attempts HTTP/1.1\r\nHost: x\r\n{AUTH}"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        ).encode()
        follow = f"GET /api/logs/{attempt_id}/follow HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode()
        held = [connect(api_url, (b"", partial, no_body)[i % 3]) for i in range(SLOW_CLIENTS)]
        streams = [connect(api_url, follow) for _ in range(FOLLOW_STREAMS)]
        try:
            # When probes and a session list are asked for
            for _ in range(5):
                for path in ("/healthz", "/api/sessions?limit=100"):
                    started = time.monotonic()
                    headers = {"Authorization": f"Bearer {TOKEN}"}
                    response = httpx.get(f"{api_url}{path}", headers=headers, timeout=10)
                    elapsed = time.monotonic() - started
                    # Then each is answered, promptly
                    assert response.status_code == 200, path
                    assert elapsed < ANSWER_WITHIN_SECONDS, f"{path} took {elapsed:.1f}s"
            # and every follow stream is open
            for stream in streams:
                assert stream.recv(64).startswith(b"HTTP/1.1 200 ")
        finally:
            for sock in held + streams:
                sock.close()

    @pytest.mark.parametrize(
        "sent", [b"", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"], ids=["nothing", "half-a-header"]
    )
    def test_a_silent_client_is_dropped_after_the_header_timeout(
        self, api_url: str, sent: bytes
    ) -> None:
        with connect(api_url, sent) as sock:
            elapsed = closed_after(sock)
        assert HEADER_TIMEOUT_SECONDS - 1 < elapsed < HEADER_TIMEOUT_SECONDS + 3

    def test_a_slow_reader_gets_a_large_answer_whole_past_the_body_timeout(
        self, api_url: str, migrated_postgres_url: str, tmp_path: Path
    ) -> None:
        # Given a 16 MiB log file
        size = 16 * 1024 * 1024
        path = add_large_log(api_url, migrated_postgres_url, tmp_path / "logs", size)
        # When a client reads it at about 2 MiB a second
        request = f"GET {path} HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode()
        received, started = 0, time.monotonic()
        with connect(api_url, request) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            while data := sock.recv(65536):
                received += len(data)
                if received >= size:
                    break
                time.sleep(0.03)
        # Then it gets all of it, though that took longer than the body timeout
        assert received >= size
        assert time.monotonic() - started > 2 * BODY_TIMEOUT_SECONDS

    def test_a_client_that_stops_sending_its_body_gets_408_after_the_body_timeout(
        self, api_url: str
    ) -> None:
        raw = (
            f"POST /api/attempts HTTP/1.1\r\nHost: x\r\n{AUTH}"
            'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"project"'
        ).encode()
        started = time.monotonic()
        status, media_type, body = exchange(api_url, raw)
        assert status.startswith("HTTP/1.1 408 ")
        assert media_type == "application/problem+json"
        assert json.loads(body)["status"] == 408
        assert time.monotonic() - started < BODY_TIMEOUT_SECONDS + 3


def test_a_request_waiting_on_the_database_does_not_hold_up_its_worker(
    migrated_postgres_url: str, tmp_path: Path
) -> None:
    # Given one worker, and the sessions table locked by another transaction
    url = migrated_postgres_url
    with serving(url, tmp_path, "--workers", "1") as (process, base_url):
        wait_until_healthy(base_url, process)
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        headers = {"Authorization": f"Bearer {TOKEN}"}
        try:
            with engine.begin() as conn, httpx.Client(base_url=base_url, timeout=10) as client:
                conn.execute(text("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE"))
                # When a session list waits for the lock
                with ThreadPoolExecutor(1) as pool:
                    listing = pool.submit(client.get, "/api/sessions", headers=headers)

                    def the_list_waits_for_the_lock() -> bool:
                        with engine.connect() as watcher:
                            waiting = (  # in this database: pg_locks shows the whole server
                                "SELECT count(*) FROM pg_locks WHERE NOT granted AND database ="
                                " (SELECT oid FROM pg_database WHERE datname = current_database())"
                            )
                            return bool(watcher.execute(text(waiting)).scalar_one())

                    wait_until("the list waits for the lock", the_list_waits_for_the_lock, 10)
                    assert not listing.done()
                    # Then the same worker still answers other requests
                    started = time.monotonic()
                    assert httpx.get(f"{base_url}/healthz", timeout=5).status_code == 200
                    assert time.monotonic() - started < ANSWER_WITHIN_SECONDS
                    conn.rollback()
                    # and the list is answered once the lock is released
                    assert listing.result(timeout=10).status_code == 200
        finally:
            engine.dispose()


def test_a_follow_stream_whose_client_has_gone_ends_and_frees_its_place(
    migrated_postgres_url: str, tmp_path: Path
) -> None:
    # Given one worker that serves one follow stream at most, and that stream open
    url = migrated_postgres_url
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        add_project(conn, "p", {"wf": THREE_STEPS})
    engine.dispose()
    (tmp_path / "logs").mkdir()
    env = {"TICKWORK_LOG_DIR": str(tmp_path / "logs"), "TICKWORK_API_MAX_FOLLOWS": "1"}
    with serving(url, tmp_path, "--workers", "1", **env) as (process, base_url):
        wait_until_healthy(base_url, process)
        follow = f"/api/logs/{start_attempt(base_url)}/follow"
        request = f"GET {follow} HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode()
        with connect(base_url, request) as first:
            assert first.recv(64).startswith(b"HTTP/1.1 200 ")
            headers = {"Authorization": f"Bearer {TOKEN}"}
            assert httpx.get(f"{base_url}{follow}", headers=headers).status_code == 503

        # When its client goes away without a word
        # Then the server notices within a few quiet passes, and a new stream may open
        def a_new_stream_opens() -> bool:
            with connect(base_url, request) as again:
                return again.recv(64).startswith(b"HTTP/1.1 200 ")

        wait_until("the gone stream frees its place", a_new_stream_opens, 15, poll=0.5)


JSON = "Content-Type: application/json\r\n"


def _post(body_and_headers: str) -> bytes:
    return f"POST /api/attempts HTTP/1.1\r\nHost: x\r\n{AUTH}{body_and_headers}".encode()


FRAMING_CASES = {
    "a-chunk-size-that-is-not-hex": (
        _post("Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n"),
        400,
        "Invalid chunk size",
    ),
    "a-request-line-too-long": (
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        414,
        "Request Line is too large",
    ),
    "a-header-too-large": (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
        431,
        "limit request headers",
    ),
    "a-malformed-header-name": (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n",
        400,
        "Invalid HTTP header name",
    ),
    "a-malformed-request-line": (b"GARBAGE\r\n\r\n", 400, "Invalid"),
    "a-compressed-chunked-body": (
        _post(f"{JSON}Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"),
        501,
        "Unsupported transfer coding: 'gzip'",
    ),
    "a-compressed-body": (
        _post(f"{JSON}Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{{}}"),
        501,
        "Unsupported transfer coding: 'gzip'",
    ),
    # Answered at once: not after the body timeout, waiting for bytes it would refuse
    "a-chunk-larger-than-a-json-body-may-be": (
        _post(f"{JSON}Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffffffff\r\n{{}}"),
        413,
        "this operation takes at most 1048576",
    ),
    "a-chunk-larger-than-an-archive-may-be": (
        (
            f"PUT /api/projects/p HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Type: application/gzip\r\n"
            "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffffffff\r\n\x1f\x8b"
        ).encode(),
        413,
        "this operation takes at most 67108864",
    ),
}


class TestFraming:
    @pytest.mark.parametrize(
        ("raw", "status", "detail"), FRAMING_CASES.values(), ids=FRAMING_CASES.keys()
    )
    def test_a_badly_framed_request_is_answered_with_a_problem_document(
        self, api_url: str, raw: bytes, status: int, detail: str
    ) -> None:
        began = time.monotonic()
        status_line, media_type, body = exchange(api_url, raw)
        assert time.monotonic() - began < BODY_TIMEOUT_SECONDS
        assert status_line.startswith(f"HTTP/1.1 {status} "), status_line
        assert media_type == "application/problem+json"
        document = json.loads(body)
        assert document["status"] == status
        assert detail in document["detail"]

    def test_a_body_shorter_than_its_content_length_is_refused_not_parsed(
        self, api_url: str
    ) -> None:
        # Given a client that announces 100 bytes, sends a whole JSON value, and half-closes
        body = '{"project": "p", "workflow": "wf", "session_time": "2026-01-02T00:00:00Z"}'
        raw = _post(f"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{body}")
        status_line, media_type, answer = exchange(api_url, raw, half_close=True)
        # Then the request is refused, naming the missing bytes, and no attempt is made
        assert status_line.startswith("HTTP/1.1 400 "), status_line
        assert media_type == "application/problem+json"
        assert "Content-Length" in json.loads(answer)["detail"]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        listed = httpx.get(f"{api_url}/api/sessions", headers=headers, timeout=10).json()
        assert listed["items"] == []
