"""The ``tickwork`` command: a root group whose subcommands are imported on demand.

Each command group lives in a module of its own: the client commands in services/cli/ (they
ask the API only), the services in their packages, and what runs them or works on their
database here (run and check, standalone, dev, the servers, ``db``). ``tickwork --help``
lists them from the table below without importing any, so a client command starts fast.
How an error becomes an exit status is decided in one place, :mod:`tickwork.services.cli.errors`.
"""

from __future__ import annotations

import click

from tickwork.services.cli.errors import ErrorMappingGroup
from tickwork.services.cli.lazy import lazy_commands

COMMANDS = lazy_commands(
    [
        # Embedded runs and validation.
        (
            "run",
            "tickwork.services.compose.run:run",
            "Run WORKFLOW_FILE in this process; running the same session again resumes it.",
        ),
        (
            "check",
            "tickwork.services.compose.run:check",
            "Validate workflow files without running anything.",
        ),
        (
            "init",
            "tickwork.services.compose.init:init_command",
            "Make a new project in DIRECTORY: a workflow named after it, a README, a .gitignore.",
        ),
        # The services, each in its own process.
        (
            "api",
            "tickwork.services.api.command:api_command",
            "Serve the REST API (docs at /api/docs) until SIGTERM.",
        ),
        (
            "scheduler",
            "tickwork.services.compose.serve:scheduler_command",
            "Run the scheduler: emit one session per scheduled time until SIGTERM.",
        ),
        (
            "executor",
            "tickwork.services.compose.serve:executor_command",
            "Run the executor: start attempts, dispatch their tasks to agents, apply results.",
        ),
        (
            "agent",
            "tickwork.services.compose.serve:agent_command",
            "Run an agent: a Celery worker that runs tasks under leases. It needs Redis only.",
        ),
        (
            "standalone",
            "tickwork.services.compose.standalone:standalone_command",
            "Run the API, the scheduler, the executor and agents in this process until SIGTERM.",
        ),
        # The API's resources: client commands, which ask the API only (tests/test_cli_imports.py
        # and the client import contract hold them to it).
        (
            "push",
            "tickwork.services.cli.projects:push_command",
            "Upload DIRECTORY's workflows as a new revision of a project (created if needed).",
        ),
        (
            "download",
            "tickwork.services.cli.projects:download_command",
            "Download the files of PROJECT's latest (or a given) revision, as pushed.",
        ),
        (
            "delete",
            "tickwork.services.cli.projects:delete_command",
            "Delete PROJECT: its schedules stop; its sessions, attempts and revisions stay.",
        ),
        (
            "workflows",
            "tickwork.services.cli.projects:workflows_command",
            "List the workflows of every project's latest revision (or of PROJECT's); with "
            "WORKFLOW, print its definition.",
        ),
        (
            "start",
            "tickwork.services.cli.sessions:start_command",
            "Start a session of WORKFLOW by hand; the same session twice is a conflict (exit 4).",
        ),
        (
            "sessions",
            "tickwork.services.cli.sessions:sessions_command",
            "List sessions, newest first, each with its last attempt; or show the session whose "
            "id is the one number given (tickwork sessions 42).",
        ),
        (
            "attempts",
            "tickwork.services.cli.sessions:attempts_command",
            "List attempts, newest first (of one session with --session).",
        ),
        ("attempt", "tickwork.services.cli.sessions:attempt_command", "Show one attempt."),
        (
            "retry",
            "tickwork.services.cli.sessions:retry_command",
            "Start a new attempt of the session of attempt ID.",
        ),
        (
            "kill",
            "tickwork.services.cli.sessions:kill_command",
            "Kill an attempt: queued tasks are revoked, running ones stopped, and it ends killed.",
        ),
        ("tasks", "tickwork.services.cli.tasks:tasks_command", "Show the task tree of an attempt."),
        (
            "log",
            "tickwork.services.cli.logs:log_command",
            "Print the log of an attempt (of the tasks under +TASK only, if given).",
        ),
        (
            "schedules",
            "tickwork.services.cli.schedules:schedules_group",
            "List schedules (the default), preview times, and pause, resume or skip a schedule.",
        ),
        (
            "backfill",
            "tickwork.services.cli.schedules:backfill_command",
            "Create sessions for every scheduled time in a range; existing ones are kept.",
        ),
        (
            "secrets",
            "tickwork.services.cli.secrets:secrets_group",
            "Set, list and delete a project's secrets (values are never shown).",
        ),
        (
            "tokens",
            "tickwork.services.cli.tokens:tokens_group",
            "Create, list and revoke named API tokens (an admin token's work).",
        ),
        (
            "triggers",
            "tickwork.services.cli.triggers:triggers_group",
            "List the triggers (another workflow's success, a webhook); show, pause, resume one.",
        ),
        (
            "pools",
            "tickwork.services.cli.pools:pools_group",
            "List the pools tasks share (slots, used, waiting); set or delete one.",
        ),
        (
            "notifications",
            "tickwork.services.cli.notifications:notifications_group",
            "List what the notification rules sent, newest first; test a rule.",
        ),
        (
            "audit",
            "tickwork.services.cli.tokens:audit_command",
            "List the audit log, newest first: who changed what, from where, and the outcome.",
        ),
        (
            "whoami",
            "tickwork.services.cli.tokens:whoami_command",
            "Show the name, role and projects of the token this command sends.",
        ),
        # Operating a deployment (what works on the database itself) and developing tickwork.
        ("db", "tickwork.services.compose.db:db_group", "Database schema commands."),
        (
            "dev",
            "tickwork.services.compose.dev:dev_command",
            "Run the API, the scheduler, the executor and agents as local processes until Ctrl-C.",
        ),
    ]
)


@click.group(
    cls=ErrorMappingGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="tickwork")
def main() -> None:
    """tickwork: workflows of tasks, run once per scheduled time."""


__all__ = ["COMMANDS", "main"]
