"""Request framing: a body that ends early, breaks its chunked framing or stalls is an HTTP
error, and what gunicorn cannot parse is answered as a problem document."""

from __future__ import annotations

import io
import json

import pytest
from gunicorn.http.errors import (
    InvalidChunkSize,
    InvalidHeaderName,
    LimitRequestHeaders,
    LimitRequestLine,
    NoMoreData,
    UnsupportedTransferCoding,
)
from werkzeug.exceptions import BadRequest, RequestTimeout

from services.api.framing import CheckedBody
from services.api.worker import parse_error_answer, problem_bytes


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
