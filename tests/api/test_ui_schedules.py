"""The schedules' pages: the list, one schedule with its next and missed times, and the
controls (pause, resume, skip, backfill after a preview), each refusing a bad value on the
form, naming the field, without changing anything."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import DAILY_WORKFLOW, Pusher

START = "2026-01-01T00:00:00+09:00"


@pytest.fixture
def schedule(push: Pusher, api: FlaskClient) -> dict[str, Any]:
    """The schedule of a daily workflow (07:00 Asia/Tokyo) starting at START."""
    assert push("demo", schedule_from=START).status_code == 201
    item: dict[str, Any] = api.get("/api/schedules").get_json()["items"][0]
    return item


def page_of(api: FlaskClient, schedule: dict[str, Any]) -> str:
    response = api.get(f"/ui/schedules/{schedule['id']}")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def rest(api: FlaskClient, schedule: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = api.get(f"/api/schedules/{schedule['id']}").get_json()
    return found


def session_count(api: FlaskClient) -> int:
    return len(api.get("/api/sessions?limit=1000").get_json()["items"])


def flashes(api: FlaskClient) -> list[str]:
    """The flash messages waiting for the next page (taken: the next call sees new ones)."""
    with api.session_transaction("/ui/") as session:  # the UI cookie is for /ui only
        return [message for _, message in session.pop("_flashes", [])]


class TestList:
    def test_the_list_shows_each_schedule_with_its_times_and_state(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        html = api.get("/ui/schedules").get_data(as_text=True)
        assert f'href="/ui/schedules/{schedule["id"]}">daily</a>' in html
        assert "daily&gt;: 07:00:00" in html
        assert "Asia/Tokyo" in html
        assert "2026-01-01 00:00:00+09:00" in html  # the next session time, in its zone
        assert "active" in html and "none yet" in html

    def test_the_list_filters_by_project(
        self, api: FlaskClient, push: Pusher, schedule: dict[str, Any]
    ) -> None:
        push("other", {"nightly.dig": DAILY_WORKFLOW})
        html = api.get("/ui/schedules?project=other").get_data(as_text=True)
        assert "nightly" in html
        assert f'/ui/schedules/{schedule["id"]}"' not in html
        assert '<option value="other" selected>' in html

    def test_the_search_box_finds_part_of_a_name_in_any_case(
        self, api: FlaskClient, push: Pusher, schedule: dict[str, Any]
    ) -> None:
        push("other", {"nightly.dig": DAILY_WORKFLOW})
        html = api.get("/ui/schedules?q=NIGHT").get_data(as_text=True)
        assert "nightly" in html
        assert f'/ui/schedules/{schedule["id"]}"' not in html
        assert 'name="q" value="NIGHT"' in html

    def test_the_paused_filter_lists_paused_schedules_and_says_when_none_match(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        assert "No schedule matches these filters." in api.get("/ui/schedules?paused=yes").get_data(
            as_text=True
        )
        api.post(f"/ui/schedules/{schedule['id']}/pause")
        html = api.get("/ui/schedules?paused=yes").get_data(as_text=True)
        assert f'/ui/schedules/{schedule["id"]}"' in html
        assert '<span class="state state-paused">paused</span>' in html
        assert '<option value="yes" selected>' in html


class TestDetail:
    def test_a_schedule_shows_its_next_times_and_its_missed_times_with_their_reason(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        api.post(f"/api/schedules/{schedule['id']}/skip", json={"count": 2})
        html = page_of(api, schedule)
        assert "2026-01-03 00:00:00+09:00" in html  # the next session time after the skip
        missed = html.split("Missed session times", 1)[1]
        assert "2026-01-01 00:00:00+09:00" in missed and "2026-01-02 00:00:00+09:00" in missed
        assert "skipped" in missed and "skipped by hand" in missed

    def test_an_unknown_schedule_is_a_404(self, api: FlaskClient) -> None:
        assert api.get("/ui/schedules/4242").status_code == 404


class TestPauseAndResume:
    def test_pause_then_resume_change_the_schedule_and_say_so(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        path = f"/ui/schedules/{schedule['id']}"
        paused = api.post(f"{path}/pause")
        assert paused.status_code == 303 and paused.headers["Location"].endswith(path)
        assert rest(api, schedule)["paused"] is True
        assert flashes(api) == ["Paused demo/daily."]
        assert 'name="replay"' in page_of(api, schedule)  # the resume form, now

        resumed = api.post(f"{path}/resume", data={"replay": "yes"})
        assert resumed.status_code == 303
        assert rest(api, schedule)["paused"] is False
        assert "the times due while it was paused run now" in flashes(api)[0]


class TestSkip:
    def test_skipping_a_count_moves_the_next_session_time(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        response = api.post(f"/ui/schedules/{schedule['id']}/skip", data={"count": "3"})
        assert response.status_code == 303
        assert rest(api, schedule)["next_session_time"] == "2026-01-04T00:00:00+09:00"
        assert flashes(api) == [
            "Skipped 3 session times of demo/daily: "
            "2026-01-01 00:00:00+09:00 to 2026-01-03 00:00:00+09:00."
        ]

    def test_skipping_to_a_time_reads_it_in_the_schedules_zone(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        api.post(f"/ui/schedules/{schedule['id']}/skip", data={"to": "2026-01-03"})
        assert rest(api, schedule)["next_session_time"] == "2026-01-03T00:00:00+09:00"

    @pytest.mark.parametrize(
        ("form", "field", "message"),
        [
            ({"count": "0"}, "Or the next", "greater than or equal to 1"),
            ({"to": "soon"}, "Skip up to", "expected an ISO 8601 time"),
            ({}, "", "give either &#39;to&#39; or &#39;count&#39;"),
            ({"to": "2026-01-03", "count": "2"}, "", "give either"),
        ],
    )
    def test_a_bad_skip_is_shown_on_the_form_naming_the_field_and_changes_nothing(
        self,
        api: FlaskClient,
        schedule: dict[str, Any],
        form: dict[str, str],
        field: str,
        message: str,
    ) -> None:
        response = api.post(f"/ui/schedules/{schedule['id']}/skip", data=form)
        assert response.status_code == 400
        html = response.get_data(as_text=True)
        assert 'class="field-error"' in html
        assert f"{field}: " in html and message in html
        for value in form.values():
            assert f'value="{value}"' in html  # what was entered stays
        assert rest(api, schedule)["next_session_time"] == START
        assert rest(api, schedule)["missed"] == []


class TestBackfill:
    def test_the_preview_lists_the_sessions_and_creates_none_then_confirming_creates_them(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        path = f"/ui/schedules/{schedule['id']}/backfill"
        form = {"from": "2026-01-01", "to": "2026-01-03"}
        preview = api.get(path, query_string=form)
        assert preview.status_code == 200
        html = preview.get_data(as_text=True)
        created = html.split('class="session-times created"', 1)[1].split("</ol>", 1)[0]
        assert created.count("<li>") == 3
        assert "2026-01-03 00:00:00+09:00" in created
        assert 'name="from" value="2026-01-01"' in html and "Run backfill" in html
        assert session_count(api) == 0

        run = api.post(path, data=form)
        assert run.status_code == 303
        assert session_count(api) == 3
        assert flashes(api) == ["Backfill of demo/daily: created 3, 0 existed."]

        again = api.post(path, data={"from": "2026-01-01", "count": "4"})
        assert again.status_code == 303
        assert flashes(api) == ["Backfill of demo/daily: created 1, 3 existed."]

    @pytest.mark.parametrize(
        ("form", "field", "message"),
        [
            ({"from": "2026-01-05", "to": "2026-01-02"}, "To", "must not be before"),
            ({"from": "2026-01-01", "count": "0"}, "Or a count", "greater than or equal to 1"),
            ({"from": "yesterday", "count": "1"}, "From", "expected an ISO 8601 time"),
            ({"to": "2026-01-02"}, "From", "Field required"),
            ({"from": "2999-01-01", "count": "1"}, "From", "must not be in the future"),
        ],
    )
    def test_a_bad_backfill_is_shown_on_the_form_naming_the_field_and_creates_nothing(
        self,
        api: FlaskClient,
        schedule: dict[str, Any],
        form: dict[str, str],
        field: str,
        message: str,
    ) -> None:
        path = f"/ui/schedules/{schedule['id']}/backfill"
        for response in (api.get(path, query_string=form), api.post(path, data=form)):
            assert response.status_code == 400
            html = response.get_data(as_text=True)
            assert '<p id="backfill-' in html or 'role="alert"' in html
            assert f"{field}: " in html and message in html
        assert session_count(api) == 0
