"""The UI's shell: where it is and what every page shares."""

from __future__ import annotations

from flask.testing import FlaskClient


def test_the_root_leads_to_the_ui(anonymous_api: FlaskClient) -> None:
    response = anonymous_api.get("/")
    assert response.status_code == 302
    assert response.headers["Location"].endswith("/ui/")


def test_the_ui_stylesheet_and_script_are_served_from_the_api_itself(
    anonymous_api: FlaskClient,
) -> None:
    for name, media_type in (("ui.css", "text/css"), ("ui.js", "text/javascript")):
        response = anonymous_api.get(f"/ui/static/{name}")
        assert response.status_code == 200
        assert response.mimetype == media_type
