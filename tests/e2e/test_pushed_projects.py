"""Tasks of pushed projects run in the files of their archive, in-process and on agents.

A pushed project has no directory anywhere: the archive is in the store. The in-process
runner reads it from the database; a distributed agent, which has no database, gets it
from Redis, where the executor put it. In both, a ``sh>`` task runs a script shipped in
the archive, in the folder the archive was unpacked to.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine

from tests.fault._cluster import Cluster
from tickwork.services.compose.dispatchers import InProcessDispatcher
from tickwork.services.compose.embedded import make_in_process_runner
from tickwork.services.executor.loop import WorkflowExecutor
from tickwork.shared.clock import utc_now
from tickwork.shared.dispatch.archives import archive_key
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.dsl.archive import ProjectArchive, pack_project, read_project_archive
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store

pytestmark = [pytest.mark.e2e]

WORKFLOW = "+hello:\n  sh>: bin/hello.sh\n"


def push_project(engine: Engine, source: Path, marker: Path) -> ProjectArchive:
    """Push a project whose script writes its working folder into ``marker``; the source
    folder is removed afterwards, so the files can only come from the archive."""
    (source / "bin").mkdir(parents=True)
    (source / "hello.dig").write_text(WORKFLOW)
    script = source / "bin" / "hello.sh"
    script.write_text(f'#!/bin/sh\necho "shipped script ran"\npwd > "{marker}"\n')
    script.chmod(0o755)
    archive = read_project_archive(pack_project(source))
    shutil.rmtree(source)
    with engine.begin() as conn:
        project_store.push_revision(
            conn, project_name="shipped", revision_name="r1", archive=archive, now=utc_now()
        )
    return archive


def start_attempt(engine: Engine, archive: ProjectArchive) -> int:
    """A new attempt of the pushed ``hello`` workflow, as the API starts one."""
    now = utc_now()
    with engine.begin() as conn:
        result = project_store.push_revision(
            conn, project_name="shipped", revision_name="r1", archive=archive, now=now
        )
        definition_id = project_store.ensure_workflow_definition(
            conn, result.revision_id, archive.workflows["hello"]
        )
        session_id = session_store.ensure_session(
            conn,
            project_id=result.project_id,
            workflow_name="hello",
            session_time=now.replace(microsecond=0),
            now=now,
        )
        attempt_id = session_store.insert_attempt(
            conn,
            session_id=session_id,
            name="manual-1",
            workflow_definition_id=definition_id,
            timezone="UTC",
            params={},
            now=now,
        )
    assert attempt_id is not None
    return attempt_id


@pytest.mark.timeout(60)
def test_an_in_process_run_of_a_pushed_project_runs_the_script_from_its_archive(
    engine: Engine, tmp_path: Path
) -> None:
    # Given a pushed project whose only copy is its archive in the store
    marker = tmp_path / "ran-in.txt"
    archive = push_project(engine, tmp_path / "source", marker)
    attempt_id = start_attempt(engine, archive)
    state_dir = tmp_path / "state"
    dispatcher = InProcessDispatcher(make_in_process_runner(state_dir, engine), 2)
    executor = WorkflowExecutor(engine, dispatcher, attempt_ids={attempt_id})

    # When the in-process executor runs the attempt
    deadline = time.monotonic() + 30
    state = None
    try:
        while state is None and time.monotonic() < deadline:
            report = executor.tick()
            state = dict(report.finished_attempts).get(attempt_id)
            if state is None and not report.more_ready:
                executor.wait_for_work(0.2)
    finally:
        dispatcher.close()

    # Then the script ran in the unpacked archive, and the attempt succeeded
    assert state is AttemptState.SUCCESS, _tasks(engine, attempt_id)
    unpacked = (state_dir / "projects" / archive.digest).resolve()
    assert marker.read_text().strip() == str(unpacked)
    assert (unpacked / "bin" / "hello.sh").is_file()


@pytest.mark.timeout(90)
def test_an_agent_runs_a_pushed_project_from_the_archive_the_executor_put_in_redis(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given a pushed project, an executor and an agent with no database and no shared folder
    marker = tmp_path / "ran-in.txt"
    archive = push_project(cluster.engine, tmp_path / "source", marker)
    cluster.start_executor()
    cluster.start_agent("agent-a")

    # When an attempt of it starts
    attempt_id = start_attempt(cluster.engine, archive)

    # Then the agent unpacked the archive it read from Redis and ran the shipped script
    assert cluster.wait_for_attempt_end(attempt_id, 60) == "success", cluster.explain(attempt_id)
    unpacked = (cluster.root / "state" / "agent-a" / "projects" / archive.digest).resolve()
    assert marker.read_text().strip() == str(unpacked)
    client = redis.Redis.from_url(cluster.redis_url)
    try:
        key = archive_key(cluster.redis_prefix, archive.digest)
        assert client.get(key) == archive.content
        assert client.ttl(key) > 3600
    finally:
        client.close()


def _tasks(engine: Engine, attempt_id: int) -> str:
    """The attempt's tasks with their states and errors, for assertion messages."""
    with engine.connect() as conn:
        rows = task_store.list_attempt_tasks(conn, attempt_id)
    return "\n".join(f"{t.full_name}: {t.state.value} {t.error or ''}" for t in rows)
