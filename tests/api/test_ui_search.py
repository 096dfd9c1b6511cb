"""The header's search (/ui/search), the projects list's name filter, and the REST
projects and workflows lists' partial-name filters."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api._seed import THREE_STEPS, add_project, add_sessions


@pytest.fixture
def projects(engine: Engine) -> dict[str, int]:
    """Projects ``Sales-ETL`` (workflows ``nightly_load``, ``report``) and ``billing``
    (workflow ``invoice``), by name."""
    with engine.begin() as conn:
        return {
            "Sales-ETL": add_project(
                conn, "Sales-ETL", {"nightly_load": THREE_STEPS, "report": THREE_STEPS}
            ),
            "billing": add_project(conn, "billing", {"invoice": THREE_STEPS}),
        }


class TestSearch:
    def test_an_attempt_id_goes_straight_to_its_page(
        self, api: FlaskClient, engine: Engine, projects: dict[str, int]
    ) -> None:
        add_sessions(engine, projects["billing"], "invoice", 2)
        for query in ("2", "#2", " # 2 "):
            response = api.get("/ui/search", query_string={"q": query})
            assert response.status_code == 303
            assert response.headers["Location"] == "/ui/attempts/2"

    def test_the_only_match_goes_straight_to_its_page(
        self, api: FlaskClient, projects: dict[str, int]
    ) -> None:
        workflow = api.get("/ui/search?q=NIGHTLY")
        assert workflow.status_code == 303
        assert workflow.headers["Location"] == "/ui/projects/Sales-ETL/workflows/nightly_load"
        project = api.get("/ui/search?q=bill")
        assert project.headers["Location"] == "/ui/projects/billing"

    def test_several_matches_are_listed_by_kind(
        self, api: FlaskClient, projects: dict[str, int]
    ) -> None:
        response = api.get("/ui/search?q=L")
        html = response.get_data(as_text=True)
        assert response.status_code == 200
        assert '<h2 id="found-projects">Projects</h2>' in html
        assert 'href="/ui/projects/Sales-ETL"' in html and 'href="/ui/projects/billing"' in html
        assert '<h2 id="found-workflows">Workflows</h2>' in html
        assert 'href="/ui/projects/Sales-ETL/workflows/nightly_load"' in html
        assert 'href="/ui/projects/Sales-ETL/workflows/report"' not in html

    def test_scripts_get_the_matches_as_json(
        self, api: FlaskClient, projects: dict[str, int]
    ) -> None:
        found = api.get("/ui/search?q=o&format=json").json
        assert found is not None
        assert found["projects"] == []
        assert {(w["project"], w["name"]) for w in found["workflows"]} == {
            ("Sales-ETL", "nightly_load"),
            ("Sales-ETL", "report"),
            ("billing", "invoice"),
        }
        assert found["attempt_id"] is None

    @pytest.mark.parametrize("query", ["", "nothing-like-it", "99999999999999999999", "%", "__"])
    def test_a_search_that_finds_nothing_says_so(
        self, api: FlaskClient, projects: dict[str, int], query: str
    ) -> None:
        response = api.get("/ui/search", query_string={"q": query})
        assert response.status_code == 200
        if query:
            assert "Nothing is named like" in response.get_data(as_text=True)

    def test_a_query_longer_than_a_name_is_400(self, api: FlaskClient) -> None:
        response = api.get("/ui/search", query_string={"q": "x" * 256})
        assert response.status_code == 400
        assert "q: at most 255 characters" in response.get_data(as_text=True)


class TestNameFilters:
    def test_the_projects_page_keeps_projects_whose_name_holds_the_text(
        self, api: FlaskClient, projects: dict[str, int]
    ) -> None:
        html = api.get("/ui/projects?q=etl").get_data(as_text=True)
        assert 'href="/ui/projects/Sales-ETL"' in html
        assert 'href="/ui/projects/billing"' not in html
        assert api.get("/ui/projects?q=" + "x" * 256).status_code == 400

    def test_the_project_page_keeps_workflows_whose_name_holds_the_text(
        self, api: FlaskClient, projects: dict[str, int]
    ) -> None:
        html = api.get("/ui/projects/Sales-ETL?workflow=LOAD").get_data(as_text=True)
        assert 'href="/ui/projects/Sales-ETL/workflows/nightly_load"' in html
        assert 'href="/ui/projects/Sales-ETL/workflows/report"' not in html
        assert 'data-live-part="/ui/projects/Sales-ETL/live?workflow=LOAD"' in html
        live = api.get("/ui/projects/Sales-ETL/live?workflow=LOAD").get_data(as_text=True)
        assert "nightly_load" in live and "report" not in live
        none = api.get("/ui/projects/Sales-ETL?workflow=zzz").get_data(as_text=True)
        assert "No workflow&#39;s name holds" in none or "No workflow's name holds" in none
        assert api.get("/ui/projects/Sales-ETL?workflow=" + "x" * 256).status_code == 400

    def test_the_rest_lists_match_parts_of_names_in_any_case(
        self, api: FlaskClient, projects: dict[str, int]
    ) -> None:
        found = api.get("/api/projects?name_contains=SALES").json
        assert found is not None and [p["name"] for p in found["items"]] == ["Sales-ETL"]
        workflows = api.get("/api/workflows?name_contains=O&project_contains=etl").json
        assert workflows is not None
        assert sorted(w["name"] for w in workflows["items"]) == ["nightly_load", "report"]
        exact = api.get("/api/workflows?project=etl").json
        assert exact is not None and exact["items"] == []
