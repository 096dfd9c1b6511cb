"""/ui/states.css: the state colour table as a stylesheet, cached by its ETag."""

from __future__ import annotations

from flask.testing import FlaskClient

from tickwork.shared.state_colours import STATE_ENUMS


def test_the_stylesheet_defines_every_state_the_store_knows(api: FlaskClient) -> None:
    response = api.get("/ui/states.css")
    assert response.status_code == 200
    assert response.mimetype == "text/css"
    css = response.get_data(as_text=True)
    for enum in STATE_ENUMS:
        for state in enum:
            assert css.count(f"--state-{state.value}:") == 2, state  # light and dark
            assert f".state-{state.value} {{" in css, state


def test_the_stylesheet_is_not_sent_again_while_its_etag_matches(api: FlaskClient) -> None:
    etag = api.get("/ui/states.css").headers["ETag"]
    again = api.get("/ui/states.css", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.get_data() == b""


def test_a_page_links_the_stylesheet_and_badges_use_the_states_class(api: FlaskClient) -> None:
    html = api.get("/ui/schedules").get_data(as_text=True)
    assert 'href="/ui/states.css"' in html


def test_the_login_page_does_not_link_it(anonymous_api: FlaskClient) -> None:
    html = anonymous_api.get("/ui/login").get_data(as_text=True)
    assert "states.css" not in html
