"""The scheduler's retention pass: one tick prunes, one replica at a time, and counts it."""

from __future__ import annotations

from sqlalchemy import Engine, select

from tests.support.history_seed import DAY, NOW, add_project, add_revision, add_run
from tickwork.services.scheduler.config import SchedulerSettings
from tickwork.services.scheduler.metrics import SchedulerMetrics
from tickwork.services.scheduler.retention import Pruner
from tickwork.shared.clock import ManualClock
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.retention import RetentionPolicy, pruning_lock
from tickwork.shared.store.retention_batches import BatchLimits
from tickwork.shared.store.tables import sessions

POLICY = RetentionPolicy(history=30 * DAY, logs=30 * DAY, keep_revisions=10)
FAST = BatchLimits(pause_seconds=0)


def seed_old_and_new(engine: Engine) -> int:
    """Three sessions 40 days old and one of yesterday; the new one's id."""
    with engine.begin() as conn:
        project_id = add_project(conn)
        definition_id = add_revision(conn, project_id, "r1")
        for i in range(3):
            add_run(conn, project_id, definition_id, NOW - (40 + i) * DAY)
        return add_run(conn, project_id, definition_id, NOW - DAY).session_id


def test_one_pass_prunes_old_history_and_reports_it_in_metrics(engine: Engine) -> None:
    # Given old history and a pruner on a frozen clock
    newest = seed_old_and_new(engine)
    metrics = SchedulerMetrics()
    pruner = Pruner(engine, POLICY, metrics=metrics, clock=ManualClock(NOW), limits=FAST)
    # When one pass runs
    report = pruner.tick()
    # Then the old sessions are gone, and the metrics say what went and what is left
    with engine.connect() as conn:
        assert list(conn.execute(select(sessions.c.id)).scalars()) == [newest]
    assert report.held_lock
    assert report.result.removed["sessions"] == 3
    registry = metrics.registry
    assert (
        registry.get_sample_value("tickwork_scheduler_rows_pruned_total", {"table": "tasks"}) == 9
    )
    age = registry.get_sample_value("tickwork_scheduler_oldest_session_age_seconds")
    assert age == DAY.total_seconds()
    # And a second pass finds nothing more
    assert pruner.tick().removed == 0


def test_a_replica_skips_its_pass_while_another_prunes(migrated_postgres_url: str) -> None:
    engine = create_store_engine(migrated_postgres_url)
    try:
        seed_old_and_new(engine)
        pruner = Pruner(engine, POLICY, clock=ManualClock(NOW), limits=FAST)
        with pruning_lock(engine) as held:
            assert held
            skipped = pruner.tick()
        assert not skipped.held_lock
        assert skipped.removed == 0
        assert pruner.tick().result.removed["sessions"] == 3
    finally:
        engine.dispose()


def test_a_policy_that_keeps_everything_does_not_touch_the_store(engine: Engine) -> None:
    seed_old_and_new(engine)
    off = RetentionPolicy(history=None, logs=None, keep_revisions=None, audit=None)
    report = Pruner(engine, off, clock=ManualClock(NOW)).tick()
    assert (report.held_lock, report.removed) == (False, 0)


def test_a_stopped_scheduler_ends_the_pass_between_batches(engine: Engine) -> None:
    seed_old_and_new(engine)
    pruner = Pruner(engine, POLICY, clock=ManualClock(NOW), limits=FAST)
    pruner.stopping.set()
    assert pruner.tick().removed == 0


def test_the_scheduler_reads_the_retention_settings() -> None:
    environ = {
        "TICKWORK_DATABASE_URL": "sqlite://",
        "TICKWORK_RETENTION": "30d",
        "TICKWORK_LOG_RETENTION": "7d",
        "TICKWORK_KEEP_REVISIONS": "off",
    }
    settings = SchedulerSettings.from_environment(environ)
    assert settings.retention == RetentionPolicy(30 * DAY, 7 * DAY, None)
