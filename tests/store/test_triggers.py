"""Triggers in the store: a workflow's ``trigger: after:`` starts one session of it per
session of the upstream that succeeds, with the upstream's session time and a reference
to it in its params; a retry of the upstream starts nothing more, a paused trigger
nothing at all, and one whose workflow is gone records why."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from tickwork.shared.clock import utc_now
from tickwork.shared.dsl.archive import pack_project, read_project_archive
from tickwork.shared.errors import InvalidWorkflow
from tickwork.shared.store.projects import push_revision
from tickwork.shared.store.sessions import AttemptFacts, attempt_facts
from tickwork.shared.store.starts import start_attempt
from tickwork.shared.store.tables import attempts, sessions
from tickwork.shared.store.trigger_firing import fire_after
from tickwork.shared.store.triggers import list_triggers, set_paused

UPSTREAM = "+load:\n  echo>: loaded\n"
DOWNSTREAM = "trigger:\n  after: warehouse/load\n+report:\n  echo>: ${trigger.session_time}\n"


def push(engine: Engine, tmp_path: Path, project: str, files: dict[str, str]) -> None:
    source = tmp_path / project
    source.mkdir(exist_ok=True)
    for old in source.glob("*.dig"):
        old.unlink()
    for name, text in files.items():
        (source / name).write_text(text)
    archive = read_project_archive(pack_project(source))
    with engine.begin() as conn:
        push_revision(
            conn, project_name=project, revision_name=None, archive=archive, now=utc_now()
        )


def succeed_upstream(engine: Engine, *, retry_of: int | None = None) -> int:
    """An attempt of warehouse/load that succeeded (a new session, or a retry of one)."""
    now = utc_now()
    with engine.begin() as conn:
        if retry_of is None:
            started = start_attempt(
                conn,
                project="warehouse",
                workflow="load",
                session_time=None,
                params={},
                idempotency_key=None,
                now=now,
            )
            attempt_id = started.attempt_id
        else:
            session_id = conn.execute(
                sa.select(attempts.c.session_id).where(attempts.c.id == retry_of)
            ).scalar_one()
            attempt_id = int(
                conn.execute(
                    sa.insert(attempts)
                    .values(
                        session_id=session_id,
                        name="retry-1",
                        workflow_definition_id=sa.select(attempts.c.workflow_definition_id)
                        .where(attempts.c.id == retry_of)
                        .scalar_subquery(),
                        state="success",
                        timezone="UTC",
                        params={},
                        created_at=now,
                    )
                    .returning(attempts.c.id)
                ).scalar_one()
            )
        conn.execute(
            sa.update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(state="success", finished_at=now)
        )
        fire_after(conn, upstream_facts(conn, attempt_id), now)
    return attempt_id


def upstream_facts(conn: sa.Connection, attempt_id: int) -> AttemptFacts:
    facts = attempt_facts(conn, attempt_id)
    assert facts is not None
    return facts


def downstream_sessions(engine: Engine) -> list[tuple[object, dict[str, object]]]:
    query = (
        sa.select(sessions.c.session_time, attempts.c.params, attempts.c.name)
        .join(attempts, attempts.c.session_id == sessions.c.id)
        .where(sessions.c.workflow_name == "report")
        .order_by(sessions.c.id)
    )
    with engine.connect() as conn:
        return [(row.session_time, dict(row.params)) for row in conn.execute(query)]


@pytest.fixture
def projects(engine: Engine, tmp_path: Path) -> None:
    push(engine, tmp_path, "warehouse", {"load.dig": UPSTREAM})
    push(engine, tmp_path, "reports", {"report.dig": DOWNSTREAM})


@pytest.mark.usefixtures("projects")
def test_an_upstream_success_starts_one_session_of_the_downstream_with_its_time(
    engine: Engine,
) -> None:
    upstream = succeed_upstream(engine)
    ((time, params),) = downstream_sessions(engine)
    with engine.connect() as conn:
        upstream_time = conn.execute(
            sa.select(sessions.c.session_time)
            .join(attempts, attempts.c.session_id == sessions.c.id)
            .where(attempts.c.id == upstream)
        ).scalar_one()
    assert time == upstream_time
    trigger = params["trigger"]
    assert isinstance(trigger, dict)
    assert (trigger["project"], trigger["workflow"], trigger["attempt_id"]) == (
        "warehouse",
        "load",
        upstream,
    )
    with engine.connect() as conn:
        (row,) = list_triggers(conn)
    assert (row.fired_count, row.last_error, row.upstream_project) == (1, None, "warehouse")


@pytest.mark.usefixtures("projects")
def test_a_retry_of_the_upstream_session_that_succeeds_starts_nothing_more(
    engine: Engine,
) -> None:
    first = succeed_upstream(engine)
    with engine.begin() as conn:  # the same success recorded again (a retried transaction)
        fire_after(conn, upstream_facts(conn, first), utc_now())
    succeed_upstream(engine, retry_of=first)
    assert len(downstream_sessions(engine)) == 1


@pytest.mark.usefixtures("projects")
def test_a_paused_trigger_starts_nothing(engine: Engine) -> None:
    with engine.begin() as conn:
        (row,) = list_triggers(conn)
        set_paused(conn, row.id, True, utc_now())
    succeed_upstream(engine)
    assert downstream_sessions(engine) == []


@pytest.mark.usefixtures("projects")
def test_a_push_without_the_trigger_removes_it(engine: Engine, tmp_path: Path) -> None:
    push(engine, tmp_path, "reports", {"report.dig": "+report:\n  echo>: hi\n"})
    succeed_upstream(engine)
    assert downstream_sessions(engine) == []
    with engine.connect() as conn:
        assert list_triggers(conn) == []


def test_a_trigger_that_is_not_one_is_refused_at_its_line(tmp_path: Path) -> None:
    source = tmp_path / "bad"
    source.mkdir()
    (source / "w.dig").write_text(
        "trigger:\n  after: [ok, 'a b/c']\n  every: 1h\n+t:\n  echo>: x\n"
    )
    with pytest.raises(InvalidWorkflow) as caught:
        read_project_archive(pack_project(source))
    assert [str(p) for p in caught.value.problems] == [
        "w.dig:2: 'a b/c': 'a b' cannot name a project",
        "w.dig:3: unknown key 'every' of trigger (known: after, webhook)",
    ]
