"""A request body as gunicorn frames it, checked: a body that ends before its
``Content-Length``, breaks its chunked framing, stalls or announces more than the route
takes is an HTTP error, not data.

gunicorn hands the application a body that stops quietly where the connection stopped,
and raises its own parse errors (which Flask would answer 500) for a bad chunk. Wrapped
here, each becomes a Werkzeug HTTP error, which the API answers as a problem document:
400 for a short or malformed body, 408 for one that stalls past the socket's timeout,
413 as soon as a chunk's size line takes a body past the limit its route declared.

gunicorn has no setting for either, so this module and services/api/worker.py are the two
places tickwork relies on gunicorn's internals (undocumented names). Here:
``gunicorn.http.body.Body`` and its ``reader``, ``ChunkedReader(req, unreader)`` and its
``req`` and ``parse_chunk_size(unreader, data=None)``, the request's ``unreader``, and the
errors ``ParseException`` and ``NoMoreData``. Checked against the gunicorn versions
services/api/worker.py lists (pinned in constraints.txt); tests/test_library_internals.py
fails, naming this module, if those names change shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from gunicorn.http.body import Body, ChunkedReader
from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import BadRequest, RequestTimeout

from tickwork.services.api.errors import ApiProblem

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Readable(Protocol):
    """What a WSGI input stream offers."""

    def read(self, size: int | None = ..., /) -> bytes: ...

    def readline(self, size: int | None = ..., /) -> bytes: ...


SUPPORTED_TRANSFER_CODING = "chunked"


def unsupported_transfer_coding(headers: Iterable[tuple[str, str]]) -> str | None:
    """The first transfer coding of a request other than ``chunked`` (the only one the API
    decodes), or None. gunicorn accepts ``gzip, chunked`` and hands on the body still
    compressed, and refuses ``gzip`` alone as a bad header: each is a 501 here."""
    for name, value in headers:
        if name.upper() == "TRANSFER-ENCODING":
            for coding in value.split(","):
                if coding.strip(" \t").lower() != SUPPORTED_TRANSFER_CODING:
                    return coding.strip(" \t")
    return None


class ChunksPastLimit(ParseException):  # type: ignore[misc]
    """Raised when the chunk sizes of a body add up to more than its route takes."""

    def __init__(self, announced: int, max_bytes: int) -> None:
        super().__init__()
        self.announced = announced
        self.max_bytes = max_bytes

    def __str__(self) -> str:
        return (
            f"the body's chunks announce {self.announced} bytes; "
            f"this operation takes at most {self.max_bytes}"
        )


class LimitedChunkedReader(ChunkedReader):  # type: ignore[misc]
    """gunicorn's chunked reader, refusing a body as soon as a chunk's size line takes it
    past ``max_bytes``, instead of waiting for bytes it would refuse anyway."""

    def __init__(self, req: Any, unreader: Any) -> None:
        super().__init__(req, unreader)
        self.max_bytes: int | None = None
        self.announced = 0

    def parse_chunk_size(self, unreader: Any, data: bytes | None = None) -> tuple[int, Any]:
        size, rest = super().parse_chunk_size(unreader, data=data)
        self.announced += size
        if self.max_bytes is not None and self.announced > self.max_bytes:
            raise ChunksPastLimit(self.announced, self.max_bytes)
        return size, rest


class CheckedBody:
    """``wsgi.input`` that raises an HTTP error instead of returning a broken body."""

    def __init__(self, body: Readable, content_length: int | None) -> None:
        self.body = body
        self.content_length = content_length
        self.received = 0
        if isinstance(body, Body) and type(body.reader) is ChunkedReader:
            # Nothing of the body is read yet: the reader is replaced before it starts.
            body.reader = LimitedChunkedReader(body.reader.req, body.reader.req.unreader)

    def limit(self, max_bytes: int) -> None:
        """Refuse (413) a chunked body whose chunks announce more than ``max_bytes``."""
        reader = getattr(self.body, "reader", None)
        if isinstance(reader, LimitedChunkedReader):
            reader.max_bytes = max_bytes

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
        except ChunksPastLimit as exc:
            raise ApiProblem(413, str(exc)) from None
        except (ParseException, NoMoreData) as exc:
            raise BadRequest(f"the body's framing is broken: {exc}") from None
        self.received += len(data)
        return data


def content_length(environ: dict[str, Any]) -> int | None:
    """The request's ``Content-Length`` (gunicorn has checked it), or None."""
    raw = environ.get("CONTENT_LENGTH")
    return int(raw) if raw not in (None, "") else None


def limit_body(environ: dict[str, Any], max_bytes: int) -> None:
    """Refuse at once a chunked body announcing more than ``max_bytes`` (when the body is
    read through :class:`CheckedBody`; other servers bound it their own way)."""
    body = environ.get("wsgi.input")
    if isinstance(body, CheckedBody):
        body.limit(max_bytes)


def check_bodies(app: WsgiApp) -> WsgiApp:
    """``app`` reading every request body through :class:`CheckedBody`."""

    def checked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["wsgi.input"] = CheckedBody(environ["wsgi.input"], content_length(environ))
        return app(environ, start_response)

    return checked
