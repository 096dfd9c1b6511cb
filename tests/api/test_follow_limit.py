"""Log follow streams are bounded per worker: past ``TICKWORK_API_MAX_FOLLOWS`` a new one
is refused with 503 and ``Retry-After``, and a closed stream frees its place."""

from __future__ import annotations

import dataclasses

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine
from werkzeug.test import TestResponse

from services.api.config import ApiConfig
from shared.domain.states import AttemptState
from tests.api._seed import THREE_STEPS, add_project, add_sessions
from tests.api.conftest import assert_problem


@pytest.fixture
def api_config(api_config: ApiConfig) -> ApiConfig:
    assert api_config.log_dir is not None
    api_config.log_dir.mkdir(parents=True, exist_ok=True)
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
