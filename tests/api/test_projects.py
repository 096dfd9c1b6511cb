"""Projects over REST: pushing archives as revisions, listing, showing, deleting,
revisions, archive downloads and the workflows of a revision."""

from __future__ import annotations

import io
import tarfile

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api.conftest import DAILY_WORKFLOW, HELLO_WORKFLOW, Pusher, assert_problem, build_archive
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig

BAD_CRON = """\
timezone: UTC
schedule:
  cron>: "61 25 * * *"
+a:
  echo>: a
"""

BAD_ZONE = """\
timezone: Mars/Olympus_Mons
+a:
  echo>: a
"""


def project_names(api: FlaskClient) -> list[str]:
    return [item["name"] for item in api.get("/api/projects").get_json()["items"]]


class TestPush:
    def test_a_new_revision_is_created_with_its_schedules(self, push: Pusher) -> None:
        response = push("demo", revision="r1")
        assert response.status_code == 201
        body = response.get_json()
        assert body["project"] == "demo"
        assert body["revision"] == "r1"
        assert body["created"] is True
        assert body["workflows"] == ["daily"]
        assert body["schedules"] == {"added": ["daily"], "updated": [], "removed": []}
        assert len(body["archive_digest"]) == 64

    def test_the_same_revision_and_archive_again_answers_200(self, push: Pusher) -> None:
        assert push("demo", revision="r1").status_code == 201
        again = push("demo", revision="r1")
        assert again.status_code == 200
        assert again.get_json()["created"] is False

    def test_the_same_revision_with_another_archive_is_a_conflict(self, push: Pusher) -> None:
        assert push("demo", revision="r1").status_code == 201
        assert_problem(push("demo", {"hello.dig": HELLO_WORKFLOW}, revision="r1"), 409)

    def test_the_revision_defaults_to_a_uuid(self, push: Pusher) -> None:
        assert len(push("demo").get_json()["revision"]) == 36

    def test_a_later_push_removes_the_schedules_of_workflows_gone(self, push: Pusher) -> None:
        push("demo", revision="r1")
        body = push("demo", {"hello.dig": HELLO_WORKFLOW}, revision="r2").get_json()
        assert body["schedules"]["removed"] == ["daily"]

    def test_schedule_from_starts_new_schedules_then(self, push: Pusher, api: FlaskClient) -> None:
        push("demo", revision="r1", schedule_from="2026-01-01T00:00:00+09:00")
        schedule = api.get("/api/schedules").get_json()["items"][0]
        assert schedule["next_session_time"] == "2026-01-01T00:00:00+09:00"

    def test_an_invalid_workflow_lists_every_error_with_file_and_line(
        self, push: Pusher, api: FlaskClient
    ) -> None:
        # Given an archive with one good and one bad workflow
        files = {"good.dig": HELLO_WORKFLOW, "bad.dig": BAD_CRON}
        # When it is pushed
        body = assert_problem(push("demo", files), 422)
        # Then the error names the file and the line of the cron
        errors = body["errors"]
        assert isinstance(errors, list)
        assert errors[0]["file"] == "bad.dig"
        assert errors[0]["line"] == 3
        # and nothing was stored
        assert project_names(api) == []

    def test_an_unknown_time_zone_in_a_workflow_is_refused_with_its_line(
        self, push: Pusher
    ) -> None:
        body = assert_problem(push("demo", {"a.dig": BAD_ZONE}), 422)
        assert body["errors"][0]["file"] == "a.dig"
        assert body["errors"][0]["line"] == 1

    @pytest.mark.parametrize("member", ["../evil.dig", "/etc/evil.dig", "a/../../evil.dig"])
    def test_an_archive_member_leaving_the_project_is_refused(
        self, push: Pusher, api: FlaskClient, member: str
    ) -> None:
        body = assert_problem(push("demo", {"ok.dig": HELLO_WORKFLOW, member: "x"}), 422)
        assert "refused" in str(body["detail"])
        assert project_names(api) == []

    def test_a_link_leaving_the_project_is_refused(self, api: FlaskClient) -> None:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            link = tarfile.TarInfo("passwd")
            link.type = tarfile.SYMTYPE
            link.linkname = "../../etc/passwd"
            archive.addfile(link)
        response = api.put(
            "/api/projects/demo", data=buffer.getvalue(), content_type="application/gzip"
        )
        assert_problem(response, 422)

    def test_a_body_that_is_not_a_tar_gz_is_refused(self, api: FlaskClient) -> None:
        response = api.put("/api/projects/demo", data=b"hello", content_type="application/gzip")
        assert_problem(response, 422)

    def test_an_empty_archive_is_refused(self, api: FlaskClient) -> None:
        response = api.put(
            "/api/projects/demo", data=build_archive({}), content_type="application/gzip"
        )
        assert_problem(response, 422)

    def test_another_media_type_is_a_415(self, api: FlaskClient) -> None:
        archive = build_archive({"a.dig": HELLO_WORKFLOW})
        response = api.put("/api/projects/demo", data=archive, content_type="application/json")
        assert_problem(response, 415)

    def test_an_archive_over_the_limit_is_a_413(
        self, engine: Engine, migrated_database_url: str
    ) -> None:
        config = ApiConfig(
            database_url=migrated_database_url, auth_enabled=False, max_archive_bytes=512
        )
        client = create_app(config, engine).test_client()
        response = client.put(
            "/api/projects/demo", data=b"\x1f\x8b" + b"0" * 2048, content_type="application/gzip"
        )
        assert_problem(response, 413)

    @pytest.mark.parametrize(
        "name", ["..", ".hidden", "a b", "x" * 200, "'; DROP TABLE projects; --", "a%2Fb"]
    )
    def test_a_bad_project_name_is_refused_naming_the_parameter(
        self, push: Pusher, api: FlaskClient, name: str
    ) -> None:
        response = push(name)
        assert response.status_code in (404, 422)
        if response.status_code == 422:
            assert assert_problem(response, 422)["errors"][0]["parameter"] == "name"
        assert project_names(api) == []

    def test_a_bad_revision_name_is_refused_naming_the_parameter(self, push: Pusher) -> None:
        body = assert_problem(push("demo", revision="r" * 300), 422)
        assert body["errors"][0]["parameter"] == "revision"

    def test_a_bad_schedule_from_is_refused_naming_the_parameter(self, push: Pusher) -> None:
        body = assert_problem(push("demo", schedule_from="next tuesday"), 422)
        assert body["errors"][0]["parameter"] == "schedule_from"

    def test_a_read_token_may_not_push(self, read_api: FlaskClient) -> None:
        archive = build_archive({"a.dig": HELLO_WORKFLOW})
        response = read_api.put("/api/projects/demo", data=archive, content_type="application/gzip")
        assert_problem(response, 403)


class TestReading:
    def test_projects_are_listed_newest_first_with_their_latest_revision(
        self, push: Pusher, api: FlaskClient
    ) -> None:
        push("alpha", revision="a1")
        push("beta", revision="b1")
        push("alpha", {"hello.dig": HELLO_WORKFLOW}, revision="a2")
        items = api.get("/api/projects").get_json()["items"]
        assert [(i["name"], i["revision"]["name"]) for i in items] == [
            ("beta", "b1"),
            ("alpha", "a2"),
        ]

    def test_the_name_filter_finds_one_project(self, push: Pusher, api: FlaskClient) -> None:
        push("alpha")
        push("beta")
        items = api.get("/api/projects?name=alpha").get_json()["items"]
        assert [i["name"] for i in items] == ["alpha"]

    def test_a_sql_injection_string_is_only_a_name(self, push: Pusher, api: FlaskClient) -> None:
        push("alpha")
        response = api.get("/api/projects", query_string={"name": "' OR '1'='1"})
        assert response.get_json()["items"] == []
        assert_problem(api.get("/api/projects/' OR '1'='1"), 404)

    def test_pages_follow_the_cursor_to_the_end(self, push: Pusher, api: FlaskClient) -> None:
        for name in ("p1", "p2", "p3"):
            push(name)
        seen: list[str] = []
        query: dict[str, str] = {"limit": "2"}
        for _ in range(3):
            page = api.get("/api/projects", query_string=query).get_json()
            seen += [item["name"] for item in page["items"]]
            if page["next_cursor"] is None:
                break
            query["cursor"] = page["next_cursor"]
        assert seen == ["p3", "p2", "p1"]

    def test_one_project_shows_its_latest_revision(self, push: Pusher, api: FlaskClient) -> None:
        push("demo", revision="r1")
        body = api.get("/api/projects/demo").get_json()
        assert body["name"] == "demo"
        assert body["revision"]["name"] == "r1"
        assert body["revision"]["size_bytes"] > 0

    def test_an_unknown_project_is_a_404(self, api: FlaskClient) -> None:
        for path in ("", "/revisions", "/archive", "/workflows", "/workflows/daily"):
            assert_problem(api.get(f"/api/projects/nope{path}"), 404)

    def test_revisions_are_listed_newest_first(self, push: Pusher, api: FlaskClient) -> None:
        push("demo", revision="r1")
        push("demo", {"hello.dig": HELLO_WORKFLOW}, revision="r2")
        items = api.get("/api/projects/demo/revisions").get_json()["items"]
        assert [i["name"] for i in items] == ["r2", "r1"]
        assert all(i["size_bytes"] > 0 for i in items)

    def test_the_archive_downloaded_is_the_one_pushed(
        self, push: Pusher, read_api: FlaskClient
    ) -> None:
        first = build_archive({"daily.dig": DAILY_WORKFLOW})
        push("demo", {"daily.dig": DAILY_WORKFLOW}, revision="r1")
        push("demo", {"hello.dig": HELLO_WORKFLOW}, revision="r2")
        response = read_api.get("/api/projects/demo/archive?revision=r1")
        assert response.status_code == 200
        assert response.mimetype == "application/gzip"
        assert response.data == first
        latest = read_api.get("/api/projects/demo/archive")
        assert latest.data == build_archive({"hello.dig": HELLO_WORKFLOW})
        assert_problem(read_api.get("/api/projects/demo/archive?revision=r9"), 404)

    def test_the_workflows_of_the_latest_or_a_given_revision(
        self, push: Pusher, api: FlaskClient
    ) -> None:
        push("demo", revision="r1")
        push("demo", {"hello.dig": HELLO_WORKFLOW, "daily.dig": DAILY_WORKFLOW}, revision="r2")
        latest = api.get("/api/projects/demo/workflows").get_json()["items"]
        assert sorted(w["name"] for w in latest) == ["daily", "hello"]
        old = api.get("/api/projects/demo/workflows?revision=r1").get_json()["items"]
        assert [(w["name"], w["revision"]) for w in old] == [("daily", "r1")]

    def test_one_workflow_shows_its_definition(self, push: Pusher, api: FlaskClient) -> None:
        push("demo", revision="r1")
        body = api.get("/api/projects/demo/workflows/daily").get_json()
        assert body["timezone"] == "Asia/Tokyo"
        assert body["config"]["name"] == "daily"
        assert body["schedule"]["kind"] == "daily"
        assert body["next_session_time"].endswith("+09:00")
        assert_problem(api.get("/api/projects/demo/workflows/nope"), 404)


class TestDelete:
    def test_a_deleted_project_is_gone_and_its_schedules_removed(
        self, push: Pusher, api: FlaskClient
    ) -> None:
        push("demo")
        response = api.delete("/api/projects/demo")
        assert response.status_code == 200
        assert project_names(api) == []
        assert api.get("/api/schedules").get_json()["items"] == []
        removed = api.get("/api/schedules?include_removed=true").get_json()["items"]
        assert removed[0]["disabled"] is True
        assert_problem(api.delete("/api/projects/demo"), 404)

    def test_pushing_again_revives_a_deleted_project(self, push: Pusher, api: FlaskClient) -> None:
        push("demo", revision="r1")
        api.delete("/api/projects/demo")
        assert push("demo", revision="r2").status_code == 201
        assert project_names(api) == ["demo"]


def test_a_push_answers_the_warnings_of_its_workflow_files(push: Pusher) -> None:
    answer = push("demo", {"hello.dig": "+hello:\n  echo>: hi\n  colour: red\n"})
    assert answer.status_code == 201, answer.get_data(as_text=True)
    assert answer.get_json()["warnings"] == [
        "hello.dig:3: 'echo>' does not read 'colour' and no ${...} of the task uses it "
        "(Digdag: parameter not used)"
    ]
