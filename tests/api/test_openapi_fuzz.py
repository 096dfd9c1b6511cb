"""Every operation of the generated OpenAPI document, fuzzed by Schemathesis in process.

The app runs on a throwaway PostgreSQL database holding a pushed project with a daily
schedule, three sessions started by hand and a task log. Each operation gets valid
requests aimed at those stored rows (when its path names any), then valid and invalid
requests of any kind, a bounded number of each, from a fixed seed; invalid ones include
requests without the token. No answer may be a 5xx, and each must have a status code,
content type and body that the document declares for the operation.

Schemathesis's own pytest runner (``from_fixture(...).parametrize()``) fails under pytest
9.2 (it sets ``Item._nodeid``), so each operation is driven through
``APIOperation.as_strategy`` and Hypothesis here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from apiflask import APIFlask
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation, BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine

from tests.support.databases import DatabaseSupply
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig, ApiToken
from tickwork.shared.dsl.archive import pack_project
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.tables import task_logs, tasks

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

Check = Callable[..., Any]
Operation = APIOperation[Any, Any, Any, Any]

ADMIN_TOKEN = "fuzz-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SEED = 20261130
# Of valid requests, and as many invalid ones. Each of about 100 operations gets up to
# three passes in one test on one worker: the suite's longest, so kept to a dozen.
EXAMPLES_PER_OPERATION = 12
PROJECT = "demo"
WORKFLOW = "etl"
WORKFLOW_TEXT = """\
timezone: UTC
schedule:
  daily>: "07:00:00"
+extract:
  echo>: extracting ${session_time}
+load:
  echo>: loading
"""
SESSION_TIMES = ("2026-11-01T07:00:00+00:00", "2026-11-02T07:00:00+00:00", "2026-11-03T07:00:00")
LOG_TEXT = "extracting 2026-11-01\n"
CHECKS: tuple[Check, ...] = (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
)

# Path parameters naming what the fixture stored: with these, the fuzzer's requests reach
# real rows, not only 404s.
EXISTING = {
    "name": PROJECT,
    "workflow": WORKFLOW,
    "workflow_id": 1,
    "schedule_id": 1,
    "session_id": 1,
    "attempt_id": 1,
    "file_id": 1,
}

# Operations not fuzzed, and why.
NOT_FUZZED = {
    # Server-sent events until the attempt ends or `max_seconds` (up to 600) pass: an
    # attempt that never runs here would hold the test for as long as the fuzzer asks.
    "GET /api/logs/{attempt_id}/follow": "streams until the attempt ends",
}


@dataclass(frozen=True)
class KnownBug:
    """A request whose answer fails one check. The fuzz test leaves that check out for the
    operation. test_known_bugs_still_fail sends the request and expects the failure, so
    that once the bug is fixed it fails (strict xfail) and the entry can be removed."""

    operation: str
    check: Check
    reason: str
    path_parameters: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    media_type: str | None = None


KNOWN_BUGS: tuple[KnownBug, ...] = ()


def push_and_start(app: APIFlask, project_dir: Path) -> list[int]:
    """A pushed project and a few sessions started by hand, through the API itself; the
    ids of their attempts."""
    client = app.test_client()
    pushed = client.put(
        f"/api/projects/{PROJECT}?revision=r1",
        data=pack_project(project_dir),
        headers={**AUTH, "Content-Type": "application/gzip"},
    )
    assert pushed.status_code == 201, pushed.get_data(as_text=True)
    attempt_ids = []
    for session_time in SESSION_TIMES:
        body = {"project": PROJECT, "workflow": WORKFLOW, "session_time": session_time}
        started = client.post("/api/attempts", json=body, headers=AUTH)
        assert started.status_code == 201, started.get_data(as_text=True)
        attempt_ids.append(int(started.get_json()["id"]))
    return attempt_ids


def add_task_log(engine: Engine, attempt_id: int) -> None:
    """A finished ``+etl+extract`` under its root group, with its log in the store, as the
    executor would have left them."""
    now = datetime.now(UTC)
    common = {"attempt_id": attempt_id, "is_generated": False, "state": "success"}
    times = {"config": {}, "created_at": now, "updated_at": now, "finished_at": now}
    with engine.begin() as conn:
        root = conn.execute(
            tasks.insert()
            .values(full_name=f"+{WORKFLOW}", position=0, is_group=True, **common, **times)
            .returning(tasks.c.id)
        ).scalar_one()
        task_id = conn.execute(
            tasks.insert()
            .values(
                parent_id=root,
                full_name=f"+{WORKFLOW}+extract",
                position=0,
                is_group=False,
                lease_token=1,
                **common,
                **times,
            )
            .returning(tasks.c.id)
        ).scalar_one()
        relative = f"{attempt_id}/+{WORKFLOW}+extract.{task_id}.1.log"
        write_log_chunks(conn, [LogChunk(task_id, 1, 0, LOG_TEXT.encode())])
        conn.execute(
            task_logs.insert().values(
                task_id=task_id,
                attempt_id=attempt_id,
                lease_token=1,
                path=relative,
                size_bytes=len(LOG_TEXT),
                created_at=now,
            )
        )


def load_schema(engine: Engine, database_url: str, work_dir: Path) -> BaseSchema:
    """The app's own OpenAPI document, loaded through WSGI, with data behind it."""
    project_dir = work_dir / "project"
    project_dir.mkdir()
    (project_dir / f"{WORKFLOW}.dig").write_text(WORKFLOW_TEXT)
    config = ApiConfig(
        database_url=database_url,
        tokens=(ApiToken("admin", ADMIN_TOKEN),),
        rate_limit_per_second=0,
    )
    app = create_app(config, engine)
    attempt_ids = push_and_start(app, project_dir)
    add_task_log(engine, attempt_ids[0])
    return schemathesis.openapi.from_wsgi("/api/openapi.json", app)


@pytest.fixture(scope="module")
def api_schema(
    migrated_postgres_databases: DatabaseSupply, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BaseSchema]:
    """The document of an app on a throwaway migrated database, shared by this module's
    tests; the app can store secrets (TICKWORK_SECRET_KEY is set while the module runs)."""
    with (
        pytest.MonkeyPatch.context() as environment,
        migrated_postgres_databases.database() as url,
    ):
        environment.setenv("TICKWORK_SECRET_KEY", "a passphrase for the fuzzed api")
        engine = create_store_engine(url)
        try:
            yield load_schema(engine, url, tmp_path_factory.mktemp("fuzz"))
        finally:
            engine.dispose()


def fuzz_operation(
    operation: Operation,
    mode: GenerationMode,
    checks: list[Check],
    path_parameters: dict[str, Any] | None = None,
) -> None:
    """Send up to EXAMPLES_PER_OPERATION generated requests (with ``path_parameters`` as
    given); raise on the first failed check, shrunk to the simplest request that fails it."""
    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @seed(SEED)
    def send(case: Case[Any]) -> None:
        case.call_and_validate(headers=AUTH, checks=checks)

    try:
        send()
    except Unsatisfiable:
        # Invalid requests to an operation with no parameter and no body: there are none.
        if mode is GenerationMode.POSITIVE:
            raise


def operations(schema: BaseSchema) -> dict[str, Operation]:
    found = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"the document is invalid: {result.err()}"
        found[result.ok().label] = result.ok()
    assert len(found) > 20, f"the document lists only {sorted(found)}"
    return found


def fuzz_passes(operation: Operation) -> list[tuple[str, GenerationMode, dict[str, Any] | None]]:
    """Valid requests to stored rows (if the path names any), then valid and invalid ones."""
    passes: list[tuple[str, GenerationMode, dict[str, Any] | None]] = []
    names = [parameter.name for parameter in operation.path_parameters]
    if names and all(name in EXISTING for name in names):
        stored = {name: EXISTING[name] for name in names}
        passes.append(("stored rows", GenerationMode.POSITIVE, stored))
    passes.append(("valid", GenerationMode.POSITIVE, None))
    passes.append(("invalid", GenerationMode.NEGATIVE, None))
    return passes


def test_no_request_gets_a_server_error_or_an_undocumented_answer(
    api_schema: BaseSchema, subtests: pytest.Subtests
) -> None:
    # Deletions last, so that the other operations find the project still there.
    found = sorted(operations(api_schema).items(), key=lambda item: item[1].method == "delete")
    for label, operation in found:
        if label in NOT_FUZZED:
            continue
        skipped = {bug.check for bug in KNOWN_BUGS if bug.operation == label}
        checks = [check for check in CHECKS if check not in skipped]
        for name, mode, path_parameters in fuzz_passes(operation):
            with subtests.test(msg=f"{label} ({name})"):
                fuzz_operation(operation, mode, checks, path_parameters)


@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(
            bug,
            id=f"{bug.operation} {bug.check.__name__}",
            marks=pytest.mark.xfail(strict=True, reason=bug.reason, raises=FailureGroup),
        )
        for bug in KNOWN_BUGS
    ],
)
def test_known_bugs_still_fail(api_schema: BaseSchema, bug: KnownBug) -> None:
    operation = operations(api_schema)[bug.operation]
    extra = {} if bug.media_type is None else {"body": bug.body, "media_type": bug.media_type}
    case = operation.Case(path_parameters=bug.path_parameters, **extra)
    case.validate_response(case.call(headers=AUTH), checks=[bug.check])
