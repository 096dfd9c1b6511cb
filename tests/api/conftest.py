"""Fixtures for the REST API: an app on a fresh migrated database (each backend in turn),
test clients holding an admin, a read or no token, and tar.gz archives built from files."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine
from werkzeug.test import TestResponse

from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig, ApiToken
from tickwork.services.api.routes.logs import NOTICES_KEY

ADMIN_TOKEN = "admin-token-for-tests"
READ_TOKEN = "read-token-for-tests"

HELLO_WORKFLOW = """\
timezone: UTC
+hello:
  echo>: hello ${session_time}
"""

DAILY_WORKFLOW = """\
timezone: Asia/Tokyo
schedule:
  daily>: "07:00:00"
+extract:
  echo>: extracting ${session_time}
+load:
  echo>: loading
"""

PROBLEM = "application/problem+json"


def assert_problem(response: TestResponse, status: int) -> dict[str, Any]:
    """The response is a problem document (RFC 9457) of ``status``; its body."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == PROBLEM
    body: dict[str, Any] = response.get_json(force=True)
    assert body["status"] == status
    assert str(body["type"]).startswith("https://tickwork.dev/problems/")
    assert body["title"]
    assert body["detail"]
    return body


ArchiveMaker = Callable[[Mapping[str, str | bytes]], bytes]


def build_archive(files: Mapping[str, str | bytes]) -> bytes:
    """A tar.gz holding ``files`` (archive path -> content), as ``tickwork push`` sends.

    The same files give the same bytes: the gzip header's time is fixed, not now.
    """
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w") as archive,
    ):
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def make_archive() -> ArchiveMaker:
    """Build a tar.gz from ``{path: content}``."""
    return build_archive


@pytest.fixture
def api_config(migrated_database_url: str) -> ApiConfig:
    """Settings with an admin and a read token, no rate limit."""
    return ApiConfig(
        database_url=migrated_database_url,
        tokens=(ApiToken("admin", ADMIN_TOKEN), ApiToken("read", READ_TOKEN)),
        rate_limit_per_second=0,
    )


@pytest.fixture
def api_app(engine: Engine, api_config: ApiConfig) -> Iterator[APIFlask]:
    """The API application on a fresh, migrated database (each backend in turn)."""
    app = create_app(api_config, engine)
    app.testing = True
    yield app
    notices = app.extensions.get(NOTICES_KEY)
    if notices is not None:  # a follow started its listening connection: stop it
        notices.close()


def _client(app: APIFlask, token: str | None) -> FlaskClient:
    client = app.test_client()
    if token is not None:
        client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


@pytest.fixture
def api(api_app: APIFlask) -> FlaskClient:
    """A test client sending the admin token."""
    return _client(api_app, ADMIN_TOKEN)


@pytest.fixture
def read_api(api_app: APIFlask) -> FlaskClient:
    """A test client sending the read token."""
    return _client(api_app, READ_TOKEN)


@pytest.fixture
def anonymous_api(api_app: APIFlask) -> FlaskClient:
    """A test client sending no token."""
    return _client(api_app, None)


Pusher = Callable[..., Any]


@pytest.fixture
def push(api: FlaskClient) -> Pusher:
    """``push(name, {path: content}, revision=..., schedule_from=...)``: PUT an archive.

    Returns the response; the default files hold one workflow, ``daily.dig``, scheduled
    daily at 07:00 Asia/Tokyo.
    """

    def pusher(
        name: str = "demo",
        files: Mapping[str, str | bytes] | None = None,
        **params: str,
    ) -> Any:
        archive = build_archive(files if files is not None else {"daily.dig": DAILY_WORKFLOW})
        return api.put(
            f"/api/projects/{name}",
            query_string=params,
            data=archive,
            headers={"Content-Type": "application/gzip"},
        )

    return pusher
