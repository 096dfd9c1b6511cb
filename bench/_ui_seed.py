"""Seeding the UI benchmark's database: pushed projects with scheduled workflows, many
sessions with attempts and tasks in realistic states, and one failed attempt of 2,000
tasks whose failed task has a 64 MiB log.

The projects are pushed and one attempt of each workflow is materialised through the
store and the executor's own code; everything else is copied from those in bulk, with
``INSERT ... SELECT`` over ``generate_series``, so 100,000 sessions take seconds.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _log_text import log_body
from sqlalchemy import Connection, Engine, select, text

from tickwork.services.executor.materialize import Placement, materialize_children
from tickwork.shared.dsl.archive import ProjectArchive, pack_project, read_project_archive
from tickwork.shared.store import projects as project_store
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.projects import load_workflow_definition
from tickwork.shared.store.starts import start_attempt
from tickwork.shared.store.tables import attempts, task_logs, workflow_definitions

PROJECTS = ("sales", "marketing", "finance", "platform")
WORKFLOWS = ("ingest", "transform", "publish", "quality", "export")
ZONES = ("UTC", "Asia/Tokyo", "Europe/Berlin", "America/New_York")
BIG_PROJECT = "warehouse"
BIG_WORKFLOW = "nightly"
BIG_GROUPS = 40
BIG_TASKS_PER_GROUP = 50
BIG_FAILED_STEP = 20
BIG_LOG_BYTES = 64 * 1024 * 1024
ERROR_EVERY = 37  # one session in 37 fails ...
RETRIED_EVERY = 74  # ... and half of those were retried successfully
KILLED_EVERY = 101

SMALL_WORKFLOW = """timezone: {zone}

schedule:
  cron>: "{minute} * * * *"

+extract:
  sh>: echo extract ${{session_date}}

+load:
  sh>: echo load ${{session_date}}
  _retry: 2

+report:
  echo>: loaded ${{session_time}}
"""


@dataclass(frozen=True)
class Workflow:
    """One seeded workflow: its project, name and latest definition."""

    project_id: int
    project: str
    name: str
    definition_id: int
    zone: str
    schedule_id: int | None


@dataclass(frozen=True)
class Seeded:
    """What was stored: the workflows, how many sessions, and the 2,000-task attempt."""

    workflows: list[Workflow]
    sessions: int
    big_attempt_id: int
    big_tasks: int
    big_failed_task_id: int
    big_log_bytes: int


def big_workflow_text() -> str:
    """The 2,000-task workflow: groups run one after another; inside, every other group
    fans out (``_parallel``) and the rest are chains, so the graph has groups and edges."""
    lines = ["timezone: UTC", ""]
    for group in range(BIG_GROUPS):
        lines.append(f"+stage{group:02d}:")
        if group % 2:
            lines.append("  _parallel: true")
        for task in range(BIG_TASKS_PER_GROUP):
            lines += [f"  +step{task:03d}:", f"    sh>: echo stage {group} step {task}"]
    return "\n".join(lines) + "\n"


def _archive(files: dict[str, str]) -> ProjectArchive:
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-ui-") as directory:
        for name, content in files.items():
            (Path(directory) / name).write_text(content)
        return read_project_archive(pack_project(Path(directory)))


def _push_projects(conn: Connection, now: datetime) -> list[Workflow]:
    found: list[Workflow] = []
    for index, project in enumerate(PROJECTS):
        zone = ZONES[index % len(ZONES)]
        files = {
            f"{name}.dig": SMALL_WORKFLOW.format(zone=zone, minute=(7 * number) % 60)
            for number, name in enumerate(WORKFLOWS)
        }
        pushed = project_store.push_revision(
            conn, project_name=project, revision_name="r1", archive=_archive(files), now=now
        )
        for name in WORKFLOWS:
            definition_id = conn.execute(
                select(workflow_definitions.c.id).where(
                    workflow_definitions.c.revision_id == pushed.revision_id,
                    workflow_definitions.c.name == name,
                )
            ).scalar_one()
            schedule_id = conn.execute(
                text("SELECT id FROM schedules WHERE project_id = :p AND workflow_name = :w"),
                {"p": pushed.project_id, "w": name},
            ).scalar_one_or_none()
            found.append(
                Workflow(pushed.project_id, project, name, int(definition_id), zone, schedule_id)
            )
    return found


_CREATE_WORKFLOW_TABLE = text(
    "CREATE TEMPORARY TABLE bench_workflows (w int PRIMARY KEY, project_id bigint, "
    "workflow_name text, definition_id bigint, zone text, schedule_id bigint) ON COMMIT DROP"
)
# Session n (0 is the oldest) belongs to workflow n % W; sessions are a minute apart and
# the newest is a minute before now, so the last day holds 1,440 of them.
_INSERT_SESSIONS = text(
    "INSERT INTO sessions (project_id, workflow_name, session_time, session_uuid, schedule_id, "
    "created_at) "
    "SELECT w.project_id, w.workflow_name, :newest - make_interval(mins => :count - 1 - n), "
    "gen_random_uuid()::text, w.schedule_id, :newest - make_interval(mins => :count - 1 - n) "
    "FROM generate_series(0, :count - 1) AS n "
    "JOIN bench_workflows AS w ON w.w = n % :workflows ORDER BY n"
)
# The first attempt of every session: the newest session of each workflow is running, one
# in ERROR_EVERY failed, one in KILLED_EVERY was killed, the rest succeeded.
_INSERT_FIRST_ATTEMPTS = text(
    "INSERT INTO attempts (session_id, name, workflow_definition_id, state, timezone, params, "
    "created_at, finished_at) "
    "SELECT s.id, 'scheduled', w.definition_id, st.state, w.zone, CAST('{}' AS json), "
    "s.session_time + interval '5 seconds', "
    "CASE WHEN st.state = 'running' THEN NULL "
    "ELSE s.session_time + make_interval(secs => 20 + s.id % 400) END "
    "FROM sessions AS s JOIN bench_workflows AS w "
    "ON w.project_id = s.project_id AND w.workflow_name = s.workflow_name "
    "CROSS JOIN LATERAL (SELECT CASE "
    "WHEN s.session_time > :newest - make_interval(mins => :workflows) THEN 'running' "
    f"WHEN s.id % {ERROR_EVERY} = 0 THEN 'error' "
    f"WHEN s.id % {KILLED_EVERY} = 0 THEN 'killed' "
    "ELSE 'success' END AS state) AS st ORDER BY s.id"
)
_INSERT_RETRIES = text(
    "INSERT INTO attempts (session_id, name, workflow_definition_id, state, timezone, params, "
    "resume_from_attempt_id, created_at, finished_at) "
    "SELECT a.session_id, 'retry-1', a.workflow_definition_id, 'success', a.timezone, "
    "CAST('{}' AS json), a.id, a.finished_at + interval '10 minutes', "
    "a.finished_at + interval '11 minutes' FROM attempts AS a "
    f"WHERE a.state = 'error' AND a.session_id % {RETRIED_EVERY} = 0 ORDER BY a.id"
)
# Each workflow's template attempt (materialised for real), numbered k = 0 .. K-1 in id
# order; a copy of task k for attempt a gets id base + a * K + k.
_CREATE_TEMPLATE_TABLE = (
    "CREATE TEMPORARY TABLE bench_template ON COMMIT DROP AS "
    "SELECT a.workflow_definition_id AS definition_id, t.*, "
    "row_number() OVER (PARTITION BY t.attempt_id ORDER BY t.id) - 1 AS k "
    "FROM tasks AS t JOIN attempts AS a ON a.id = t.attempt_id WHERE t.attempt_id IN ({ids})"
)
_TASK_STATE = (
    "CASE WHEN a.state = 'success' THEN 'success' "
    "WHEN a.state = 'running' THEN CASE WHEN t.is_group THEN 'planned' "
    "WHEN t.full_name LIKE '%+extract' THEN 'success' "
    "WHEN t.full_name LIKE '%+load' THEN 'running' ELSE 'blocked' END "
    "WHEN t.is_group THEN CASE WHEN a.state = 'error' THEN 'error' ELSE 'canceled' END "
    "WHEN t.full_name LIKE '%+extract' THEN 'success' "
    "WHEN t.full_name LIKE '%+load' THEN CASE WHEN a.state = 'error' THEN 'error' "
    "ELSE 'canceled' END "
    "ELSE 'canceled' END"
)
_INSERT_TASKS = text(
    "INSERT INTO tasks (id, attempt_id, parent_id, full_name, position, is_group, "
    "is_generated, state, config, inherited_export, retry_count, lease_token, lost_count, "
    "error, created_at, started_at, finished_at, updated_at) "
    "SELECT :base + a.id * :k + t.k, a.id, "
    "CASE WHEN t.parent_id IS NULL THEN NULL ELSE :base + a.id * :k + p.k END, "
    "t.full_name, t.position, t.is_group, false, st.state, t.config, t.inherited_export, "
    "CASE WHEN st.state = 'error' THEN 2 ELSE 0 END, "
    "CASE WHEN t.is_group OR st.state IN ('blocked', 'canceled') THEN 0 ELSE 1 END, 0, "
    "CASE WHEN st.state = 'error' THEN CAST(json_build_object('message', "
    "'command failed with exit status 1: psql: connection to server refused', "
    "'type', 'CommandFailed') AS json) END, "
    "a.created_at, "
    "CASE WHEN st.state IN ('blocked', 'canceled') THEN NULL "
    "ELSE a.created_at + make_interval(secs => t.k) END, "
    "CASE WHEN st.state IN ('success', 'error', 'canceled') THEN COALESCE(a.finished_at, "
    "a.created_at + make_interval(secs => t.k + 1)) END, a.created_at "
    "FROM attempts AS a JOIN bench_template AS t ON t.definition_id = a.workflow_definition_id "
    "LEFT JOIN bench_template AS p ON p.id = t.parent_id "
    f"CROSS JOIN LATERAL (SELECT {_TASK_STATE} AS state) AS st "
    "WHERE a.id <> ALL(:ids) ORDER BY a.id, t.k"
)
_INSERT_EDGES = text(
    "INSERT INTO task_dependencies (upstream_id, downstream_id) "
    "SELECT :base + a.id * :k + up.k, :base + a.id * :k + down.k "
    "FROM attempts AS a JOIN bench_template AS down ON down.definition_id = "
    "a.workflow_definition_id JOIN task_dependencies AS d ON d.downstream_id = down.id "
    "JOIN bench_template AS up ON up.id = d.upstream_id WHERE a.id <> ALL(:ids)"
)
_ADVANCE_TASK_IDS = text(
    "SELECT setval(pg_get_serial_sequence('tasks', 'id'), (SELECT max(id) FROM tasks))"
)


_STAGE = r"substring(full_name from '\+stage(\d\d)')::int"
_STEP = r"substring(full_name from '\+step(\d\d\d)')::int"
_BIG_ATTEMPT_PROGRESS = (
    "UPDATE attempts SET state = 'error', finished_at = now() WHERE id = :a",
    "UPDATE tasks SET state = CASE WHEN parent_id IS NULL THEN 'error' "
    f"WHEN {_STAGE} < :done THEN 'success' WHEN {_STAGE} > :done THEN 'canceled' "
    f"WHEN is_group THEN 'error' WHEN {_STEP} < {BIG_FAILED_STEP} THEN 'success' "
    f"WHEN {_STEP} = {BIG_FAILED_STEP} THEN 'error' ELSE 'canceled' END WHERE attempt_id = :a",
    "UPDATE tasks SET started_at = created_at + make_interval(secs => id % 600), "
    "finished_at = created_at + make_interval(secs => id % 600 + 30), lease_token = 1 "
    "WHERE attempt_id = :a AND state IN ('success', 'error')",
    "UPDATE tasks SET error = CAST(:error AS json) "
    "WHERE attempt_id = :a AND state = 'error' AND NOT is_group",
    "UPDATE tasks SET retry_count = 1 WHERE attempt_id = :a AND full_name LIKE '%+stage03+step007'",
)


def _store_big_log(conn: Connection, attempt_id: int, size: int, now: datetime) -> int:
    """Give the big attempt's failed task a log of ``size`` bytes of service-log text
    (bench/_log_text.py's), ending in a coloured error line; the task's id."""
    task_id, full_name = conn.execute(
        text(
            "SELECT id, full_name FROM tasks WHERE attempt_id = :a AND state = 'error' "
            "AND NOT is_group"
        ),
        {"a": attempt_id},
    ).one()
    last = b"\x1b[31mERROR\x1b[0m table missing: exit code 3\n"
    conn.execute(
        task_logs.insert(),
        {
            "task_id": task_id,
            "attempt_id": attempt_id,
            "lease_token": 1,
            "path": f"{attempt_id}/{full_name.rsplit('+', 1)[-1]}.{task_id}.1.log",
            "size_bytes": size,
            "created_at": now,
            "ended_at": now,
        },
    )
    offset = 0
    for block in log_body(size - len(last)):
        write_log_chunks(conn, [LogChunk(task_id, 1, offset, block)])
        offset += len(block)
    write_log_chunks(conn, [LogChunk(task_id, 1, offset, last)])
    return int(task_id)


def materialize(conn: Connection, attempt_id: int, definition_id: int, now: datetime) -> None:
    """Insert an attempt's static task tree as the executor does when it starts it."""
    definition = load_workflow_definition(conn, definition_id)
    placement = Placement(attempt_id, None, "", None, False)
    materialize_children(conn, placement, [definition.root], [], now)


def _seed_history(conn: Connection, workflows: list[Workflow], count: int, now: datetime) -> None:
    conn.execute(_CREATE_WORKFLOW_TABLE)
    conn.execute(
        text("INSERT INTO bench_workflows VALUES (:w, :p, :n, :d, :z, :s)"),
        [
            {"w": i, "p": f.project_id, "n": f.name, "d": f.definition_id, "z": f.zone}
            | {"s": f.schedule_id}
            for i, f in enumerate(workflows)
        ],
    )
    newest = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    values = {"newest": newest, "count": count, "workflows": len(workflows)}
    conn.execute(_INSERT_SESSIONS, values)
    conn.execute(_INSERT_FIRST_ATTEMPTS, values)
    conn.execute(_INSERT_RETRIES)
    templates = [
        int(row.id)
        for row in conn.execute(
            select(attempts.c.id, attempts.c.workflow_definition_id).where(
                attempts.c.state == "running"
            )
        )
    ]
    by_definition = dict(
        conn.execute(
            select(attempts.c.id, attempts.c.workflow_definition_id).where(
                attempts.c.id.in_(templates)
            )
        ).all()
    )
    for attempt_id, definition_id in by_definition.items():
        materialize(conn, attempt_id, definition_id, now)
    ids = sorted(templates)
    conn.execute(text(_CREATE_TEMPLATE_TABLE.format(ids=", ".join(map(str, ids)))))
    size = conn.execute(text("SELECT max(k) + 1 FROM bench_template")).scalar_one()
    base = conn.execute(text("SELECT max(id) + 1 FROM tasks")).scalar_one()
    copies = {"base": base, "k": size, "ids": ids}
    # The copies' keys are computed to match (a full run with the checks proved them);
    # skipping the per-row foreign-key triggers halves the seeding time.
    conn.execute(text("SET LOCAL session_replication_role = replica"))
    conn.execute(_INSERT_TASKS, copies)
    conn.execute(_INSERT_EDGES, copies)
    conn.execute(text("SET LOCAL session_replication_role = DEFAULT"))
    conn.execute(_ADVANCE_TASK_IDS)
    # The templates run like the other running attempts: extract done, load running.
    conn.execute(
        text(
            "UPDATE tasks SET state = CASE WHEN is_group THEN 'planned' "
            "WHEN full_name LIKE '%+extract' THEN 'success' "
            "WHEN full_name LIKE '%+load' THEN 'running' ELSE 'blocked' END, "
            "started_at = CASE WHEN full_name LIKE '%+report' THEN NULL ELSE created_at END "
            "WHERE attempt_id = ANY(:ids)"
        ),
        {"ids": ids},
    )


def _seed_big_attempt(conn: Connection, now: datetime) -> tuple[int, int, int]:
    """The 2,000-task attempt, failed: three quarters of its stages done (one task failed
    once and was retried), then a task of the next stage failed with a 64 MiB log and
    the rest were canceled. Its id, how many tasks it has, the failed task's id."""
    project_store.push_revision(
        conn,
        project_name=BIG_PROJECT,
        revision_name="r1",
        archive=_archive({f"{BIG_WORKFLOW}.dig": big_workflow_text()}),
        now=now,
    )
    started = start_attempt(
        conn,
        project=BIG_PROJECT,
        workflow=BIG_WORKFLOW,
        session_time=now - timedelta(hours=1),
        params={},
        idempotency_key=None,
        now=now - timedelta(minutes=50),
    )
    definition_id = conn.execute(
        select(attempts.c.workflow_definition_id).where(attempts.c.id == started.attempt_id)
    ).scalar_one()
    materialize(conn, started.attempt_id, int(definition_id), now)
    values = {
        "a": started.attempt_id,
        "done": BIG_GROUPS * 3 // 4 + 1,  # a fanned-out stage
        "error": json.dumps({"message": "exit code 3: table missing"}),
    }
    for statement in _BIG_ATTEMPT_PROGRESS:
        conn.execute(text(statement), values)
    count = conn.execute(
        text("SELECT count(*) FROM tasks WHERE attempt_id = :a"), {"a": started.attempt_id}
    ).scalar_one()
    failed = _store_big_log(conn, started.attempt_id, BIG_LOG_BYTES, now)
    return started.attempt_id, int(count), failed


def seed(engine: Engine, session_count: int) -> Seeded:
    """Push the projects, store ``session_count`` sessions with their attempts and tasks,
    and the 2,000-task attempt; then ANALYZE."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        workflows = _push_projects(conn, now - timedelta(days=1))
        _seed_history(conn, workflows, session_count, now)
        big_attempt_id, big_tasks, failed_task_id = _seed_big_attempt(conn, now)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    return Seeded(
        workflows, session_count, big_attempt_id, big_tasks, failed_task_id, BIG_LOG_BYTES
    )
