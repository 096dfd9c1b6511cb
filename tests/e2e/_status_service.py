"""A job-status service for the ``http_status.dig`` example: a real HTTP server on a free
local port, in a thread. GET /status answers that the job is ready with 42 rows."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.servers import serve_http


@dataclass
class StatusService:
    """The URL of the service's /status and the ``(method, path, Idempotency-Key)`` of
    each request it got, in order."""

    url: str
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)


@contextmanager
def serve_status() -> Iterator[StatusService]:
    """Run the status service while the block runs."""
    seen: list[tuple[str, str, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
            found = self.path == "/status"
            payload = b'{"state": "ready", "rows": 42}' if found else b"{}"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serve_http(Handler) as url:
        yield StatusService(f"{url}/status", seen)
