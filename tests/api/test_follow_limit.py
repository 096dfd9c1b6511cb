"""Log follow streams are bounded per worker: past ``TICKWORK_API_MAX_FOLLOWS`` a new one
is refused with 503 and ``Retry-After``, a closed stream frees its place, and a stream
holds a bounded part of a log in memory whatever the log's size."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tracemalloc
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine
from werkzeug.test import TestResponse

from tests.api._seed import THREE_STEPS, add_project, add_sessions, set_state, store_run_log
from tests.api.conftest import assert_problem
from tickwork.services.api.config import ApiConfig
from tickwork.shared.domain.states import AttemptState


@pytest.fixture
def api_config(api_config: ApiConfig) -> ApiConfig:
    return dataclasses.replace(api_config, max_follow_streams=2)


@pytest.fixture
def running_attempt(engine: Engine) -> int:
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    return add_sessions(engine, project_id, "steps", 1, state=AttemptState.RUNNING)[0]


def open_stream(api: FlaskClient, attempt_id: int) -> TestResponse:
    response = api.get(f"/api/logs/{attempt_id}/follow?max_seconds=30", buffered=False)
    assert response.status_code == 200
    next(response.response)  # the stream has started
    return response


def test_a_follow_stream_past_the_limit_is_refused_until_one_closes(
    api: FlaskClient, running_attempt: int
) -> None:
    # Given as many open streams as one worker serves
    streams = [open_stream(api, running_attempt) for _ in range(2)]
    # When one more is asked for
    refused = api.get(f"/api/logs/{running_attempt}/follow?max_seconds=30")
    # Then it is refused, to be retried
    problem = assert_problem(refused, 503)
    assert refused.headers["Retry-After"] == "5"
    assert "2 logs" in problem["detail"]
    # and once a stream is closed, its place is free again
    streams.pop().close()
    streams.append(open_stream(api, running_attempt))
    for stream in streams:
        stream.close()


# Lines of mixed widths (1 to 4 UTF-8 bytes), so that characters straddle the parts sent.
LINE = "step {:07d}: caf\u00e9 \u20ac \U0001f600 ok\n"
LARGE_LOG_LINES = 700_000  # about 24 MB
MEMORY_BOUND_BYTES = 16 * 1024 * 1024  # a whole-log read takes over 300 MiB


def log_events(response: TestResponse) -> Iterator[tuple[str, int | None, dict[str, object]]]:
    """``(event, id, data)`` of each event of a stream, decoded one at a time."""
    buffer = ""
    for chunk in response.response:
        buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in fields:
                event_id = int(fields["id"]) if "id" in fields else None
                yield fields["event"], event_id, json.loads(fields["data"])


def received_digest(response: TestResponse, offset: int) -> tuple[str, list[int]]:
    """The SHA-256 of the text a stream sent from ``offset``, and its event ids, checking
    that each event starts where the one before ended and its id is where it ends."""
    digest = hashlib.sha256()
    ids: list[int] = []
    for event, event_id, data in log_events(response):
        if event == "end":
            assert data["offset"] == offset
            break
        encoded = str(data["text"]).encode()
        assert data["offset"] == offset
        offset += len(encoded)
        assert event_id == offset
        digest.update(encoded)
        ids.append(offset)
    return digest.hexdigest(), ids


@pytest.mark.slow  # seconds of work: left out of make test-fast
def test_following_a_large_log_holds_a_bounded_part_of_it_and_sends_every_byte_in_order(
    api: FlaskClient, engine: Engine, api_config: ApiConfig, running_attempt: int
) -> None:
    # Given an ended attempt whose log is about 24 MB, stored as agents stream it
    content = "".join(LINE.format(n) for n in range(LARGE_LOG_LINES)).encode()
    store_run_log(engine, running_attempt, "+steps+big", content)
    with engine.begin() as conn:
        set_state(conn, running_attempt, AttemptState.SUCCESS)
    # When it is followed to its end
    tracemalloc.start()
    try:
        response = api.get(f"/api/logs/{running_attempt}/follow", buffered=False)
        digest, ids = received_digest(response, 0)
        response.close()
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Then the stream held at most a few MB of it at once, and sent every byte in order
    assert peak_bytes < MEMORY_BOUND_BYTES, f"peak {peak_bytes / 2**20:.1f} MiB"
    assert digest == hashlib.sha256(content).hexdigest()
    # And resuming from an event's id (Last-Event-ID) sends exactly the rest
    resume_at = ids[len(ids) // 2]
    headers = {"Last-Event-ID": str(resume_at)}
    resumed = api.get(f"/api/logs/{running_attempt}/follow", headers=headers, buffered=False)
    assert received_digest(resumed, resume_at)[0] == hashlib.sha256(content[resume_at:]).hexdigest()
    resumed.close()
