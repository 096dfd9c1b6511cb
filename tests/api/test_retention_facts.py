"""What the API and the web UI say of how long history is kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.shared.store.retention import RetentionPolicy

DAY = timedelta(days=1)


def client_for(engine: Engine, url: str, policy: RetentionPolicy) -> FlaskClient:
    app = create_app(ApiConfig(database_url=url, auth_enabled=False), engine, policy)
    app.testing = True
    return app.test_client()


def test_the_version_says_how_long_history_is_kept(
    engine: Engine, migrated_database_url: str
) -> None:
    client = client_for(engine, migrated_database_url, RetentionPolicy(90 * DAY, 7 * DAY, 10))
    body = client.get("/api/version").get_json()
    assert body["retention"] == {"history_days": 90, "log_days": 7, "keep_revisions": 10}


def test_the_version_says_null_when_everything_is_kept(
    engine: Engine, migrated_database_url: str
) -> None:
    client = client_for(engine, migrated_database_url, RetentionPolicy(None, None, None))
    assert client.get("/api/version").get_json()["retention"] is None


@pytest.mark.parametrize(
    ("policy", "line"),
    [
        (RetentionPolicy(90 * DAY, 14 * DAY, 10), "History kept 90 days; logs 14 days"),
        (RetentionPolicy(None, None, None), "History kept for ever"),
    ],
)
def test_the_ui_footer_says_how_long_history_is_kept(
    engine: Engine, migrated_database_url: str, policy: RetentionPolicy, line: str
) -> None:
    client = client_for(engine, migrated_database_url, policy)
    page = client.get("/ui/", follow_redirects=True)
    assert page.status_code == 200
    assert line in page.get_data(as_text=True)
