"""Specifications of /api/logs: an attempt's log files, their content by range, and
following the logs as server-sent events until the attempt ends."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from services.api.config import ApiConfig
from services.api.routes import logs as logs_routes
from shared.domain.states import AttemptState
from shared.store.tables import task_logs, tasks
from tests.api._seed import NOW, THREE_STEPS, add_project, add_sessions, set_state
from tests.api.conftest import assert_problem

CONTENT = b"line one\nline two\nline three\n"


@pytest.fixture
def log_root(api_config: ApiConfig) -> Path:
    assert api_config.log_dir is not None
    api_config.log_dir.mkdir(parents=True, exist_ok=True)
    return api_config.log_dir


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
    root: Path,
    task_id: int,
    relative: str,
    content: bytes,
    *,
    on_disk: bool = True,
    truncated_bytes: int = 0,
    ended: bool = True,
) -> int:
    """Index a log file at ``relative`` and, when that path stays under ``root``, write it
    (unless not ``on_disk``); its id. A path that escapes ``root`` (``..``, or an absolute
    path, which ``root / relative`` would take as it is) is indexed only, never written.
    A run not ``ended`` is indexed as the executor dispatched it: 0 bytes, no end yet."""
    path = (root / relative).resolve()
    if on_disk and path.is_relative_to(root.resolve()):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    with engine.begin() as conn:
        return int(
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


class TestFiles:
    def test_the_files_of_an_attempt_optionally_by_task_prefix(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
        add_log(engine, log_root, 2, "1/second.2.1.log", b"x")
        every = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert [(f["task"], f["size_bytes"]) for f in every] == [
            ("+steps+first", len(CONTENT)),
            ("+steps+second", 1),
        ]
        some = api.get(f"/api/logs/{attempt_id}/files?task=%2Bsteps%2Bsec").json["items"]
        assert [f["task"] for f in some] == ["+steps+second"]

    def test_a_run_still_going_is_listed_at_its_size_now_and_read_as_far_as_written(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        # Given a run indexed when it was dispatched, which has written one line so far
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", b"line one\n", ended=False)
        # Then it is listed with the size of its file now, not yet ended
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert (listed["size_bytes"], listed["ended_at"]) == (len(b"line one\n"), None)
        # And reading it gives what it wrote so far
        assert api.get(f"/api/logs/{attempt_id}/files/{file_id}").data == b"line one\n"
        # When it writes more
        with (log_root / "1" / "first.1.1.log").open("ab") as file:
            file.write(b"line two\n")
        # Then both the listing and the content show it
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert listed["size_bytes"] == len(b"line one\nline two\n")
        assert api.get(f"/api/logs/{attempt_id}/files/{file_id}").data == b"line one\nline two\n"

    def test_a_run_that_has_written_nothing_yet_is_listed_empty_and_reads_as_empty(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", b"", on_disk=False, ended=False)
        (listed,) = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert listed["size_bytes"] == 0
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        assert (response.status_code, response.data) == (200, b"")

    def test_the_files_of_an_unknown_attempt_are_404(self, api: FlaskClient) -> None:
        assert api.get("/api/logs/999/files").status_code == 404

    def test_a_cut_log_is_listed_with_how_many_bytes_were_cut(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT, truncated_bytes=123_456_789)
        add_log(engine, log_root, 2, "1/second.2.1.log", CONTENT)
        items = api.get(f"/api/logs/{attempt_id}/files").json["items"]
        assert [(f["task"], f["truncated_bytes"]) for f in items] == [
            ("+steps+first", 123_456_789),
            ("+steps+second", 0),
        ]


class TestContent:
    def test_a_whole_file(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
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
        log_root: Path,
        attempt_id: int,
        header: str,
        first: int,
        last: int,
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}", headers={"Range": header})
        assert response.status_code == 206
        assert response.data == CONTENT[first : last + 1]
        assert response.headers["Content-Range"] == f"bytes {first}-{last}/{len(CONTENT)}"

    @pytest.mark.parametrize("header", ["bytes=100-", "bytes=5-2", "lines=1-2", "bytes=0-1,4-5"])
    def test_a_bad_range_is_416(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int, header: str
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}", headers={"Range": header})
        assert response.status_code == 416
        assert response.headers["Content-Range"] == f"bytes */{len(CONTENT)}"
        assert response.mimetype == "application/problem+json"

    def test_a_listed_empty_log_reads_as_empty_even_when_no_file_was_stored(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        # Given a task that wrote nothing, listed with 0 bytes but with no file on disk
        file_id = add_log(engine, log_root, 1, "1/quiet.1.1.log", b"", on_disk=False)
        # When its content is read
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        # Then it is empty, not missing
        assert response.status_code == 200
        assert response.data == b""
        assert response.headers["X-Log-Size"] == "0"

    def test_a_listed_log_with_content_that_is_gone_from_disk_is_404(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT, on_disk=False)
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        assert_problem(response, 404)
        assert "no longer on disk" in response.json["detail"]

    def test_a_long_log_is_read_page_after_page_to_its_last_byte(
        self,
        api: FlaskClient,
        engine: Engine,
        log_root: Path,
        attempt_id: int,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Given pages of at most 10 bytes, sent 3 bytes at a time
        monkeypatch.setattr(logs_routes, "MAX_READ_BYTES", 10)
        monkeypatch.setattr(logs_routes, "SEND_CHUNK_BYTES", 3)
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
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
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
        url = f"/api/logs/{attempt_id}/files/{file_id}"
        assert api.get(f"{url}?offset=9&length=8").data == b"line two"
        assert api.get(f"{url}?offset={len(CONTENT)}").data == b""
        assert api.get(f"{url}?offset={len(CONTENT) + 1}").status_code == 416
        assert api.get(f"{url}?offset=-1").status_code == 422

    @pytest.mark.parametrize("relative", ["../outside.log", "/etc/passwd", "1/../../x.log"])
    def test_a_path_that_escapes_the_log_directory_is_never_read(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int, relative: str
    ) -> None:
        (log_root.parent / "outside.log").write_text("secret")
        file_id = add_log(engine, log_root, 1, relative, b"")
        response = api.get(f"/api/logs/{attempt_id}/files/{file_id}")
        assert response.status_code == 404
        assert b"secret" not in response.data
        assert b"root:" not in response.data

    def test_a_file_of_another_attempt_is_404(
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        file_id = add_log(engine, log_root, 1, "1/first.1.1.log", CONTENT)
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
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        # Given a task writing its log while the attempt runs
        live = log_root / "1" / "first.1.1.log"
        live.parent.mkdir(parents=True)
        live.write_bytes(b"hello\n")
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
        with live.open("ab") as file:
            file.write(b"world\n")
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
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        # Given two runs going at once, each having written a line
        add_log(engine, log_root, 1, "1/first.1.1.log", b"a1\n", ended=False)
        add_log(engine, log_root, 2, "1/second.2.1.log", b"b1\n", ended=False)
        response = api.get(f"/api/logs/{attempt_id}/follow?max_seconds=20", buffered=False)
        events = read_events(response, until="log", timeout_seconds=10)
        events += read_events(response, until="log", timeout_seconds=10)
        # When both write more, the first more than the second had, and the attempt ends
        for name, text in (("first.1.1.log", b"a2 longer\n"), ("second.2.1.log", b"b2\n")):
            with (log_root / "1" / name).open("ab") as file:
                file.write(text)
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
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        add_log(engine, log_root, 1, "1/first.1.1.log", b"abc")
        add_log(engine, log_root, 2, "1/second.2.1.log", b"defg")
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
        self, api: FlaskClient, log_root: Path, attempt_id: int
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
        self, api: FlaskClient, engine: Engine, log_root: Path, attempt_id: int
    ) -> None:
        add_log(engine, log_root, 1, "1/first.1.1.log", b"abc")
        with engine.begin() as conn:
            set_state(conn, attempt_id, AttemptState.SUCCESS)
        response = api.get(f"/api/logs/{attempt_id}/follow", headers={"Last-Event-ID": "1"})
        events = read_events(response, until="end", timeout_seconds=10)
        assert [(e, d.get("text")) for e, d in events] == [("log", "bc"), ("end", None)]
