"""The gunicorn worker serving the API: gevent, bounded waits, problem+json parse errors.

Each connection is a greenlet, so a connection that sends nothing, half a header block or
no body, and a log follow stream, cost a little memory and no thread. Waits are bounded:

- gunicorn's gevent worker reads every header block, the first one included, under a
  timer of ``keepalive`` seconds; a client silent that long is dropped without an answer;
- every other wait on the socket, for the next part of a body or for the client to take
  the next part of an answer, is at most ``body_timeout_seconds``: a body that stalls
  gets 408, and a client that stopped reading is dropped.

A request gunicorn cannot parse (bad request line or header, too long a line or header,
bad chunked framing) is answered with a problem document, like every other error.

A custom worker class is gunicorn's documented way to change how it serves, but the
methods overridden here are not documented: ``GeventWorker.handle_request(listener_name,
req, sock, addr)``, ``handle_error(req, client, addr, exc)`` and ``patch()``, with the
request's ``body`` and ``headers``, ``InvalidHeader.req``, ``cfg.keepalive`` and
``gunicorn.util.close_graceful``. This module and services/api/framing.py are the two
places tickwork relies on gunicorn's internals. Checked against gunicorn 27.0.1 (pinned
in constraints.txt); tests/test_library_internals.py fails, naming the module, if those
names change shape.
"""

from __future__ import annotations

import json
import socket
import warnings
from http import HTTPStatus
from typing import Any

import gevent
from gevent import monkey
from gunicorn import util
from gunicorn.http.errors import (
    ConfigurationProblem,
    ExpectationFailed,
    ForbiddenProxyRequest,
    InvalidHeader,
    LimitRequestHeaders,
    LimitRequestLine,
    ParseException,
    UnsupportedTransferCoding,
)
from gunicorn.workers.ggevent import GeventWorker

from tickwork.services.api.cooperative_psycopg import use_cooperative_psycopg
from tickwork.services.api.errors import PROBLEM_MEDIA_TYPE, problem_document
from tickwork.services.api.framing import unsupported_transfer_coding

CHECKED_GUNICORN_VERSIONS = ("27.0.1",)
"""The gunicorn versions this module and services/api/framing.py were read against."""

# A parse error's status when it is not 400 (gunicorn's own choice for each).
PARSE_ERROR_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (LimitRequestLine, 414),
    (LimitRequestHeaders, 431),
    (ExpectationFailed, 417),
    (UnsupportedTransferCoding, 501),
    (ForbiddenProxyRequest, 403),
    (ConfigurationProblem, 500),
)
INTERNAL_ERROR = "internal error; see the server's log"
# Most bytes of a body the app left unread that are read (and dropped) to keep the
# connection for the next request; past it, or past the header timeout, it closes.
DRAIN_MAX_BYTES = 1024 * 1024


def parse_error_answer(exc: BaseException) -> tuple[int, str]:
    """The status and detail of the answer to a request that failed before the app ran."""
    if not isinstance(exc, ParseException):
        return 500, INTERNAL_ERROR
    request = getattr(exc, "req", None) if isinstance(exc, InvalidHeader) else None
    if request is not None and (coding := unsupported_transfer_coding(request.headers)):
        exc = UnsupportedTransferCoding(coding)  # gunicorn says "bad header" for `gzip` alone
    status = next((s for kind, s in PARSE_ERROR_STATUS if isinstance(exc, kind)), 400)
    return status, (str(exc) if status != 500 else INTERNAL_ERROR)


def problem_bytes(status: int, detail: str) -> bytes:
    """A whole HTTP/1.1 answer carrying a problem document; the connection then closes."""
    body = json.dumps(problem_document(status, detail)).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Content-Type: {PROBLEM_MEDIA_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class PacedSocket:
    """A client socket whose ``sendall`` waits at most the socket's timeout for *each*
    part the client takes, where gevent's bounds the whole call: a slow reader still gets
    a large answer, and one that stopped reading is dropped."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def sendall(self, data: bytes | memoryview, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        while view:
            view = view[self._sock.send(view, flags) :]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class ApiWorker(GeventWorker):  # type: ignore[misc]
    """gunicorn's gevent worker with a body timeout and problem+json parse errors."""

    body_timeout_seconds: float = 10.0

    @classmethod
    def configured(cls, *, body_timeout_seconds: float) -> type[ApiWorker]:
        """This worker class with its timeouts (gunicorn builds the workers itself)."""
        return type(cls.__name__, (cls,), {"body_timeout_seconds": body_timeout_seconds})

    def patch(self) -> None:
        # The master imported ssl (for clients it never uses here) before the patch; the
        # API serves no TLS itself, so gevent's warning about it only adds noise.
        warnings.filterwarnings("ignore", category=monkey.MonkeyPatchWarning)
        super().patch()
        use_cooperative_psycopg()

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> Any:
        if coding := unsupported_transfer_coding(req.headers):
            raise UnsupportedTransferCoding(coding)  # answered 501 by handle_error
        # While a request is served, every wait for its body or for the client to take
        # the answer is bounded; the header block is bounded by gunicorn's own timer.
        sock.settimeout(self.body_timeout_seconds)
        try:
            served = super().handle_request(listener_name, req, PacedSocket(sock), addr)
        except TimeoutError:
            # The answer had started: all that is left is closing the connection.
            wait = self.body_timeout_seconds
            self.log.info("client took nothing for %ss; connection closed", wait)
            raise StopIteration from None
        if not served:  # the app took the socket over, or the worker is stopping
            return served
        # What the app left of the body is read now, so that a broken one closes the
        # connection instead of drawing a second, unasked-for answer.
        if not self._drain_body(req):
            raise StopIteration
        sock.settimeout(None)  # the next header block is waited for under gunicorn's timer
        return served

    def _drain_body(self, req: Any) -> bool:
        """Whether the rest of the body was read whole (in time, within the byte cap)."""
        body = getattr(req, "body", None)
        if body is None:
            return True
        if getattr(body, "failed", False):  # reading it raised: where it ends is unknown
            return False
        drained = 0
        with gevent.Timeout(self.cfg.keepalive, False):
            try:
                while data := body.read(65536):
                    drained += len(data)
                    if drained > DRAIN_MAX_BYTES:
                        return False
            except (ParseException, OSError):
                return False
            return True
        return False  # the timer ran out

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        status, detail = parse_error_answer(exc)
        ip = addr[0] if addr else ""
        if status == 500:
            self.log.exception("error handling a request from ip=%s", ip)
        else:
            self.log.warning("invalid request from ip=%s: %s (%s)", ip, detail, status)
        try:
            client.sendall(problem_bytes(status, detail))
        except OSError:
            self.log.debug("could not send the error answer")
        # Read what the client still sends for a moment, so closing does not reset the
        # connection (which could drop the answer before the client reads it).
        util.close_graceful(client)
