"""Specification of pushing project archives into the store, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from tests.support.files import write_under
from tickwork.shared.dsl.archive import ProjectArchive, pack_project, read_project_archive
from tickwork.shared.errors import Conflict, InvalidInput, NotFound
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store.tables import project_archives, projects, revisions, sessions

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
DAILY = "schedule:\n  daily>: 07:00:00\n+a:\n  echo>: hi\n"
HOURLY = "schedule:\n  cron>: '0 * * * *'\n+a:\n  echo>: hi\n"
PLAIN = "+a:\n  echo>: hi\n"
Pack = Callable[[dict[str, str]], ProjectArchive]


@pytest.fixture
def pack(tmp_path: Path) -> Pack:
    """Packs and validates a project of the given files (name -> text)."""
    counter = iter(range(1000))

    def make(files: dict[str, str]) -> ProjectArchive:
        directory = tmp_path / f"project{next(counter)}"
        directory.mkdir()
        for name, text in files.items():
            write_under(directory, name, text)
        return read_project_archive(pack_project(directory))

    return make


def push(
    engine: Engine,
    archive: ProjectArchive,
    revision: str | None = "r1",
    *,
    now: datetime = NOW,
    schedule_from: datetime | None = None,
    project: str = "etl",
) -> project_store.PushResult:
    with engine.begin() as conn:
        return project_store.push_revision(
            conn,
            project_name=project,
            revision_name=revision,
            archive=archive,
            now=now,
            schedule_from=schedule_from,
        )


def active_schedules(engine: Engine) -> dict[str, schedule_store.ScheduleRow]:
    with engine.connect() as conn:
        return {s.workflow_name: s for s in schedule_store.list_schedules(conn)}


class TestPush:
    def test_a_first_push_creates_the_project_its_revision_and_schedules(
        self, engine: Engine, pack: Pack
    ) -> None:
        archive = pack({"daily.dig": DAILY, "plain.dig": PLAIN})

        result = push(engine, archive)

        assert result.created and result.project_name == "etl"
        assert result.workflows == ("daily", "plain")
        assert result.schedules_added == ("daily",)
        assert result.archive_digest == archive.digest
        assert list(active_schedules(engine)) == ["daily"]
        with engine.connect() as conn:
            stored = conn.execute(select(revisions.c.archive_digest)).scalar_one()
            assert stored == archive.digest
            assert project_store.get_project_archive(conn, archive.digest) == archive.content

    def test_pushing_the_same_revision_again_changes_nothing(
        self, engine: Engine, pack: Pack
    ) -> None:
        archive = pack({"daily.dig": DAILY})
        first = push(engine, archive)

        again = push(engine, archive, now=NOW + timedelta(hours=1))

        assert not again.created
        assert again.revision_id == first.revision_id
        assert again.schedules_added == again.schedules_updated == again.schedules_removed == ()
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(revisions)).scalar_one() == 1

    def test_the_same_revision_name_with_other_content_is_a_conflict(
        self, engine: Engine, pack: Pack
    ) -> None:
        push(engine, pack({"daily.dig": DAILY}))
        with pytest.raises(Conflict, match="'r1' of project 'etl' already holds another"):
            push(engine, pack({"daily.dig": HOURLY}))

    def test_a_revision_name_defaults_to_a_uuid(self, engine: Engine, pack: Pack) -> None:
        result = push(engine, pack({"plain.dig": PLAIN}), None)
        assert len(result.revision_name) == 36 and result.revision_name.count("-") == 4

    def test_an_archive_is_stored_once_whatever_the_number_of_revisions(
        self, engine: Engine, pack: Pack
    ) -> None:
        archive = pack({"plain.dig": PLAIN})
        push(engine, archive, "r1")
        push(engine, archive, "r2")
        push(engine, archive, "r1", project="other")
        with engine.connect() as conn:
            count = conn.execute(select(func.count()).select_from(project_archives)).scalar_one()
            assert count == 1

    @pytest.mark.parametrize("name", ["", ".", "..", "-dash", "a/b", "a b", "x" * 129])
    def test_a_bad_project_name_is_refused_naming_the_field(
        self, engine: Engine, pack: Pack, name: str
    ) -> None:
        with pytest.raises(InvalidInput) as caught:
            push(engine, pack({"plain.dig": PLAIN}), project=name)
        assert caught.value.problems[0].file == "project"
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(projects)).scalar_one() == 0

    @pytest.mark.parametrize("name", ["", "a\x00b", "tab\there", "x" * 256])
    def test_a_bad_revision_name_is_refused_naming_the_field(
        self, engine: Engine, pack: Pack, name: str
    ) -> None:
        with pytest.raises(InvalidInput) as caught:
            push(engine, pack({"plain.dig": PLAIN}), name)
        assert caught.value.problems[0].file == "revision"


class TestSchedules:
    def test_schedules_are_added_updated_and_removed_across_pushes(
        self, engine: Engine, pack: Pack
    ) -> None:
        push(engine, pack({"one.dig": DAILY, "two.dig": DAILY}), "r1")

        later = NOW + timedelta(days=1)
        result = push(
            engine,
            pack({"one.dig": HOURLY, "three.dig": DAILY}),
            "r2",
            now=later,
        )

        assert result.schedules_added == ("three",)
        assert result.schedules_updated == ("one",)
        assert result.schedules_removed == ("two",)
        assert sorted(active_schedules(engine)) == ["one", "three"]
        assert active_schedules(engine)["one"].spec["value"] == "0 * * * *"

    def test_a_workflow_that_loses_its_schedule_loses_its_schedule_row(
        self, engine: Engine, pack: Pack
    ) -> None:
        push(engine, pack({"one.dig": DAILY}), "r1")
        result = push(engine, pack({"one.dig": PLAIN}), "r2")
        assert result.schedules_removed == ("one",)
        assert active_schedules(engine) == {}

    def test_schedule_from_starts_a_new_schedule_in_the_past(
        self, engine: Engine, pack: Pack
    ) -> None:
        start = datetime(2024, 4, 28, tzinfo=UTC)
        push(engine, pack({"one.dig": DAILY}), schedule_from=start)
        schedule = active_schedules(engine)["one"]
        assert schedule.next_schedule_time == start  # daily> sessions are at midnight

    def test_without_schedule_from_a_new_schedule_starts_after_now(
        self, engine: Engine, pack: Pack
    ) -> None:
        push(engine, pack({"one.dig": DAILY}))
        schedule = active_schedules(engine)["one"]
        assert schedule.next_schedule_time == datetime(2024, 5, 2, tzinfo=UTC)


class TestDelete:
    def test_a_deleted_project_keeps_its_sessions_and_loses_its_schedules(
        self, engine: Engine, pack: Pack
    ) -> None:
        result = push(engine, pack({"one.dig": DAILY}))
        with engine.begin() as conn:
            session_store.ensure_session(
                conn, project_id=result.project_id, workflow_name="one", session_time=NOW, now=NOW
            )
            project_store.delete_project(conn, "etl", NOW + timedelta(hours=1))

        assert active_schedules(engine) == {}
        with engine.connect() as conn:
            deleted_at = conn.execute(select(projects.c.deleted_at)).scalar_one()
            assert deleted_at is not None
            query = select(func.count()).select_from(sessions)
            assert (
                conn.execute(query.where(sessions.c.project_id == result.project_id)).scalar_one()
                == 1
            )

    def test_deleting_a_missing_project_is_not_found(self, engine: Engine) -> None:
        with engine.begin() as conn, pytest.raises(NotFound, match="'nope'"):
            project_store.delete_project(conn, "nope", NOW)

    def test_pushing_a_deleted_project_revives_it_with_its_schedules(
        self, engine: Engine, pack: Pack
    ) -> None:
        push(engine, pack({"one.dig": DAILY}), "r1")
        with engine.begin() as conn:
            project_store.delete_project(conn, "etl", NOW)
        result = push(engine, pack({"one.dig": DAILY}), "r2")
        assert result.schedules_added == ("one",)
        with engine.connect() as conn:
            assert conn.execute(select(projects.c.deleted_at)).scalar_one() is None


class TestArchiveOfAttempt:
    def test_an_attempt_of_a_pushed_revision_names_its_archive(
        self, engine: Engine, pack: Pack
    ) -> None:
        archive = pack({"plain.dig": PLAIN})
        result = push(engine, archive)
        with engine.begin() as conn:
            definition_id = project_store.ensure_workflow_definition(
                conn, result.revision_id, archive.workflows["plain"]
            )
            session_id = session_store.ensure_session(
                conn, project_id=result.project_id, workflow_name="plain", session_time=NOW, now=NOW
            )
            attempt_id = session_store.insert_attempt(
                conn,
                session_id=session_id,
                name="a",
                workflow_definition_id=definition_id,
                timezone="UTC",
                params={},
                now=NOW,
            )
            assert attempt_id is not None
            assert project_store.archive_digest_of_attempt(conn, attempt_id) == archive.digest

    def test_a_missing_archive_is_not_found(self, engine: Engine) -> None:
        with engine.connect() as conn, pytest.raises(NotFound):
            project_store.get_project_archive(conn, "0" * 64)
