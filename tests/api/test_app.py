"""The API's infrastructure: probes, metrics, the OpenAPI document, authentication, rate
limits, request checks and the problem documents every error becomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api.conftest import ADMIN_TOKEN, PROBLEM, READ_TOKEN, assert_problem
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig, ApiToken
from tickwork.services.api.paging import decode_cursor, encode_cursor
from tickwork.services.api.ratelimit import RateLimiter
from tickwork.shared.errors import InvalidConfig
from tickwork.shared.store.engine import create_store_engine


class TestProbes:
    def test_healthz_answers_without_a_token(self, anonymous_api: FlaskClient) -> None:
        response = anonymous_api.get("/healthz")
        assert response.status_code == 200
        assert response.get_json() == {"status": "ok"}

    def test_readyz_answers_200_on_a_migrated_database(self, anonymous_api: FlaskClient) -> None:
        assert anonymous_api.get("/readyz").status_code == 200

    def test_readyz_answers_503_when_the_database_is_not_migrated(self, sqlite_url: str) -> None:
        # Given a database that was never migrated
        engine = create_store_engine(sqlite_url)
        app = create_app(ApiConfig(database_url=sqlite_url, auth_enabled=False), engine)
        # When the readiness probe asks
        response = app.test_client().get("/readyz")
        # Then it is not ready, and says what to run
        body = assert_problem(response, 503)
        assert "tickwork db upgrade" in str(body["detail"])
        engine.dispose()

    def test_a_database_that_cannot_be_reached_answers_503_not_500(self) -> None:
        url = "postgresql://postgres@127.0.0.1:1/none"
        app = create_app(ApiConfig(database_url=url, auth_enabled=False))
        assert_problem(app.test_client().get("/readyz"), 503)
        assert_problem(app.test_client().get("/api/projects"), 503)

    def test_metrics_count_requests_by_endpoint_and_status(self, api: FlaskClient) -> None:
        api.get("/api/projects")
        api.get("/api/projects/nope")
        text = api.get("/metrics").get_data(as_text=True)
        assert (
            'tickwork_api_requests_total{endpoint="/api/projects",method="GET",status="200"}'
            in text
        )
        assert 'endpoint="/api/projects/<name>",method="GET",status="404"' in text
        assert "tickwork_api_request_duration_seconds_bucket" in text

    def test_version_names_the_server_and_api_versions(self, read_api: FlaskClient) -> None:
        body = read_api.get("/api/version").get_json()
        assert body["api_version"] == "1"
        assert body["version"]


class TestOpenApi:
    def test_the_document_is_openapi_3_1_with_the_bearer_scheme(
        self, anonymous_api: FlaskClient
    ) -> None:
        response = anonymous_api.get("/api/openapi.json")
        assert response.status_code == 200
        document = json.loads(response.get_data(as_text=True))
        assert document["openapi"].startswith("3.1")
        assert document["components"]["securitySchemes"]["BearerAuth"]["scheme"] == "bearer"
        assert document["security"] == [{"BearerAuth": []}]
        assert document["paths"]["/healthz"]["get"]["security"] == []
        for path in ("/api/projects/{name}", "/api/schedules/{schedule_id}/backfill"):
            assert path in document["paths"]

    def test_error_answers_are_documented_as_problem_documents(
        self, anonymous_api: FlaskClient
    ) -> None:
        document = anonymous_api.get("/api/openapi.json").get_json()
        responses = document["paths"]["/api/schedules/{schedule_id}"]["get"]["responses"]
        assert list(responses["404"]["content"]) == [PROBLEM]

    def test_the_archive_upload_is_documented_as_a_binary_body(
        self, anonymous_api: FlaskClient
    ) -> None:
        document = anonymous_api.get("/api/openapi.json").get_json()
        body = document["paths"]["/api/projects/{name}"]["put"]["requestBody"]
        assert "application/gzip" in body["content"]

    def test_the_interactive_docs_are_served(self, anonymous_api: FlaskClient) -> None:
        assert anonymous_api.get("/api/docs").status_code == 200


class TestAuthentication:
    def test_no_token_is_refused_with_401_and_a_bearer_challenge(
        self, anonymous_api: FlaskClient
    ) -> None:
        response = anonymous_api.get("/api/projects")
        assert_problem(response, 401)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")

    def test_a_wrong_token_is_refused_with_401(self, anonymous_api: FlaskClient) -> None:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}x"}
        assert_problem(anonymous_api.get("/api/projects", headers=headers), 401)

    def test_another_scheme_is_refused_with_401(self, anonymous_api: FlaskClient) -> None:
        headers = {"Authorization": f"Basic {ADMIN_TOKEN}"}
        assert_problem(anonymous_api.get("/api/projects", headers=headers), 401)

    def test_a_read_token_may_get(self, read_api: FlaskClient) -> None:
        assert read_api.get("/api/projects").status_code == 200

    def test_a_read_token_may_not_write(self, read_api: FlaskClient) -> None:
        body = assert_problem(read_api.delete("/api/projects/demo"), 403)
        assert "admin" in str(body["detail"])

    def test_auth_off_needs_no_token(self, engine: Engine, migrated_database_url: str) -> None:
        app = create_app(ApiConfig(database_url=migrated_database_url, auth_enabled=False), engine)
        assert app.test_client().get("/api/projects").status_code == 200

    def test_the_probes_and_metrics_need_no_token(self, anonymous_api: FlaskClient) -> None:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert anonymous_api.get(path).status_code == 200


class TestRequestChecks:
    def test_an_unknown_route_is_a_404_problem(self, api: FlaskClient) -> None:
        assert_problem(api.get("/api/nothing-here"), 404)

    def test_a_wrong_method_is_a_405_problem_naming_the_allowed_ones(
        self, api: FlaskClient
    ) -> None:
        response = api.patch("/api/projects")
        assert_problem(response, 405)
        assert "GET" in response.headers["Allow"]

    def test_an_id_too_large_for_the_store_is_not_found(self, api: FlaskClient) -> None:
        assert_problem(api.get("/api/schedules/99999999999999999999999"), 404)
        assert_problem(api.get("/api/schedules/999999999999999999"), 404)

    def test_a_json_body_over_the_limit_is_a_413(
        self, engine: Engine, migrated_database_url: str
    ) -> None:
        config = ApiConfig(
            database_url=migrated_database_url, auth_enabled=False, max_json_bytes=1024
        )
        client = create_app(config, engine).test_client()
        response = client.post("/api/schedules/1/resume", json={"replay": "x" * 2000})
        assert_problem(response, 413)

    def test_a_body_that_is_not_json_is_a_415(self, api: FlaskClient) -> None:
        response = api.post("/api/schedules/1/resume", data="replay", content_type="text/plain")
        assert_problem(response, 415)

    def test_malformed_json_is_a_400(self, api: FlaskClient) -> None:
        response = api.post(
            "/api/schedules/1/resume", data="{replay", content_type="application/json"
        )
        assert_problem(response, 400)

    def test_deeply_nested_json_is_refused(self, api: FlaskClient) -> None:
        for depth in (40, 100_000):
            response = api.post(
                "/api/schedules/1/resume",
                data="[" * depth + "]" * depth,
                content_type="application/json",
            )
            assert_problem(response, 422)

    def test_a_nul_character_is_refused_with_its_pointer(self, api: FlaskClient) -> None:
        response = api.post("/api/schedules/1/skip", json={"to": "2026-01-01\u0000"})
        body = assert_problem(response, 422)
        assert body["errors"] == [{"pointer": "/to", "detail": "must not contain NUL characters"}]

    def test_a_lone_surrogate_is_refused_with_its_pointer(self, api: FlaskClient) -> None:
        response = api.post(
            "/api/schedules/1/skip", data='{"to": "\\ud800"}', content_type="application/json"
        )
        body = assert_problem(response, 422)
        assert body["errors"][0]["pointer"] == "/to"

    def test_a_nul_in_a_query_parameter_is_refused_naming_it(self, api: FlaskClient) -> None:
        body = assert_problem(api.get("/api/projects?name=a%00b"), 422)
        assert body["errors"] == [
            {"parameter": "name", "detail": "must not contain NUL characters"}
        ]

    def test_an_unknown_query_parameter_is_refused_naming_it(self, api: FlaskClient) -> None:
        body = assert_problem(api.get("/api/projects?colour=red"), 422)
        assert body["errors"][0]["parameter"] == "colour"

    def test_a_limit_over_the_maximum_is_refused(self, api: FlaskClient) -> None:
        body = assert_problem(api.get("/api/projects?limit=1001"), 422)
        assert body["errors"][0]["parameter"] == "limit"

    def test_a_limit_that_is_not_a_number_is_refused(self, api: FlaskClient) -> None:
        body = assert_problem(api.get("/api/projects?limit=many"), 422)
        assert body["errors"][0]["parameter"] == "limit"

    def test_a_tampered_cursor_is_refused_naming_the_cursor(self, api: FlaskClient) -> None:
        for cursor in ("zzz", encode_cursor(5)[:-1] + "!", "a2sxOi0x", "%%%"):
            body = assert_problem(api.get("/api/projects", query_string={"cursor": cursor}), 422)
            assert body["errors"][0]["parameter"] == "cursor"


class TestRateLimit:
    def test_a_client_over_its_rate_gets_429_with_retry_after(
        self, engine: Engine, migrated_database_url: str
    ) -> None:
        config = ApiConfig(
            database_url=migrated_database_url,
            tokens=(ApiToken("read", READ_TOKEN),),
            rate_limit_per_second=1,
        )
        client = create_app(config, engine).test_client()
        headers = {"Authorization": f"Bearer {READ_TOKEN}"}
        # More than the burst (twice the rate) in a row: a slow machine may let a token
        # come back between two of them, not between all of them.
        answers = [client.get("/api/projects", headers=headers) for _ in range(10)]
        assert [a.status_code for a in answers[:2]] == [200, 200]
        refused = [a for a in answers if a.status_code == 429]
        assert refused, [a.status_code for a in answers]
        assert_problem(refused[0], 429)
        assert int(refused[0].headers["Retry-After"]) >= 1
        # The probes are never limited
        assert client.get("/healthz").status_code == 200

    def test_guessing_tokens_is_rate_limited_too(
        self, engine: Engine, migrated_database_url: str
    ) -> None:
        config = ApiConfig(
            database_url=migrated_database_url,
            tokens=(ApiToken("read", READ_TOKEN),),
            rate_limit_per_second=1,
        )
        client = create_app(config, engine).test_client()
        guesses = [
            client.get("/api/projects", headers={"Authorization": f"Bearer guess-{n}"})
            for n in range(3)
        ]
        assert [g.status_code for g in guesses] == [401, 401, 429]

    def test_the_bucket_refills_at_the_rate(self) -> None:
        now = [0.0]
        limiter = RateLimiter(2, 2, clock=lambda: now[0])
        assert limiter.acquire("a") is None
        assert limiter.acquire("a") is None
        wait = limiter.acquire("a")
        assert wait == pytest.approx(0.5)
        assert limiter.acquire("b") is None  # another client has its own bucket
        now[0] += 0.5
        assert limiter.acquire("a") is None

    def test_a_rate_of_zero_turns_the_limit_off(self) -> None:
        limiter = RateLimiter(0, 0)
        assert all(limiter.acquire("a") is None for _ in range(1000))


class TestConfig:
    def test_defaults(self) -> None:
        config = ApiConfig.from_environment({"TICKWORK_DATABASE_URL": "sqlite:///x.db"})
        assert config.auth_enabled
        assert config.tokens == ()
        assert config.max_archive_bytes == 64 * 1024 * 1024
        assert config.max_json_bytes == 1024 * 1024
        assert (config.rate_limit_per_second, config.rate_limit_burst) == (50, 100)
        assert config.page_limit == 1000

    def test_tokens_come_from_the_variable_and_the_file(self, tmp_path: Path) -> None:
        tokens_file = tmp_path / "tokens"
        tokens_file.write_text("# readers\nread:reader-token-1\n\n")
        config = ApiConfig.from_environment(
            {
                "TICKWORK_API_TOKENS": "admin:admin-token-1, read:reader-token-2",
                "TICKWORK_API_TOKENS_FILE": str(tokens_file),
            }
        )
        assert [(t.role, t.token) for t in config.tokens] == [
            ("admin", "admin-token-1"),
            ("read", "reader-token-2"),
            ("read", "reader-token-1"),
        ]

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("TICKWORK_API_AUTH", "maybe"),
            ("TICKWORK_API_MAX_ARCHIVE_MB", "0"),
            ("TICKWORK_API_MAX_JSON_KB", "lots"),
            ("TICKWORK_API_RATE_LIMIT", "-1"),
            ("TICKWORK_API_PAGE_LIMIT", "0"),
            ("TICKWORK_API_MAX_FOLLOWS", "none"),
            ("TICKWORK_API_TOKENS", "root:secret-token"),
            ("TICKWORK_API_TOKENS", "admin:short"),
            ("TICKWORK_API_TOKENS_FILE", "/nonexistent/tokens"),
        ],
    )
    def test_a_bad_value_is_refused_naming_the_variable(self, name: str, value: str) -> None:
        with pytest.raises(InvalidConfig, match=name):
            ApiConfig.from_environment({name: value})

    def test_a_bad_token_is_never_echoed(self) -> None:
        with pytest.raises(InvalidConfig) as raised:
            ApiConfig.from_environment({"TICKWORK_API_TOKENS": "root:very-secret-value"})
        assert "very-secret-value" not in str(raised.value)


def test_cursors_round_trip() -> None:
    assert decode_cursor(encode_cursor(42)) == 42
