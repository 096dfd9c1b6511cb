"""SQLAlchemy Core tables of tickwork's store, the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from tickwork.shared.store.dialects import dialect_of

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# SQLite only auto-increments a plain INTEGER primary key.
Id = BigInteger().with_variant(Integer(), "sqlite")


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC timestamp on both dialects (SQLite stores it naive, so we put UTC back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use tickwork.shared.clock")
        value = value.astimezone(UTC)
        return dialect_of(dialect).timestamp_param(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        # Pages read thousands: a value already in UTC (PostgreSQL's, when the session's
        # time zone is UTC) is returned as it is, before anything else is looked at.
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is UTC:
            return value
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Timestamp = UtcDateTime

projects = Table(
    "projects",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("source_dir", Text),  # where `tickwork run` found the project; null once pushed
    Column("created_at", Timestamp, nullable=False),
    Column("deleted_at", Timestamp),
)

revisions = Table(
    "revisions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("default_params", JSON, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    # The pushed tar.gz (project_archives.digest); null for a directory run locally.
    Column("archive_digest", String(64)),
    UniqueConstraint("project_id", "name"),
)

# Pushed project archives, stored once per content: revisions with the same files share one.
project_archives = Table(
    "project_archives",
    metadata,
    Column("digest", String(64), primary_key=True),  # SHA-256 of the tar.gz bytes
    Column("content", LargeBinary, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("created_at", Timestamp, nullable=False),
)

workflow_configs = Table(
    "workflow_configs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("digest", String(64), nullable=False, unique=True),
    Column("config", JSON, nullable=False),
)

workflow_definitions = Table(
    "workflow_definitions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("revision_id", Id, ForeignKey("revisions.id"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("config_id", Id, ForeignKey("workflow_configs.id"), nullable=False),
    UniqueConstraint("revision_id", "name"),
)

schedules = Table(
    "schedules",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("workflow_name", String(255), nullable=False),
    Column("workflow_definition_id", Id, ForeignKey("workflow_definitions.id"), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("timezone", String(64), nullable=False),
    # When a scheduler should look at this schedule next (null: nothing to do until a
    # change); the run time of next_schedule_time, or a retry time after a failure.
    Column("next_run_time", Timestamp),
    Column("next_schedule_time", Timestamp),  # the first session time not dealt with yet
    Column("last_session_time", Timestamp),  # the checkpoint: every time up to it is handled
    Column("disabled_at", Timestamp),  # the workflow was removed from the project
    Column("paused_at", Timestamp),
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    UniqueConstraint("project_id", "workflow_name"),
    Index("ix_schedules_next_run_time", "next_run_time"),
)

# Closed spans when a schedule was paused or removed: runs due then never happen.
schedule_inactive_spans = Table(
    "schedule_inactive_spans",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("schedule_id", Id, ForeignKey("schedules.id", ondelete="CASCADE"), nullable=False),
    Column("started_at", Timestamp, nullable=False),
    Column("ended_at", Timestamp, nullable=False),
    Column("reason", String(16), nullable=False),  # paused | removed
    Index("ix_schedule_inactive_spans_schedule", "schedule_id", "ended_at"),
)

# Session times a schedule did not emit because of its policy; a backfill can run them.
schedule_missed = Table(
    "schedule_missed",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("schedule_id", Id, ForeignKey("schedules.id", ondelete="CASCADE"), nullable=False),
    Column("first_session_time", Timestamp, nullable=False),
    Column("last_session_time", Timestamp, nullable=False),
    Column("count", Integer),  # null when too many to count
    Column("reason", String(16), nullable=False),  # catchup | overlap | skipped | edited
    Column("recorded_at", Timestamp, nullable=False),
    Index("ix_schedule_missed_schedule_first", "schedule_id", "first_session_time"),
)

backfills = Table(
    "backfills",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("workflow_name", String(255), nullable=False),
    Column("first_session_time", Timestamp, nullable=False),
    Column("last_session_time", Timestamp, nullable=False),
    Column("parallel", Boolean, nullable=False),
    Column("created_at", Timestamp, nullable=False),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("workflow_name", String(255), nullable=False),
    Column("session_time", Timestamp, nullable=False),
    Column("session_uuid", String(36), nullable=False, unique=True),
    Column("schedule_id", Id, ForeignKey("schedules.id", ondelete="SET NULL")),
    Column("created_at", Timestamp, nullable=False),
    UniqueConstraint("project_id", "workflow_name", "session_time", name="uq_sessions_idempotency"),
    Index("ix_sessions_schedule_time", "schedule_id", "session_time"),
    Index("ix_sessions_project_workflow_id", "project_id", "workflow_name", "id"),
    Index("ix_sessions_session_time", "session_time"),
    sqlite_autoincrement=True,
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("session_id", Id, ForeignKey("sessions.id"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("workflow_definition_id", Id, ForeignKey("workflow_definitions.id"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("params", JSON, nullable=False),
    Column("resume_from_attempt_id", Id, ForeignKey("attempts.id")),
    Column("project_dir", Text),
    Column("backfill_id", Id, ForeignKey("backfills.id")),
    Column("created_at", Timestamp, nullable=False),
    Column("finished_at", Timestamp),
    # A client's key for POST /api/attempts: the same key twice names the same attempt.
    Column("idempotency_key", String(255)),
    # Retry "from +task": full names of the resumed attempt's tasks that count as done
    # (null: every task that succeeded there).
    Column("resume_only", JSON),
    # `tickwork run --end/--goal`: full names of tasks done without running (null: none).
    Column("skip_tasks", JSON),
    # The workflow's `sla:`: when the attempt must be done by, and when the SLA fired.
    Column("sla_deadline", Timestamp),
    Column("sla_fired_at", Timestamp),
    UniqueConstraint("session_id", "name", name="uq_attempts_session_name"),
    UniqueConstraint("idempotency_key", name="uq_attempts_idempotency_key"),
    Index("ix_attempts_state", "state"),
    Index("ix_attempts_session_id", "session_id", "id"),
    Index("ix_attempts_sla_deadline", "sla_deadline"),
    # The UI's failures since a time, and its sessions filtered by their attempts' state.
    Index("ix_attempts_state_finished_at", "state", "finished_at"),
    Index("ix_attempts_state_session_id", "state", "session_id"),
    # Retention's deletes: the attempts that name an attempt or a definition being deleted.
    Index(
        "ix_attempts_resume_from_attempt_id",
        "resume_from_attempt_id",
        postgresql_where=text("resume_from_attempt_id IS NOT NULL"),
        sqlite_where=text("resume_from_attempt_id IS NOT NULL"),
    ),
    Index("ix_attempts_workflow_definition_id", "workflow_definition_id"),
    sqlite_autoincrement=True,
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("attempt_id", Id, ForeignKey("attempts.id"), nullable=False),
    Column("parent_id", Id, ForeignKey("tasks.id")),
    Column("full_name", Text, nullable=False),
    Column("position", Integer, nullable=False),  # order among siblings
    Column("is_group", Boolean, nullable=False),
    Column("is_generated", Boolean, nullable=False),
    Column("state", String(16), nullable=False),
    Column("config", JSON, nullable=False),  # the TaskSpec without children
    Column("inherited_export", JSON),  # ancestors' _export, merged outermost first
    Column("retry_count", Integer, nullable=False, default=0),
    Column("lease_token", BigInteger, nullable=False, default=0),  # fencing token
    # Times an agent lost the task's lease without a result (it died or stalled).
    Column("lost_count", Integer, nullable=False, default=0, server_default="0"),
    Column("not_before", Timestamp),
    Column("pool", String(64)),  # the pool whose slot it takes while in flight (_pool)
    Column("priority", Integer, nullable=False, default=0, server_default="0"),  # _priority
    # While READY: when it became ready (seconds) less its priority's head start; the
    # executor hands out ready tasks lowest rank first (see shared.domain.pools).
    Column("ready_rank", Float),
    Column("params", JSON),  # stored params visible when the task started
    Column("result", JSON),  # what the operator returned (stored params, output)
    Column("output_params", JSON),  # params visible to the tasks after this one
    Column("error", JSON),
    Column("created_at", Timestamp, nullable=False),
    Column("started_at", Timestamp),
    Column("finished_at", Timestamp),
    Column("updated_at", Timestamp, nullable=False),
    UniqueConstraint("attempt_id", "full_name", name="uq_tasks_attempt_full_name"),
    # Serves "active children of P" probes and, in position order, the next child to start.
    Index("ix_tasks_parent_state_position", "parent_id", "state", "position"),
    Index("ix_tasks_state_not_before", "state", "not_before"),
    # The reaper's in-flight tasks unchanged since its grace.
    Index("ix_tasks_state_updated_at", "state", "updated_at"),
    # Ready tasks in rank order (of a pool, or of none); a pool's tasks in flight.
    Index("ix_tasks_state_pool_rank", "state", "pool", "ready_rank"),
    # Ids are never reused: a deleted task's id coming back would restart its fencing token.
    sqlite_autoincrement=True,
)

task_dependencies = Table(
    "task_dependencies",
    metadata,
    Column("upstream_id", Id, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("downstream_id", Id, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Index("ix_task_dependencies_downstream", "downstream_id"),
)

task_logs = Table(
    "task_logs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("task_id", Id, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("attempt_id", Id, ForeignKey("attempts.id"), nullable=False),
    Column("lease_token", BigInteger, nullable=False),
    # The run's log name, <attempt id>/<task>.<task id>.<token>.log: where its file lay
    # under TICKWORK_LOG_DIR before logs moved into the store (`tickwork db import-logs`).
    Column("path", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),  # of the stored file
    # Bytes the agent cut from the middle of the log (it keeps the head and the tail).
    Column("truncated_bytes", BigInteger, nullable=False, server_default="0"),
    # Indexed when the run is dispatched, before it writes anything.
    Column("created_at", Timestamp, nullable=False),
    # When the run's result recorded the file's final size; NULL while the run goes on,
    # and for good if it ended without a result (killed, its agent lost).
    Column("ended_at", Timestamp, nullable=True),
    # When retention removed the log's text (TICKWORK_LOG_RETENTION); the row stays.
    Column("pruned_at", Timestamp, nullable=True),
    UniqueConstraint("task_id", "lease_token"),
    Index("ix_task_logs_attempt", "attempt_id"),
)

# The text of each run's log, as the executor stored it from the chunks agents streamed:
# idempotent by run and byte offset (a chunk written twice changes nothing; one sent again
# longer replaces the shorter), a missing chunk a gap. ``data`` is zlib-compressed where
# that pays (``compressed``); ``size_bytes`` is always its length as text.
task_log_chunks = Table(
    "task_log_chunks",
    metadata,
    Column("task_id", Id, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("lease_token", BigInteger, primary_key=True),
    Column("byte_offset", BigInteger, primary_key=True),
    Column("size_bytes", Integer, nullable=False),
    Column("compressed", Boolean, nullable=False),
    Column("data", LargeBinary, nullable=False),
)

# Project secrets (`tickwork secrets`), encrypted with TICKWORK_SECRET_KEY; values never leave
# the store in clear except inside a task message that needs them.
secrets = Table(
    "secrets",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("name", String(255), nullable=False),
    Column("value_encrypted", Text, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    UniqueConstraint("project_id", "name"),
)

# Alerts recorded about an attempt (an SLA missed); one per attempt and kind.
alerts = Table(
    "alerts",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("attempt_id", Id, ForeignKey("attempts.id"), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("message", Text, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    UniqueConstraint("attempt_id", "kind"),
)

# Persistent params (`param_set>` / `param_get>`): string values a project's sessions share,
# one per key; a value not set again within PARAM_TTL (tickwork.shared.store.project_params)
# expires.
project_params = Table(
    "project_params",
    metadata,
    Column("project_id", Id, ForeignKey("projects.id"), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
)

# The web UI's signed-in sessions (tickwork.shared.store.ui_sessions): the cookie holds a random
# session id, the row its SHA-256; signing out or removing the token ends the row, and
# with it every copy of the cookie on every API replica.
ui_sessions = Table(
    "ui_sessions",
    metadata,
    Column("id_digest", String(64), primary_key=True),
    Column("token_digest", String(64), nullable=False, index=True),
    Column("role", String(16), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("last_seen_at", Timestamp, nullable=False, index=True),
    Column("ended_at", Timestamp, nullable=True),
)

# Named bearer tokens (tickwork.shared.store.api_tokens): the row keeps the SHA-256 of the
# secret, never the secret; revoking sets revoked_at, and every API replica reads the row at
# each request, so a revoked token stops working at once everywhere.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("digest", String(64), nullable=False),
    Column("role", String(16), nullable=False),
    Column("created_by", String(80), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("expires_at", Timestamp, nullable=True),
    Column("last_used_at", Timestamp, nullable=True),
    Column("revoked_at", Timestamp, nullable=True),
    # The project globs the token is limited to (a JSON list); null: every project.
    Column("projects", JSON, nullable=True),
    Index("ix_api_tokens_digest", "digest", unique=True),
)

# The audit log (tickwork.shared.store.audit): one row per change asked of the API or the
# UI (and per retention pass), refused ones too; nothing updates or deletes a row but
# retention, after TICKWORK_AUDIT_RETENTION.
audit_events = Table(
    "audit_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", Timestamp, nullable=False),
    Column("actor", String(80), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(512), nullable=False),
    Column("project", String(255), nullable=True),
    Column("params", JSON, nullable=False),
    Column("client_address", String(64), nullable=True),
    Column("user_agent", String(256), nullable=True),
    Column("status", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Index("ix_audit_events_at", "at"),
    Index("ix_audit_events_actor_id", "actor", "id"),
    Index("ix_audit_events_project_id", "project", "id"),
)

# Notification rules (tickwork.shared.store.notifications): a project's notifications.yml,
# stored when it is pushed, replaced by the next push.
notification_rules = Table(
    "notification_rules",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("name", String(64), nullable=False),
    Column("config", JSON, nullable=False),  # NotificationRule.to_config()
    Column("updated_at", Timestamp, nullable=False),
    UniqueConstraint("project_id", "name", name="uq_notification_rules_project_id_name"),
)

# One row per rule and event (unique): written with the event in one transaction, sent at
# least once by the one executor that claims it, its outcome kept for the UI and CLI.
notification_deliveries = Table(
    "notification_deliveries",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, nullable=False),
    Column("rule_name", String(64), nullable=False),
    Column("event", String(32), nullable=False),
    Column("event_key", String(128), nullable=False),  # e.g. failed:<attempt id>
    Column("workflow_name", String(255), nullable=True),
    Column("attempt_id", Id, nullable=True),
    Column("payload", JSON, nullable=False),  # what the event says (never a secret)
    Column("target", JSON, nullable=False),  # the rule's target when the event happened
    Column("state", String(16), nullable=False),  # pending, sending, sent, failed
    Column("tries", Integer, nullable=False),
    Column("next_try_at", Timestamp, nullable=False),
    Column("claimed_until", Timestamp, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("possible_duplicate", Boolean, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    Column("sent_at", Timestamp, nullable=True),
    UniqueConstraint(
        "project_id", "rule_name", "event_key", name="uq_notification_deliveries_event"
    ),
    Index("ix_notification_deliveries_state_next", "state", "next_try_at"),
    Index("ix_notification_deliveries_project_id", "project_id", "id"),
)

# Triggers (tickwork.shared.store.triggers): each workflow's `trigger:`, one row per
# upstream workflow or webhook, replaced by the next push; paused like schedules.
# Named numbers of slots every project shares: a task with `_pool: NAME` is in flight
# (QUEUED or RUNNING) only while its pool has a slot for it.
pools = Table(
    "pools",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("slots", Integer, nullable=False),
    Column("description", Text),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
)

triggers = Table(
    "triggers",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("project_id", Id, ForeignKey("projects.id"), nullable=False),
    Column("workflow_name", String(255), nullable=False),
    Column("key", String(400), nullable=False),  # after:PROJECT/WORKFLOW or webhook:NAME
    Column("kind", String(16), nullable=False),  # after, webhook
    Column("upstream_project", String(128), nullable=True),
    Column("upstream_workflow", String(255), nullable=True),
    Column("hook_name", String(64), nullable=True),
    Column("config", JSON, nullable=False),
    Column("paused_at", Timestamp, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("fired_count", Integer, nullable=False),
    Column("last_fired_at", Timestamp, nullable=True),
    Column("last_attempt_id", Id, nullable=True),
    Column("last_error", Text, nullable=True),
    UniqueConstraint(
        "project_id", "workflow_name", "key", name="uq_triggers_project_id_workflow_name_key"
    ),
    Index("ix_triggers_upstream", "upstream_project", "upstream_workflow"),
)

# One row per trigger and event (an upstream session, a webhook delivery): the unique key
# that makes a trigger fire once whatever crashes, retries or executors.
trigger_firings = Table(
    "trigger_firings",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("trigger_id", Id, nullable=False),
    Column("event_key", String(200), nullable=False),
    Column("attempt_id", Id, nullable=True),
    Column("session_id", Id, nullable=True),
    Column("fired_at", Timestamp, nullable=False),
    UniqueConstraint("trigger_id", "event_key", name="uq_trigger_firings_event"),
)
