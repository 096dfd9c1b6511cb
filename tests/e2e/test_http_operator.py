"""``http>`` against a real HTTP server on a local port, run by ``tickwork run``."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.e2e._run import Project
from tests.support.servers import serve_http

pytestmark = pytest.mark.e2e


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """An empty project with its own state directory."""
    return Project.empty(tmp_path)


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A real HTTP server's handler: /ok answers JSON, /flaky 503 once then 200, else 404."""

    seen: ClassVar[list[tuple[str, str, str | None, bytes]]] = []
    flaky_calls: ClassVar[int] = 0

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, self.headers.get("Idempotency-Key"), body))
        status, payload = 404, b"{}"
        if self.path == "/ok":
            status, payload = 200, b'{"rows": 7}'
        elif self.path == "/flaky":
            type(self).flaky_calls += 1
            status = 503 if self.flaky_calls == 1 else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    """A real HTTP server on a free local port, in a thread; its base URL."""
    _Recorder.seen = []
    _Recorder.flaky_calls = 0
    with serve_http(_Recorder) as url:
        yield url


class TestHttp:
    def test_http_stores_the_json_it_got_for_later_tasks_with_an_idempotency_key(
        self, project: Project, http_server: str
    ) -> None:
        project.write(
            "wf.dig",
            f"""
            +fetch:
              http>: {http_server}/ok
              method: POST
              content: {{since: "${{session_date}}"}}
              store_content: true
            +use:
              sh>: echo "${{http.last_content.rows}}" > rows.txt
            """,
        )
        run = project.run("wf.dig", "-t", "2026-01-30")
        assert run.exit_code == 0, run.explain()
        assert project.read("rows.txt") == "7\n"
        ((method, path, key, body),) = _Recorder.seen
        assert (method, path, json.loads(body)) == ("POST", "/ok", {"since": "2026-01-30"})
        assert key is not None and key.startswith("tickwork-")

    def test_http_retries_a_503_with_the_same_idempotency_key(
        self, project: Project, http_server: str
    ) -> None:
        project.write("wf.dig", f"+fetch:\n  http>: {http_server}/flaky\n")
        run = project.run("wf.dig")
        assert run.exit_code == 0, run.explain()
        keys = [key for _m, _p, key, _b in _Recorder.seen]
        assert len(keys) == 2 and keys[0] == keys[1]

    def test_http_fails_the_task_on_a_client_error_without_retrying(
        self, project: Project, http_server: str
    ) -> None:
        project.write("wf.dig", f"+fetch:\n  http>: {http_server}/missing\n")
        run = project.run("wf.dig")
        assert run.exit_code == 1
        assert f"failed +wf+fetch: GET {http_server}/missing answered 404" in run.summary
        assert len(_Recorder.seen) == 1

    def test_a_post_is_not_sent_again_unless_retry_says_so(
        self, project: Project, http_server: str
    ) -> None:
        project.write(
            "wf.dig",
            f"""
            +once:
              http>: {http_server}/flaky
              method: POST
              content: {{a: 1}}
              content_format: form
              headers:
                - X-Tag: a
                - X-Tag: b
            """,
        )
        run = project.run("wf.dig")
        assert run.exit_code == 1, run.explain()
        assert f"POST {http_server}/flaky answered 503" in run.summary
        ((method, _path, _key, body),) = _Recorder.seen
        assert (method, body) == ("POST", b"a=1")
        _Recorder.seen, _Recorder.flaky_calls = [], 0
        project.write(
            "again.dig",
            f"+twice:\n  http>: {http_server}/flaky\n  method: POST\n  retry: true\n",
        )
        assert project.run("again.dig").exit_code == 0
        assert [m for m, _p, _k, _b in _Recorder.seen] == ["POST", "POST"]
