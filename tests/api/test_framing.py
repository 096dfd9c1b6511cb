"""Request framing: a body that ends early, breaks its chunked framing or stalls is an HTTP
error, and what gunicorn cannot parse is answered as a problem document."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import pytest
from gunicorn.http.body import Body, ChunkedReader
from gunicorn.http.errors import (
    InvalidChunkSize,
    InvalidHeader,
    InvalidHeaderName,
    LimitRequestHeaders,
    LimitRequestLine,
    NoMoreData,
    UnsupportedTransferCoding,
)
from gunicorn.http.unreader import IterUnreader
from werkzeug.exceptions import BadRequest, RequestTimeout

from tickwork.services.api.errors import ApiProblem
from tickwork.services.api.framing import CheckedBody, unsupported_transfer_coding
from tickwork.services.api.worker import parse_error_answer, problem_bytes


class Failing:
    """A body whose every read raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def read(self, size: int | None = -1, /) -> bytes:
        raise self.error

    def readline(self, size: int | None = -1, /) -> bytes:
        raise self.error


class TestCheckedBody:
    def test_a_whole_body_reads_as_sent(self) -> None:
        body = CheckedBody(io.BytesIO(b'{"a": 1}'), 8)
        assert body.read() == b'{"a": 1}'

    def test_a_body_read_in_parts_reads_as_sent(self) -> None:
        body = CheckedBody(io.BytesIO(b"abcdef"), 6)
        assert [body.read(4), body.read(4), body.read(4)] == [b"abcd", b"ef", b""]

    def test_a_body_shorter_than_its_content_length_is_a_bad_request(self) -> None:
        body = CheckedBody(io.BytesIO(b'{"a"'), 100)
        with pytest.raises(BadRequest, match="ended after 4 of the 100 bytes"):
            body.read()

    def test_a_short_body_read_in_parts_is_a_bad_request_at_its_end(self) -> None:
        body = CheckedBody(io.BytesIO(b"abc"), 10)
        assert body.read(2) == b"ab"
        assert body.read(2) == b"c"
        with pytest.raises(BadRequest):
            body.read(2)

    def test_a_short_body_read_by_lines_is_a_bad_request_at_its_end(self) -> None:
        body = CheckedBody(io.BytesIO(b"a\nb"), 10)
        assert [body.readline(), body.readline()] == [b"a\n", b"b"]
        with pytest.raises(BadRequest):
            body.readline()

    def test_a_body_without_content_length_ends_where_it_ends(self) -> None:
        assert CheckedBody(io.BytesIO(b"abc"), None).read() == b"abc"

    def test_a_broken_chunk_is_a_bad_request_naming_it(self) -> None:
        body = CheckedBody(Failing(InvalidChunkSize(b"zz")), None)
        with pytest.raises(BadRequest, match="Invalid chunk size"):
            body.read()

    def test_a_connection_closed_inside_a_chunk_is_a_bad_request(self) -> None:
        with pytest.raises(BadRequest):
            CheckedBody(Failing(NoMoreData(b"")), None).readline()

    def test_a_body_that_stalls_is_a_request_timeout(self) -> None:
        with pytest.raises(RequestTimeout):
            CheckedBody(Failing(TimeoutError()), 10).read()


@dataclass
class ChunkedRequest:
    """What gunicorn's chunked reader asks of its request: the bytes after the headers."""

    unreader: IterUnreader
    headers: list[tuple[str, str]] = field(default_factory=list)


def chunked_body(*parts: bytes) -> CheckedBody:
    """A chunked body as gunicorn hands it to the app, its bytes ``parts``, checked."""
    request = ChunkedRequest(IterUnreader(parts))
    return CheckedBody(Body(ChunkedReader(request, request.unreader)), None)


class TestChunkedBodyLimit:
    def test_a_chunk_past_the_limit_is_refused_before_its_bytes_are_awaited(self) -> None:
        # The bytes the chunk announces never come: reading them would wait
        body = chunked_body(b"ffffffffffffffffffffffff\r\n{}")
        body.limit(1024)
        with pytest.raises(ApiProblem) as refused:
            body.read()
        assert refused.value.status == 413
        assert "at most 1024" in refused.value.detail

    def test_chunks_adding_up_past_the_limit_are_refused(self) -> None:
        body = chunked_body(b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n")
        body.limit(5)
        with pytest.raises(ApiProblem, match="chunks announce 6 bytes"):
            body.read()

    def test_chunks_within_the_limit_read_as_sent(self) -> None:
        body = chunked_body(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        body.limit(5)
        assert body.read() == b"abcde"

    def test_without_a_limit_a_chunked_body_reads_as_sent(self) -> None:
        assert chunked_body(b"3\r\nabc\r\n0\r\n\r\n").read() == b"abc"


class TestTransferCodings:
    @pytest.mark.parametrize(
        ("value", "unsupported"),
        [("chunked", None), ("Chunked", None), ("gzip, chunked", "gzip"), ("gzip", "gzip")],
    )
    def test_only_chunked_is_a_supported_coding(self, value: str, unsupported: str | None) -> None:
        assert unsupported_transfer_coding([("TRANSFER-ENCODING", value)]) == unsupported

    def test_a_request_without_a_coding_has_none_unsupported(self) -> None:
        assert unsupported_transfer_coding([("CONTENT-LENGTH", "2")]) is None

    def test_a_coding_gunicorn_calls_a_bad_header_is_answered_501(self) -> None:
        request = ChunkedRequest(IterUnreader([]), [("TRANSFER-ENCODING", "gzip")])
        error = InvalidHeader("TRANSFER-ENCODING", req=request)
        assert parse_error_answer(error) == (501, "Unsupported transfer coding: 'gzip'")

    def test_a_bad_transfer_encoding_of_chunked_codings_stays_400(self) -> None:
        request = ChunkedRequest(IterUnreader([]), [("TRANSFER-ENCODING", "chunked, chunked")])
        assert parse_error_answer(InvalidHeader("TRANSFER-ENCODING", req=request))[0] == 400


class TestParseErrorAnswers:
    @pytest.mark.parametrize(
        ("error", "status"),
        [
            (LimitRequestLine(8192, 4094), 414),
            (LimitRequestHeaders("limit request headers fields size"), 431),
            (InvalidHeaderName("Ho st"), 400),
            (InvalidChunkSize(b"zz"), 400),
            (UnsupportedTransferCoding("gzip"), 501),
        ],
    )
    def test_a_request_gunicorn_cannot_parse_gets_the_matching_status(
        self, error: Exception, status: int
    ) -> None:
        assert parse_error_answer(error) == (status, str(error))

    def test_an_unexpected_error_is_500_without_its_message(self) -> None:
        status, detail = parse_error_answer(KeyError("secret"))
        assert (status, detail) == (500, "internal error; see the server's log")

    def test_the_answer_is_a_problem_document_and_closes_the_connection(self) -> None:
        head, _, body = problem_bytes(431, "too many headers").partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 431 Request Header Fields Too Large"
        assert "Content-Type: application/problem+json" in lines
        assert "Connection: close" in lines
        assert f"Content-Length: {len(body)}" in lines
        document = json.loads(body)
        assert document["status"] == 431
        assert document["detail"] == "too many headers"
        assert document["type"].endswith("/too-large")
