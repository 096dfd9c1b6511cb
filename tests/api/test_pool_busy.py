"""Many requests at once on one worker may wait for a pooled database connection; one
that waits past the pool's timeout is answered 503 with ``Retry-After``, never 500."""

from __future__ import annotations

from flask.testing import FlaskClient
from sqlalchemy import create_engine

from tests.api.conftest import ADMIN_TOKEN, assert_problem
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig


def test_a_request_that_finds_no_free_database_connection_is_503(
    api_config: ApiConfig, postgres_url: str
) -> None:
    # Given a pool of one connection, held by someone else
    url = postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    app = create_app(api_config, engine)
    client: FlaskClient = app.test_client()
    try:
        with engine.connect():
            # When a request needs one
            response = client.get(
                "/api/sessions", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            )
        # Then it is told to retry, not that the server broke
        problem = assert_problem(response, 503)
        assert "busy" in problem["detail"]
        assert response.headers["Retry-After"] == "1"
    finally:
        engine.dispose()
