"""Specifications of /api/logs: an attempt's run logs (in the store), their content by
range, and following the logs as server-sent events until the attempt ends."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api._seed import NOW, THREE_STEPS, add_project, add_sessions, set_state
from tests.api.conftest import assert_problem
from tickwork.services.api.routes import logs as logs_routes
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.logs import LogChunk, notify_log_readers, write_log_chunks
from tickwork.shared.store.tables import task_logs, tasks

CONTENT = b"line one\nline two\nline three\n"


@pytest.fixture
def attempt_id(engine: Engine) -> int:
    """An attempt (running) of a session, with tasks +steps+first and +steps+second."""
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    add_sessions(engine, project_id, "steps", 1, state=AttemptState.RUNNING)
    with engine.begin() as conn:
        for name in ("+steps+first", "+steps+second"):
            conn.execute(
                tasks.insert(),
                {
                    "attempt_id": 1,
                    "parent_id": None,
                    "full_name": name,
                    "position": 0,
                    "is_group": False,
                    "is_generated": False,
                    "state": "success",
                    "config": {},
                    "created_at": NOW,
                    "updated_at": NOW,
                },
            )
    return 1


def add_log(
    engine: Engine,
    task_id: int,
    relative: str,
    content: bytes,
    *,
    stored: bool = True,
    truncated_bytes: int = 0,
    ended: bool = True,
) -> int:
    """Index a run's log named ``relative`` and store ``content`` as its one chunk
    (unless not ``stored``); its id. A run not ``ended`` is indexed as the executor
    dispatched it: 0 bytes, no end yet, only its chunks say how far it wrote."""
    with engine.begin() as conn:
        log_id = int(
            conn.execute(
                task_logs.insert().returning(task_logs.c.id),
                {
                    "task_id": task_id,
                    "attempt_id": 1,
                    "lease_token": 1,
                    "path": relative,
                    "size_bytes": len(content) if ended else 0,
                    "truncated_bytes": truncated_bytes,
                    "created_at": NOW,
                    "ended_at": NOW if ended else None,
                },
            ).scalar_one()
        )
    if stored:
        append_log(engine, task_id, 0, content)
    return log_id


def append_log(engine: Engine, task_id: int, offset: int, data: bytes) -> None:
    """Store a chunk of run 1 of ``task_id`` as the executor does, telling followers."""
    with engine.begin() as conn:
        write_log_chunks(conn, [LogChunk(task_id, 1, offset, data)])
        notify_log_readers(conn, [1])


class TestFiles:
    def test_the_logs_of_an_attempt_optionally_by_task_prefix(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        add_log(engine, 1, "1/first.1.1.log", CONTENT)
        add_log(engine, 2, "1/second.2.1.log", b"x")
        every = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert [(f["task"], f["size_bytes"]) for f in every] == [
            ("+steps+first", len(CONTENT)),
            ("+steps+second", 1),
        ]
        some = api.get(f"/api/logs/{attempt_id}/files?task=%2Bsteps%2Bsec").json["items"]
        assert [f["task"] for f in some] == ["+steps+second"]

    def test_a_run_still_going_is_listed_at_its_size_now_and_read_as_far_as_written(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        # Given a run indexed when it was dispatched, which has written one line so far
        file_id = add_log(engine, 1, "1/first.1.1.log", b"line one\n", ended=False)
        # Then it is listed with the size it reached, not yet ended
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert (listed["size_bytes"], listed["ended_at"]) == (len(b"line one\n"), None)
        # And reading it gives what it wrote so far
        assert api.get(f"/api/logs/{attempt_id}/files/{file_id}").data == b"line one\n"
        # When it writes more
        append_log(engine, 1, len(b"line one\n"), b"line two\n")
        # Then both the listing and the content show it
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert listed["size_bytes"] == len(b"line one\nline two\n")
        assert api.get(f"/api/logs/{attempt_id}/files/{file_id}").data == b"line one\nline two\n"

    def test_a_run_that_has_written_nothing_yet_is_listed_empty_and_reads_as_empty(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", b"", stored=False, ended=False)
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert listed["size_bytes"] == 0
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        assert (response.status_code, response.data) == (200, b"")

    def test_the_logs_of_an_unknown_attempt_are_404(self, api: FlaskClient) -> None:
        assert api.get("/api/logs/999/files").status_code == 404

    def test_a_cut_log_is_listed_with_how_many_bytes_were_cut(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        add_log(engine, 1, "1/first.1.1.log", CONTENT, truncated_bytes=123_456_789)
        add_log(engine, 2, "1/second.2.1.log", CONTENT)
        items = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert [(f["task"], f["truncated_bytes"]) for f in items] == [
            ("+steps+first", 123_456_789),
            ("+steps+second", 0),
        ]


class TestContent:
    def test_a_whole_log(self, api: FlaskClient, engine: Engine, attempt_id: int) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        assert response.status_code == 200
        assert response.data == CONTENT
        assert response.headers["Accept-Ranges"] == "bytes"

    @pytest.mark.parametrize(
        ("header", "first", "last"),
        [
            ("bytes=0-3", 0, 3),
            ("bytes=9-", 9, len(CONTENT) - 1),
            ("bytes=-6", len(CONTENT) - 6, len(CONTENT) - 1),
            ("bytes=5-9999", 5, len(CONTENT) - 1),
        ],
    )
    def test_a_range_is_206_with_its_content_range(
        self,
        api: FlaskClient,
        engine: Engine,
        attempt_id: int,
        header: str,
        first: int,
        last: int,
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}", headers={"Range": header})
        assert response.status_code == 206
        assert response.data == CONTENT[first : last + 1]
        assert response.headers["Content-Range"] == f"bytes {first}-{last}/{len(CONTENT)}"

    @pytest.mark.parametrize("header", ["bytes=100-", "bytes=5-2", "lines=1-2", "bytes=0-1,4-5"])
    def test_a_bad_range_is_416(
        self, api: FlaskClient, engine: Engine, attempt_id: int, header: str
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}", headers={"Range": header})
        assert response.status_code == 416
        assert response.headers["Content-Range"] == f"bytes */{len(CONTENT)}"
        assert response.mimetype == "application/problem+json"

    def test_a_listed_empty_log_reads_as_empty_even_when_no_chunk_was_stored(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        # Given a task that wrote nothing, listed with 0 bytes and no chunk stored
        file_id = add_log(engine, 1, "1/quiet.1.1.log", b"", stored=False)
        # When its content is read
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        # Then it is empty, not missing
        assert response.status_code == 200
        assert response.data == b""
        assert response.headers["X-Log-Size"] == "0"

    def test_a_chunk_that_never_came_is_a_gap_of_nul_bytes_counted_as_missing(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        # Given a run whose result says 12 bytes, of which only the first 4 and the last
        # 4 were stored
        file_id = add_log(engine, 1, "1/first.1.1.log", b"abcd", ended=False)
        append_log(engine, 1, 8, b"ijkl")
        # Then reading it keeps every byte where it was, the gap as NUL bytes
        assert api.get(f"/api/logs/{attempt_id}/files/{file_id}").data == b"abcd\0\0\0\0ijkl"
        # And the listing says how many bytes are missing
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert (listed["size_bytes"], listed["missing_bytes"]) == (12, 4)

    def test_a_chunk_stored_twice_or_sent_again_longer_reads_once(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        # Given a chunk stored twice, then sent again longer from the same offset
        file_id = add_log(engine, 1, "1/first.1.1.log", b"line", ended=False)
        append_log(engine, 1, 0, b"line")
        append_log(engine, 1, 0, b"line one\n")
        # And a shorter one coming late
        append_log(engine, 1, 0, b"li")
        # Then the log holds the longest, once
        assert api.get(f"/api/logs/{attempt_id}/files/{file_id}").data == b"line one\n"

    def test_a_log_whose_text_retention_removed_is_404_saying_so(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        with engine.begin() as conn:
            conn.execute(task_logs.update().values(pruned_at=NOW + timedelta(days=91)))
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        body = assert_problem(response, 404)
        assert "retention" in body["detail"]
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert listed["pruned_at"] is not None

    def test_a_long_log_is_read_page_after_page_to_its_last_byte(
        self,
        api: FlaskClient,
        engine: Engine,
        attempt_id: int,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Given pages of at most 10 bytes, sent 3 bytes at a time
        monkeypatch.setattr(logs_routes, "MAX_READ_BYTES", 10)
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        url = f"/api/logs/{attempt_id}/files/{file_id}"
        # When it is read from offset 0 until X-Log-Size
        pages: list[bytes] = []
        while sum(map(len, pages)) < len(CONTENT):
            response = api.get(f"{url}?offset={sum(map(len, pages))}")
            assert response.status_code == 200
            assert response.headers["X-Log-Size"] == str(len(CONTENT))
            assert response.headers["Content-Length"] == str(len(response.data))
            assert response.data, "an empty page before the end would never reach it"
            pages.append(response.data)
        # Then the pages are the file, none longer than a page
        assert b"".join(pages) == CONTENT
        assert max(map(len, pages)) == 10

    def test_offset_and_length_give_a_part(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        url = f"/api/logs/{attempt_id}/files/{file_id}"
        assert api.get(f"{url}?offset=9&length=8").data == b"line two"
        assert api.get(f"{url}?offset={len(CONTENT)}").data == b""
        assert api.get(f"{url}?offset={len(CONTENT) + 1}").status_code == 416
        assert api.get(f"{url}?offset=-1").status_code == 422

    @pytest.mark.parametrize(
        "query", ["offset=99999999999999999999", "length=-5", "offset=abc", "length=1e9"]
    )
    def test_offsets_out_of_bounds_or_not_numbers_are_4xx(
        self, api: FlaskClient, engine: Engine, attempt_id: int, query: str
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}?{query}")
        assert 400 <= response.status_code < 500

    @pytest.mark.parametrize(
        "path",
        [
            "/api/logs/1/files/99999999999999999999999",
            "/api/logs/1/files/-1",
            "/api/logs/1/files/abc",
            "/api/logs/99999999999999999999999/files",
            "/api/logs/99999999999999999999999/follow",
            "/api/logs/1/files/0",
        ],
    )
    def test_log_ids_out_of_range_or_not_numbers_are_404(
        self, api: FlaskClient, attempt_id: int, path: str
    ) -> None:
        assert api.get(path).status_code == 404

    def test_a_log_of_another_attempt_is_404(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        file_id = add_log(engine, 1, "1/first.1.1.log", CONTENT)
        assert api.get(f"/api/logs/2/files/{file_id}").status_code == 404


def read_events(response: Any, *, until: str, timeout_seconds: float) -> list[tuple[str, Any]]:
    """``(event, data)`` of a server-sent event stream up to the first ``until`` event."""
    events: list[tuple[str, Any]] = []
    buffer = ""
    deadline = time.monotonic() + timeout_seconds
    for chunk in response.response:
        buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            fields = dict(
                line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")
            )
            if "event" in fields:
                events.append((fields["event"], json.loads(fields["data"])))
                if fields["event"] == until:
                    return events
        assert time.monotonic() < deadline, "the stream did not end in time"
    return events


class TestFollow:
    def test_follow_streams_new_text_and_ends_when_the_attempt_ends(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        # Given a task writing its log while the attempt runs
        add_log(engine, 1, "1/first.1.1.log", b"hello\n", ended=False)
        response = api.get(f"/api/logs/{attempt_id}/follow?max_seconds=20", buffered=False)
        assert response.mimetype == "text/event-stream"
        first = read_events(response, until="log", timeout_seconds=10)
        assert first == [
            (
                "log",
                {"file": "1/first.1.1.log", "task": "+steps+first", "offset": 0, "text": "hello\n"},
            )
        ]
        # When more is written and the attempt ends
        append_log(engine, 1, 6, b"world\n")
        with engine.begin() as conn:
            set_state(conn, attempt_id, AttemptState.SUCCESS)
        rest = read_events(response, until="end", timeout_seconds=10)
        # Then the new text arrives and the stream ends with the attempt's state
        assert rest[0] == (
            "log",
            {"file": "1/first.1.1.log", "task": "+steps+first", "offset": 6, "text": "world\n"},
        )
        assert rest[-1] == ("end", {"state": "success", "offset": 12})

    def test_runs_writing_at_once_are_each_followed_whole_and_once(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        # Given two runs going at once, each having written a line
        add_log(engine, 1, "1/first.1.1.log", b"a1\n", ended=False)
        add_log(engine, 2, "1/second.2.1.log", b"b1\n", ended=False)
        response = api.get(f"/api/logs/{attempt_id}/follow?max_seconds=20", buffered=False)
        events = read_events(response, until="log", timeout_seconds=10)
        events += read_events(response, until="log", timeout_seconds=10)
        # When both write more, the first more than the second had, and the attempt ends
        append_log(engine, 1, 3, b"a2 longer\n")
        append_log(engine, 2, 3, b"b2\n")
        with engine.begin() as conn:
            set_state(conn, attempt_id, AttemptState.SUCCESS)
        events += read_events(response, until="end", timeout_seconds=10)
        # Then each task's text arrives once and in order, named by its task
        texts: dict[str, str] = {}
        for name, data in events[:-1]:
            assert name == "log"
            texts[data["task"]] = texts.get(data["task"], "") + data["text"]
        assert texts == {"+steps+first": "a1\na2 longer\n", "+steps+second": "b1\nb2\n"}
        assert events[-1] == ("end", {"state": "success", "offset": 19})

    def test_follow_resumes_from_an_offset(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        add_log(engine, 1, "1/first.1.1.log", b"abc")
        add_log(engine, 2, "1/second.2.1.log", b"defg")
        with engine.begin() as conn:
            set_state(conn, attempt_id, AttemptState.ERROR)
        response = api.get(f"/api/logs/{attempt_id}/follow?offset=2")
        events = read_events(response, until="end", timeout_seconds=10)
        assert [(e, d.get("text")) for e, d in events] == [
            ("log", "c"),
            ("log", "defg"),
            ("end", None),
        ]

    def test_follow_stops_after_its_longest_duration(
        self, api: FlaskClient, attempt_id: int
    ) -> None:
        response = api.get(f"/api/logs/{attempt_id}/follow?max_seconds=0.2", buffered=False)
        events = read_events(response, until="timeout", timeout_seconds=10)
        assert events == [("timeout", {"offset": 0})]

    def test_following_an_unknown_attempt_is_404(self, api: FlaskClient) -> None:
        assert api.get("/api/logs/31/follow").status_code == 404

    @pytest.mark.parametrize(
        "last_event_id",
        ["abc", "-1", "\u00b2", "9" * 5000],
        ids=["letters", "negative", "superscript-two", "five-thousand-digits"],
    )
    def test_a_last_event_id_that_is_not_an_offset_is_422(
        self, api: FlaskClient, attempt_id: int, last_event_id: str
    ) -> None:
        # "²" counts as a digit for str.isdigit, and 5,000 digits are past what int() reads
        response = api.get(
            f"/api/logs/{attempt_id}/follow", headers={"Last-Event-ID": last_event_id}
        )
        body = assert_problem(response, 422)
        assert body["errors"] == [
            {"parameter": "Last-Event-ID", "detail": "expected a stream offset"}
        ]

    def test_last_event_id_resumes_like_an_offset(
        self, api: FlaskClient, engine: Engine, attempt_id: int
    ) -> None:
        add_log(engine, 1, "1/first.1.1.log", b"abc")
        with engine.begin() as conn:
            set_state(conn, attempt_id, AttemptState.SUCCESS)
        response = api.get(f"/api/logs/{attempt_id}/follow", headers={"Last-Event-ID": "1"})
        events = read_events(response, until="end", timeout_seconds=10)
        assert [(e, d.get("text")) for e, d in events] == [("log", "bc"), ("end", None)]
