"""/api/docs (services/api/docs.py): Swagger UI from this server's vendored files, started
without an inline script, so it works offline and under ``script-src 'self'``."""

from __future__ import annotations

from html.parser import HTMLParser

from flask.testing import FlaskClient


class _Assets(HTMLParser):
    """A page's scripts (``src``, None for an inline one), stylesheets and inline handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str | None] = []
        self.stylesheets: list[str] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.handlers += [name for name in attributes if name.startswith("on")]
        if tag == "script":
            self.scripts.append(attributes.get("src"))
        elif tag == "link" and attributes.get("rel") == "stylesheet":
            self.stylesheets.append(attributes.get("href") or "")


def _docs_assets(client: FlaskClient) -> _Assets:
    response = client.get("/api/docs")
    assert response.status_code == 200
    assets = _Assets()
    assets.feed(response.get_data(as_text=True))
    return assets


def test_the_docs_page_runs_no_inline_script(anonymous_api: FlaskClient) -> None:
    assets = _docs_assets(anonymous_api)
    assert assets.scripts and None not in assets.scripts
    assert assets.handlers == []


def test_the_docs_page_loads_swagger_ui_from_this_server(anonymous_api: FlaskClient) -> None:
    assets = _docs_assets(anonymous_api)
    for path in [*assets.scripts, *assets.stylesheets]:
        assert path is not None and path.startswith("/ui/static/"), path
        assert anonymous_api.get(path).status_code == 200, path
    assert "/ui/static/vendor/swagger-ui/swagger-ui-bundle.js" in assets.scripts


def test_the_docs_page_forbids_scripts_from_elsewhere(anonymous_api: FlaskClient) -> None:
    policy = anonymous_api.get("/api/docs").headers["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["default-src"] == "'self'"


def test_the_docs_page_is_not_an_operation_of_the_openapi_document(
    anonymous_api: FlaskClient,
) -> None:
    assert "/api/docs" not in anonymous_api.get("/api/openapi.json").get_json()["paths"]
