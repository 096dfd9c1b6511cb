"""waitress's own answers, to requests it cannot read, as problem documents like every
other error of the API.

waitress answers a malformed request line, header or chunk (400), too large a header
block (431) or body (413) and a transfer coding it does not decode (501) itself, before
the application runs, as text/plain. Its channel class says which task writes those
answers: here one that writes ``application/problem+json``. The channel also answers
(400) a body that ends before its ``Content-Length`` because the client shut its sending
side, where waitress would close the connection without a word.

waitress offers no public way to change its own answers, so this is the only place
tickwork relies on its internals (undocumented names of waitress 3): the server's
``channel_class`` (set by services/compose/standalone.py), ``HTTPChannel.error_task_class``,
``HTTPChannel.handle_read`` and its ``request``, ``requests``, ``requests_lock``,
``server.add_task`` and ``socket``; ``ErrorTask.execute`` and the task's ``request``,
``status``, ``response_headers``, ``set_close_on_finish``, ``content_length`` and
``write``; the parser's ``error``, ``headers_finished``, ``completed``, ``chunked``,
``content_length`` and ``body_bytes_received``; ``waitress.utilities.BadRequest``.

Checked against waitress 3.0.2 (pinned in constraints.txt); tests/test_library_internals.py
fails, naming this module, if those names change shape.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from waitress.channel import HTTPChannel
from waitress.task import ErrorTask
from waitress.utilities import BadRequest

from tickwork.services.api.errors import PROBLEM_MEDIA_TYPE, problem_document

CHECKED_WAITRESS_VERSIONS = ("3.0.2",)
"""The waitress versions the classes below were read against."""


class ProblemErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's error answer, its body a problem document; the connection then closes."""

    def execute(self) -> None:
        error = self.request.error
        body = json.dumps(problem_document(error.code, error.body)).encode()
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", PROBLEM_MEDIA_TYPE))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class ProblemChannel(HTTPChannel):  # type: ignore[misc]
    """waitress's connection, answering requests it cannot read with problem documents."""

    error_task_class = ProblemErrorTask
    request: Any  # the request being read, set by waitress

    def handle_read(self) -> None:
        # waitress closes a connection whose client stopped sending; one that stops inside
        # a body of known length (a half-close after a short body) is answered 400 first.
        request = self.request
        if _inside_sized_body(request) and self._client_stopped_sending():
            request.error = BadRequest(
                f"the body ended after {request.body_bytes_received} of the "
                f"{request.content_length} bytes its Content-Length announced"
            )
            request.completed = True
            with self.requests_lock:
                self.requests.append(request)
                self.request = None
                if len(self.requests) == 1:  # else the task serving the one before adds it
                    self.server.add_task(self)
            return
        super().handle_read()

    def _client_stopped_sending(self) -> bool:
        try:
            return bool(self.socket.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return False


def _inside_sized_body(request: Any) -> bool:
    """Whether ``request`` has its headers and part of a ``Content-Length`` body."""
    return (
        request is not None
        and request.headers_finished
        and not request.completed
        and not request.chunked
        and request.content_length > 0
    )
