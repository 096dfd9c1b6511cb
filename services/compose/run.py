"""``tickwork run`` and ``tickwork check``: run one workflow in this process, validate files.

User errors end with one line on stderr and exit status 2; a failed workflow exits 1
(services/cli/errors.py has the whole table).
"""

from __future__ import annotations

import signal
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tickwork.services.cli.errors import ExitCode
from tickwork.services.cli.errors import fail as _fail
from tickwork.services.cli.failures import failure_lines
from tickwork.services.cli.params import (
    PARAM_OPTION,
    PARAMS_FILE_OPTION,
    POOL_OPTION,
    build_params,
    parse_pools,
    parse_session_time,
)
from tickwork.services.cli.schedules import preview_lines
from tickwork.shared.clock import utc_now
from tickwork.shared.config import EMBEDDED_SETTINGS, EmbeddedConfig
from tickwork.shared.domain.entries import SESSION_KEYWORDS, session_time_named
from tickwork.shared.domain.notifications import RULES_FILE, NotificationRule
from tickwork.shared.domain.schedule import ScheduleSpec, written_timezone
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.dsl.notifications import read_rules_file
from tickwork.shared.dsl.parser import parse_workflow_file
from tickwork.shared.errors import InvalidInput, TickworkError
from tickwork.shared.logging import configure_logging

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from tickwork.services.compose.embedded import RunOutcome, RunRequest
    from tickwork.shared.store.tasks import TaskRow

# The embedded runtime (the store, the executor, the agent's runner) is imported by `run`
# itself: `check` and `run --help` need none of it.


def _settings_epilog() -> str:
    lines = [
        f"{s.name}: {s.doc}" + (f" (default {s.default})" if s.default else "")
        for s in EMBEDDED_SETTINGS
    ]
    return "\b\nEnvironment:\n" + "\n".join(f"  {line}" for line in lines)


@click.command(epilog=_settings_epilog())
@click.argument("workflow_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--project",
    "project",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Project directory (default: the workflow file's directory).",
)
@PARAM_OPTION
@PARAMS_FILE_OPTION
@click.option(
    "-t",
    "--session-time",
    "--session",
    "raw_session_time",
    metavar="TIME",
    help="Session time: now, hourly, daily (this hour, today, in the workflow's zone), last "
    "(the session run last here), or a time (default: now, truncated to the schedule if any).",
)
@click.option("-a", "--rerun", is_flag=True, help="Run every task, even those that succeeded.")
@click.option(
    "-s",
    "--start",
    "start_from",
    metavar="+TASK",
    help="Run this task and every task after it again, even if they succeeded before; "
    "what comes before is taken from the last run of the session.",
)
@click.option(
    "-g",
    "--goal",
    metavar="+TASK",
    help="Run this task and its subtasks (again, if they succeeded before) after what comes "
    "before it; skip the rest.",
)
@click.option(
    "-e",
    "--end",
    metavar="+TASK",
    help="Run what comes before this task; skip it and the rest.",
)
@click.option(
    "-d",
    "--dry-run",
    is_flag=True,
    help="Show the tasks in the order they would run, and run nothing.",
)
@click.option(
    "-E",
    "--show-params",
    is_flag=True,
    help="Show the params each task sees: with --dry-run before anything runs, else with "
    "each task's output.",
)
@click.option(
    "--max-task-threads",
    type=click.IntRange(min=1, max=1024),
    metavar="N",
    help="Tasks run at once (default: TICKWORK_MAX_TASK_THREADS, else 8).",
)
@POOL_OPTION
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary.")
@click.option(
    "--on-executor",
    is_flag=True,
    help="Leave the tasks to `tickwork executor` and its agents (TICKWORK_DATABASE_URL must "
    "name their PostgreSQL database) and follow the run until it ends.",
)
def run(
    workflow_file: Path,
    project: Path | None,
    raw_params: tuple[str, ...],
    params_file: Path | None,
    raw_session_time: str | None,
    rerun: bool,
    start_from: str | None,
    goal: str | None,
    end: str | None,
    dry_run: bool,
    show_params: bool,
    max_task_threads: int | None,
    raw_pools: tuple[str, ...],
    quiet: bool,
    on_executor: bool,
) -> None:
    """Run WORKFLOW_FILE in this process; running the same session again resumes it."""
    from tickwork.services.agent.operators.base import ResourceLimits
    from tickwork.services.compose.embedded import RunRequest, default_session_time

    config = _config()
    configure_logging(config.log_level)
    project_dir = (project or workflow_file.parent).resolve()
    path = workflow_file if workflow_file.is_absolute() else Path.cwd() / workflow_file
    if not path.exists() and project is not None:
        path = project_dir / workflow_file
    if not path.is_file():
        raise click.BadParameter(f"no such file: {workflow_file}", param_hint="'WORKFLOW_FILE'")
    if on_executor and not (config.database_url or "").startswith("postgres"):
        _fail(
            "error: --on-executor needs TICKWORK_DATABASE_URL to name the PostgreSQL "
            "database that `tickwork executor` uses"
        )
    if raw_pools and on_executor:
        raise click.UsageError(
            "--pool and --on-executor do not work together: the executor's pools are every "
            "project's; change them with `tickwork pools set`"
        )
    for first, second, given in (
        ("-E/--show-params", "--on-executor", show_params and on_executor),
        ("-a/--rerun", "-s/--start", rerun and start_from),
        ("-a/--rerun", "-g/--goal", rerun and goal),
        ("-s/--start", "-g/--goal", start_from and goal),
        ("-g/--goal", "-e/--end", goal and end),
    ):
        if given:
            raise click.UsageError(f"{first} and {second} do not work together (as in Digdag)")
    definition = _parse(path, project_dir)
    params = build_params(raw_params, params_file)
    pools = parse_pools(raw_pools)
    state_dir = config.state_dir or project_dir / ".tickwork"
    database_url = config.database_url or f"sqlite:///{state_dir / 'tickwork.db'}"
    session_time = (
        _session_time(raw_session_time, definition, project_dir, database_url)
        if raw_session_time
        else default_session_time(definition, utc_now())
    )
    if dry_run:
        from tickwork.services.compose.dry_run import dry_run_lines

        click.echo(f"session {session_time.isoformat()} (dry run: nothing runs)")
        for line in dry_run_lines(definition, session_time, params, show_params=show_params):
            click.echo(line)
        return
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"error: cannot use state directory {state_dir}: {exc.strerror or exc}")
    request = RunRequest(
        definition=definition,
        project_dir=project_dir,
        state_dir=state_dir,
        database_url=database_url,
        params=params,
        session_time=session_time,
        rerun=rerun,
        start_from=start_from,
        goal=goal,
        end=end,
        show_params=show_params,
        max_task_threads=max_task_threads or config.max_task_threads,
        task_timeout_seconds=config.task_timeout_seconds,
        limits=ResourceLimits(
            config.task_max_memory_mb, config.task_max_open_files, config.task_max_cpu_seconds
        ),
        max_tasks_per_attempt=config.max_tasks_per_attempt,
        pools=pools,
    )
    sys.exit(_run(request, quiet, on_executor))


def _session_time(
    raw: str, definition: WorkflowDefinition, project_dir: Path, database_url: str
) -> datetime:
    """The session ``-t raw`` names: a keyword (``last``: the session this project's
    workflow ran last in this store, else as Digdag: the schedule's last time, else today)
    or a time."""
    now = utc_now()
    keyword = raw.strip().lower()
    if keyword not in SESSION_KEYWORDS:
        return parse_session_time(raw, definition.timezone)
    if keyword != "last":
        return session_time_named(keyword, now, definition.timezone)
    last = _last_session_time(definition, project_dir, database_url)
    if last is not None:
        return last
    if definition.schedule is not None:
        from tickwork.services.compose.embedded import default_session_time

        return default_session_time(definition, now)
    return session_time_named("daily", now, definition.timezone)


def _last_session_time(
    definition: WorkflowDefinition, project_dir: Path, database_url: str
) -> datetime | None:
    from sqlalchemy import make_url

    from tickwork.services.compose.embedded import last_run_session_time
    from tickwork.shared.store.engine import read_only
    from tickwork.shared.store.migrate import open_migrated_store
    from tickwork.shared.store.urls import multi_host_url

    url = make_url(multi_host_url(database_url))
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").exists():
        return None  # nothing ran here yet: no store to make
    try:
        engine = open_migrated_store(database_url)
    except TickworkError as exc:
        _fail(f"error: {exc}", exc)
    try:
        with read_only(engine) as conn:
            return last_run_session_time(conn, project_dir, definition.name)
    except TickworkError as exc:
        _fail(f"error: {exc}", exc)
    finally:
        engine.dispose()  # the run opens the store again, as it does without -t last


def _config() -> EmbeddedConfig:
    try:
        return EmbeddedConfig.from_environment()
    except TickworkError as exc:
        _fail(f"error: {exc}")


def _parse(path: Path, project_dir: Path) -> WorkflowDefinition:
    """The workflow in ``path``; its warnings on stderr, one ``file:line: warning:`` line
    each; exit 2 naming every problem of an invalid one."""
    try:
        definition = parse_workflow_file(path, project_dir)
    except InvalidInput as exc:
        _fail(str(exc))
    for warning in definition.warnings:
        where = f"{warning.file}:{warning.line}" if warning.line else warning.file
        click.echo(f"{where}: warning: {warning.message}", err=True)
    return definition


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    # SystemExit unwinds the run, which kills the commands it started (they have their own
    # process groups, so the signal did not reach them).
    sys.exit(128 + signal.SIGTERM)


def _run(request: RunRequest, quiet: bool, on_executor: bool = False) -> int:
    from tickwork.services.compose.embedded import follow_on_executor, run_workflow
    from tickwork.services.compose.progress import make_display
    from tickwork.shared.store.migrate import open_migrated_store

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    display = make_display(quiet=quiet)
    try:
        try:
            engine = open_migrated_store(request.database_url)
            if on_executor:
                outcome = follow_on_executor(request, on_progress=display.refresh, engine=engine)
            else:
                outcome = run_workflow(
                    request,
                    on_progress=display.refresh,
                    on_event=display.on_event,
                    on_moves=display.on_moves,
                    engine=engine,
                )
        finally:
            display.close()  # before any message, and on SystemExit (SIGTERM) too
    except KeyboardInterrupt:
        if on_executor:
            click.echo("interrupted: the run goes on in the executor (`tickwork kill` ends it)")
            return ExitCode.INTERRUPTED
        click.echo(
            f"interrupted: to resume, run it again with {_session_option(request)}", err=True
        )
        return ExitCode.INTERRUPTED
    except TickworkError as exc:
        _fail(f"error: {exc}", exc)
    _print_summary(engine, request, outcome, on_executor)
    return ExitCode.OK if outcome.state is AttemptState.SUCCESS else ExitCode.FAILED


def _print_summary(
    engine: Engine, request: RunRequest, outcome: RunOutcome, on_executor: bool = False
) -> None:
    from tickwork.shared.store.engine import read_only
    from tickwork.shared.store.tasks import list_attempt_tasks

    with read_only(engine) as conn:
        rows = list_attempt_tasks(conn, outcome.attempt_id)
        failed = [r for r in rows if r.state is TaskState.ERROR and not r.is_group]
        tails = _log_tails(conn, outcome.attempt_id, {r.id for r in failed})
    resumed = {r.id for r in rows if (r.result or {}).get("resumed")}
    left_out = {r.id for r in rows if (r.result or {}).get("skipped")}  # --goal, --end
    # Name the outermost skipped tasks: a skipped group stands for its children.
    skipped = [
        r.full_name
        for r in rows
        if r.id in resumed - left_out and r.parent_id not in resumed - left_out
    ]
    not_run = [r.full_name for r in rows if r.id in left_out and r.parent_id not in left_out]
    ran = [r for r in rows if not r.is_group and r.id not in resumed]
    counts = Counter(r.state.value for r in ran)
    session = request.session_time.isoformat()
    click.echo(f"session {session}  attempt {outcome.attempt_id}: {outcome.state.value}")
    if counts:
        click.echo("  " + ", ".join(f"{state}: {n}" for state, n in sorted(counts.items())))
    else:
        click.echo("  no task ran")
    if skipped:
        click.echo(f"  skipped (succeeded before; --rerun runs them): {_some(skipped)}")
    if not_run:
        click.echo(f"  not run (--goal/--end): {_some(not_run)}")
    retried = [_retries(r) for r in rows if r.retry_count and r.id not in resumed]
    if retried:
        click.echo(f"  retried: {_some(retried)}")
    for row in failed:
        message = (row.error or {}).get("message", "")
        for line in failure_lines(row.full_name, message, tails.get(row.id, [])):
            click.echo(f"  {line}")
    click.echo(f"  logs: {_logs_hint(request, outcome.attempt_id, on_executor=on_executor)}")
    if outcome.state is not AttemptState.SUCCESS:
        click.echo(f"  to resume, run it again with {_session_option(request)}")


def _some(names: list[str]) -> str:
    """The first five of ``names``, and how many more there are."""
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return ", ".join(names[:5]) + more


def _retries(row: TaskRow) -> str:
    return f"{row.full_name} ({row.retry_count} {'retry' if row.retry_count == 1 else 'retries'})"


def _log_tails(conn: Connection, attempt_id: int, task_ids: set[int]) -> dict[int, list[str]]:
    """The last lines of the latest run's log of each of ``task_ids``, read as the API
    reads them for every failure report (services/api/reads/attempts.py)."""
    from tickwork.services.api.reads.attempts import latest_run, tail_lines
    from tickwork.shared.store import logs as log_store

    logs = log_store.list_run_logs(conn, attempt_id)
    return {task_id: tail_lines(conn, latest_run(logs, task_id)) for task_id in task_ids}


def _logs_hint(request: RunRequest, attempt_id: int, *, on_executor: bool) -> str:
    """Where the run's logs can be read: they are in its store."""
    if on_executor:
        return f"in the store; `tickwork log {attempt_id}` against its API"
    return (
        f"in {request.state_dir / 'tickwork.db'}; read them with `tickwork standalone "
        f"--state-dir {request.state_dir}` and `tickwork log {attempt_id}`"
    )


def _session_option(request: RunRequest) -> str:
    """The option that names this run's session, so a later run resumes it."""
    return f"-t {request.session_time.isoformat()}"


@click.command()
@click.argument(
    "workflow_files",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option("--project", type=click.Path(exists=True, file_okay=False, path_type=Path))
def check(workflow_files: tuple[Path, ...], project: Path | None) -> None:
    """Validate workflow files without running anything.

    A project's notifications.yml is checked too: named among the files, or found in the
    project's folder (``--project``, else each file's own)."""
    now = utc_now()
    rules_files = {p.resolve() for p in workflow_files if p.name == RULES_FILE}
    for path in workflow_files:
        found = (project or path.parent) / RULES_FILE
        if path.name != RULES_FILE and found.is_file():
            rules_files.add(found.resolve())
    for path in workflow_files:
        if path.name == RULES_FILE:
            continue
        definition = _parse(path, (project or path.parent).resolve())
        tasks = definition.root.count_tasks()
        click.echo(f"{path}: ok ({tasks} tasks, timezone {written_timezone(definition.timezone)})")
        if definition.schedule is not None:
            spec = ScheduleSpec.from_config(definition.schedule)
            click.echo(f"  schedule {spec.describe()} ({written_timezone(spec.timezone)})")
            lines = preview_lines(spec, now, 5)
            click.echo("  next session times:" if lines else "  no session time after now")
            for line in lines:
                click.echo(f"    {line}")
    for rules_path in sorted(rules_files):
        rules = _check_rules(rules_path)
        plural = "" if len(rules) == 1 else "s"
        click.echo(f"{rules_path.name}: ok ({len(rules)} notification rule{plural})")


def _check_rules(path: Path) -> list[NotificationRule]:
    """The rules of a notifications.yml, against its project's workflows; exit 2 naming
    every problem."""
    workflows = [p.stem for p in path.parent.glob("*.dig") if p.is_file()]
    try:
        return read_rules_file(path, workflows)
    except InvalidInput as exc:
        _fail(str(exc))
