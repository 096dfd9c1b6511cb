"""A request body as gunicorn frames it, checked: a body that ends before its
``Content-Length``, breaks its chunked framing or stalls is an HTTP error, not data.

gunicorn hands the application a body that stops quietly where the connection stopped,
and raises its own parse errors (which Flask would answer 500) for a bad chunk. Wrapped
here, each becomes a Werkzeug HTTP error, which the API answers as a problem document:
400 for a short or malformed body, 408 for one that stalls past the socket's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import BadRequest, RequestTimeout

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Readable(Protocol):
    """What a WSGI input stream offers."""

    def read(self, size: int | None = ..., /) -> bytes: ...

    def readline(self, size: int | None = ..., /) -> bytes: ...


class CheckedBody:
    """``wsgi.input`` that raises an HTTP error instead of returning a broken body."""

    def __init__(self, body: Readable, content_length: int | None) -> None:
        self.body = body
        self.content_length = content_length
        self.received = 0

    def read(self, size: int | None = -1) -> bytes:
        data = self._checked(self.body.read, size)
        self._check_whole(ended=size is None or size < 0 or (size > 0 and not data))
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data = self._checked(self.body.readline, size)
        self._check_whole(ended=size != 0 and not data)
        return data

    def _check_whole(self, *, ended: bool) -> None:
        """BadRequest if the body has ended short of its ``Content-Length``."""
        if ended and self.content_length is not None and self.received < self.content_length:
            raise BadRequest(
                f"the body ended after {self.received} of the {self.content_length} "
                "bytes its Content-Length announced"
            )

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def _checked(self, read: Callable[[int | None], bytes], size: int | None) -> bytes:
        try:
            data = read(size)
        except TimeoutError:
            raise RequestTimeout("the client stopped sending the body") from None
        except (ParseException, NoMoreData) as exc:
            raise BadRequest(f"the body's framing is broken: {exc}") from None
        self.received += len(data)
        return data


def content_length(environ: dict[str, Any]) -> int | None:
    """The request's ``Content-Length`` (gunicorn has checked it), or None."""
    raw = environ.get("CONTENT_LENGTH")
    return int(raw) if raw not in (None, "") else None


def check_bodies(app: WsgiApp) -> WsgiApp:
    """``app`` reading every request body through :class:`CheckedBody`."""

    def checked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["wsgi.input"] = CheckedBody(environ["wsgi.input"], content_length(environ))
        return app(environ, start_response)

    return checked
