"""A rolling upgrade from the release that kept task logs as files to this one, which keeps
them in the store, fails no attempt and, once the old files are imported, loses no log.

The previous release is built from this repository's history (tests/e2e/_previous_release.py:
a worktree of its commit and a virtualenv of its own, once per session). Its executor,
writing logs under a ``TICKWORK_LOG_DIR`` of its own, and two of its agents run on a
database its own ``tickwork db upgrade`` migrated, and it creates an attempt with its own
code. Then, as a Kubernetes rollout would: this release's ``tickwork db upgrade`` migrates
the database while they run; this release's executor and an agent start beside them and
another attempt starts; the old executor is stopped with SIGTERM, then each old agent in
turn (giving its running tasks back); this release's API starts, and a last attempt starts.

Each attempt runs many short tasks and a few long ones writing numbered lines
(tests/e2e/_rollout.py): the first runs of the long tasks hold the lines the old executor
filed and, past them, the lines this executor stored. Every attempt succeeds; after
``tickwork db import-logs`` on the old log directory every run's log, read through the
new API, is exactly what its task wrote, for runs handled before, during and after the
switch; importing again changes nothing. One run is not whole yet, and its specification
is marked as an expected failure: a run whose file holds less than the store holds of it
past the file's end keeps NUL bytes where the file's lines belong, the import having
taken the file for stored already.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.e2e._previous_release import (
    Release,
    ReleaseServices,
    ReleaseUnavailable,
    install_release,
    previous_release_commit,
    remove_release,
)
from tests.e2e._rollout import (
    LogsRead,
    LongTask,
    Rollout,
    Workload,
    attempt_state,
    chunks_and_runs,
    expected_logs,
    logs_read,
    operator_tasks,
    tasks_succeeded,
    terminate,
)
from tests.e2e._run import REPO_ROOT
from tests.support.databases import DatabaseSupply
from tests.support.servers import RedisAddress, RespClient

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

TOKEN = "upgrade-admin-token"
GRACE_SECONDS = 1.0
"""The old agents' grace after SIGTERM: far shorter than a long task's last wait, so each
gives its running tasks back."""
TAKEOVER_SECONDS = 15.0

BEFORE = Workload("before", 12, (LongTask("long_a", 60, 80), LongTask("long_b", 20, 80)))
"""Created by the old release before the upgrade. The first run of ``long_a`` has more of
its log in the old executor's file than in the store, that of ``long_b`` less."""
DURING = Workload("during", 8, (LongTask("long_c", 40, 60),))
"""Created once the store is migrated, while the old and the new executor share the work."""
AFTER = Workload("after", 8, (LongTask("long_d", 30, 60),))
"""Created once every old process is gone."""
STORE_HOLDS_MORE = ("long_b", 1)
"""The run of the first attempt whose store holds more of its log than the old file."""


# --- the previous release and the rollout --------------------------------------------------


def unavailable(reason: str) -> None:
    """Skip, except under CI (``CI=true``), where the upgrade must be tried."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the previous release cannot be built: {reason}")
    pytest.skip(f"the previous release cannot be built: {reason}")


@pytest.fixture(scope="session")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The release before task logs moved into the store, checked out and installed once
    per session; its worktree and virtualenv are removed at the end."""
    try:
        commit = previous_release_commit(REPO_ROOT)
    except ReleaseUnavailable as exc:
        unavailable(str(exc))
    release = Release.under(commit, tmp_path_factory.mktemp("previous-release"))
    try:
        install_release(REPO_ROOT, release)
    except ReleaseUnavailable as exc:
        remove_release(REPO_ROOT, release)
        unavailable(str(exc))
    except BaseException:
        remove_release(REPO_ROOT, release)
        raise
    yield release
    remove_release(REPO_ROOT, release)


@dataclass(frozen=True)
class Upgraded:
    """What the rollout left, and what was read through the new API along the way."""

    rollout: Rollout
    attempts: dict[int, Workload]
    old_exits: dict[str, int]
    read_before_import: LogsRead
    """The first attempt's logs once every process of the old release was gone."""
    read_after_import: dict[int, LogsRead]
    imports: list[dict[str, Any]]
    """The report of each ``tickwork db import-logs``."""
    stored_after_imports: list[list[tuple[Any, ...]]]

    @property
    def before(self) -> int:
        return next(iter(self.attempts))

    def expected(self, attempt_id: int) -> LogsRead:
        return expected_logs(self.rollout.engine, attempt_id, self.attempts[attempt_id])


@pytest.fixture(scope="module")
def upgraded(
    previous_release: Release,
    empty_postgres_databases: DatabaseSupply,
    redis_server_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Upgraded]:
    """The rollout, run once for this module's specifications on an empty database and
    Redis prefix of its own; its processes are killed and its keys deleted afterwards."""
    root = tmp_path_factory.mktemp("upgrade")
    prefix = f"tickwork-test-{secrets.token_hex(6)}:"
    with empty_postgres_databases.database() as database_url, ExitStack() as stack:
        stack.callback(delete_keys, redis_server_url, prefix)
        engine = sa.create_engine(database_url, poolclass=sa.NullPool)
        stack.callback(engine.dispose)
        old = ReleaseServices(
            previous_release, database_url, redis_server_url, prefix, root / "previous"
        )
        stack.enter_context(old)
        (root / "gates").mkdir()
        yield roll_out(Rollout(old, engine, root, stack))


def delete_keys(redis_url: str, prefix: str) -> None:
    with RespClient(RedisAddress.from_url(redis_url)) as client:
        client.delete_keys_with_prefix(prefix)


def roll_out(rollout: Rollout) -> Upgraded:
    """Run the old release, replace it process by process, import its log files twice."""
    old, gates = rollout.old, rollout.gates
    # Given the previous release's store, executor (logs as files) and two agents
    migrated = old.tickwork("db", "upgrade")
    assert migrated.returncode == 0, migrated.stderr
    old_executor = old.start_executor("old-executor", rollout.old_logs)
    old_agents = [
        old.start_agent(f"old-agent-{n}", concurrency=2, grace_seconds=GRACE_SECONDS)
        for n in (1, 2)
    ]
    old.wait_ready(old_executor, *old_agents)
    # and an attempt it created, whose short tasks ended and whose long tasks' first
    # lines the old executor filed
    (rollout.root / "project").mkdir()
    before = old.submit(BEFORE.name, BEFORE.text(gates), rollout.root / "project")
    rollout.wait(
        "the first attempt's short tasks end and its long tasks' first lines are filed",
        lambda: rollout.first_parts_filed(before, BEFORE),
    )

    # When this release migrates the store while the old processes run
    new = rollout.upgrade()
    # and its executor and an agent start beside them, sharing the partitions
    new_executor = new.start_executor(wait=False)
    new_agent = new.start_agent("new-agent", concurrency=3, wait=False)
    old.wait_ready(new_executor, new_agent)
    rollout.wait(
        "the executors share the partitions",
        lambda: new_executor.metric("tickwork_executor_partitions") == 8,
    )
    # and an attempt starts during the switch, whose short tasks end
    during = new.submit(DURING.name, DURING.text(gates))
    rollout.wait(
        "the second attempt's short tasks end",
        lambda: tasks_succeeded(rollout.engine, during, DURING.short_names()),
    )
    # and the old executor is stopped, its partitions taken over
    old_exits = {old_executor.name: terminate(old_executor)}
    rollout.wait(
        "the new executor holds every partition",
        lambda: new_executor.metric("tickwork_executor_partitions") == 16,
        TAKEOVER_SECONDS,
    )
    # and the long tasks write the rest of their lines, which this executor stores
    (gates / "switched").touch()
    running = {before: BEFORE, during: DURING}
    rollout.wait("the long tasks' last lines are stored", lambda: rollout.long_runs_quiet(running))
    # and each old agent is stopped in turn, giving its running tasks back
    exits = rollout.stop_in_turn(old_agents, running)
    old_exits.update(zip((a.name for a in old_agents), exits, strict=True))
    # and this release's API starts, the long tasks end, and a last attempt starts
    api = new.start_api(f"admin:{TOKEN}", workers=1, env={"TICKWORK_API_RATE_LIMIT": "0"})
    (gates / "drained").touch()
    after = new.submit(AFTER.name, AFTER.text(gates))
    attempts = {**running, after: AFTER}
    rollout.wait("every attempt ends", lambda: rollout.attempts_ended(attempts))

    with httpx.Client(
        base_url=f"http://127.0.0.1:{api.metrics_port}",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
        trust_env=False,
    ) as client:
        read_before_import = logs_read(client, before)
        # and this release imports the old executor's log directory, then again
        first = import_logs(rollout)
        stored = [chunks_and_runs(rollout.engine)]
        read_after_import = {a: logs_read(client, a) for a in attempts}
        again = import_logs(rollout)
        stored.append(chunks_and_runs(rollout.engine))
    return Upgraded(
        rollout, attempts, old_exits, read_before_import, read_after_import, [first, again], stored
    )


def import_logs(rollout: Rollout) -> dict[str, Any]:
    """Run this release's ``tickwork db import-logs`` on the old log directory; its report
    (the last line it printed)."""
    printed = rollout.tickwork("db", "import-logs", str(rollout.old_logs))
    report: dict[str, Any] = json.loads(printed.splitlines()[-1])
    return report


# --- specifications ---------------------------------------------------------------------


def test_every_attempt_succeeds_before_during_and_after_the_switch(upgraded: Upgraded) -> None:
    states = {a: attempt_state(upgraded.rollout.engine, a) for a in upgraded.attempts}
    assert states == dict.fromkeys(upgraded.attempts, "success"), upgraded.rollout.explain()


def test_the_old_processes_stop_cleanly_and_the_old_agents_give_their_tasks_back(
    upgraded: Upgraded,
) -> None:
    rollout = upgraded.rollout
    assert upgraded.old_exits == dict.fromkeys(upgraded.old_exits, 0), rollout.explain()
    failed = [s.name for s in rollout.services() if "Traceback" in s.log()]
    assert not failed, f"tracebacks in the logs of {failed}\n{rollout.explain()}"
    # the first attempt's long tasks ran on the old agents, which gave them back
    tasks = operator_tasks(rollout.engine, upgraded.before)
    assert all(tasks[long.name][2] >= 2 for long in BEFORE.longs), rollout.explain()


def test_until_the_import_what_the_old_executor_filed_reads_as_missing(
    upgraded: Upgraded,
) -> None:
    read, written = upgraded.read_before_import, BEFORE.written()
    # the short tasks' runs wholly: NUL bytes, all of them missing
    for short in BEFORE.short_names():
        size = len(written[short])
        assert read[(short, 1)] == (bytes(size), size), short
    # the long tasks' first runs up to where this executor took over
    for long in BEFORE.longs:
        first = BEFORE.first_part(long)
        rest = written[long.name][len(first) :]
        assert read[(long.name, 1)] == (bytes(len(first)) + rest, len(first)), long.name


def test_after_the_import_each_run_reads_as_its_task_wrote_it(upgraded: Upgraded) -> None:
    """Runs the old executor filed wholly, runs it filed in part (the store holding the
    rest), and runs this executor stored, before, during and after the switch; the run
    whose store holds more than its file is the next specification's."""
    for attempt_id, workload in upgraded.attempts.items():
        expected = upgraded.expected(attempt_id)
        read = dict(upgraded.read_after_import[attempt_id])
        if attempt_id == upgraded.before:
            expected.pop(STORE_HOLDS_MORE, None)
            read.pop(STORE_HOLDS_MORE, None)
        assert read == expected, f"{workload.name}: the import said {upgraded.imports[0]}"


def test_a_run_whose_store_holds_more_than_its_old_file_reads_whole_after_the_import(
    upgraded: Upgraded,
) -> None:
    # its first lines are only in the old file, its last ones only in the store
    read = upgraded.read_after_import[upgraded.before][STORE_HOLDS_MORE]
    assert read == upgraded.expected(upgraded.before)[STORE_HOLDS_MORE]


def test_importing_again_changes_nothing(upgraded: Upgraded) -> None:
    first, again = upgraded.imports
    assert first["imported"] > 0, first
    assert (again["imported"], again["bytes_imported"]) == (0, 0), again
    assert upgraded.stored_after_imports[1] == upgraded.stored_after_imports[0]
