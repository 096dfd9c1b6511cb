"""``pg>``: runs the SQL of a template file against the user's PostgreSQL, as Digdag's pg> does.

The command names a file of the task's directory whose text is a template (``${...}`` takes
the task's params). Connection settings come from the secrets ``pg.host``, ``pg.port``,
``pg.user``, ``pg.password``, ``pg.database``, ``pg.ssl``, ``pg.connect_timeout``,
``pg.socket_timeout`` and ``pg.schema`` first, as in Digdag, then from the task's params or
the ``pg:`` mapping of its params. ``password_override: NAME`` takes the password from the
secret ``pg.NAME`` instead (one project, several credentials). ``socket_timeout`` (a
duration) cancels a statement the server works on longer than that and drops a connection
whose data goes unacknowledged as long (JDBC's socket timeout in Digdag); without it
nothing is cut but the task's ``_timeout``. What the query does depends on its options:

* ``create_table: NAME``: ``DROP TABLE IF EXISTS`` then ``CREATE TABLE NAME AS`` the query;
* ``insert_into: NAME``: ``INSERT INTO NAME`` the query's rows;
* ``download_file: FILE``: the rows as CSV in a file of the task's directory (read-only);
* ``store_last_results: first|all``: the first row or every row as ``${pg.last_results}``
  (read-only);
* none of them: the file runs as a script in one transaction; a script that only reads
  runs in a read-only transaction and leaves nothing behind.

Except in the read-only modes, ``strict_transaction`` (true by default) makes a re-run of
the same task apply its statement once only: a row of the status table
(``__tickwork_status`` unless ``status_table`` says otherwise) is locked in the statement's
own transaction and marked done when it commits.
"""

from __future__ import annotations

import datetime
import decimal
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tickwork.services.agent.operators.base import OperatorContext, OperatorFailed
from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.domain.expressions import render
from tickwork.shared.errors import TickworkError

DEFAULT_PORT = 5432
DEFAULT_CONNECT_TIMEOUT_SECONDS = 30
DEFAULT_STATUS_TABLE = "__tickwork_status"
DEFAULT_STATUS_CLEANUP_SECONDS = 24 * 3600
MAX_RESULT_ROWS = 8192
MAX_RESULT_COLUMNS = 64
MAX_RESULT_VALUE_CHARS = 256
LOCK_RETRY_FIRST_SECONDS = 1.0
LOCK_RETRY_MAX_SECONDS = 30.0
STORE_LAST_RESULTS = ("false", "first", "all")
MODIFIERS = ("create_table", "insert_into", "download_file")
QUERY_NAMESPACE = uuid.UUID("6f1c1a52-2b51-4d8e-9a55-8f0f5a1c6d21")
READ_ONLY_VIOLATION = "25006"
LOCK_NOT_AVAILABLE = "55P03"
UNIQUE_VIOLATION = "23505"


@dataclass(frozen=True)
class PgOptions:
    """What one ``pg>`` task asks for, read from its params."""

    create_table: str | None
    insert_into: str | None
    download_file: str | None
    store_last_results: str  # "false", "first" or "all"
    strict_transaction: bool
    status_table: str
    status_table_schema: str | None
    status_table_cleanup_seconds: int

    @property
    def read_only(self) -> bool:
        """Whether the query only reads: its rows go to a file or to the stored params."""
        return self.download_file is not None or self.store_last_results != "false"


def run_pg(context: OperatorContext) -> dict[str, Any]:
    """Run the task's query; a statement the server refuses fails the task with its message."""
    params = merged_params(context.message.params)
    options = read_options(params)
    query = _query(context, params)
    settings = connection_settings(params, context.secrets)
    with _connect(context, settings) as conn:
        if options.read_only:
            return _read(context, conn, query, options)
        statement = modified_statement(query, options)
        query_id = _query_id(context)
        plain = options.create_table is None and options.insert_into is None
        if plain and _only_reads(conn, statement):
            context.write_log(f"pg>: ran {context.message.command} (it only reads)\n")
            return {}
        if options.strict_transaction:
            applied = _strict(
                conn,
                options,
                str(query_id),
                lambda: _execute(conn, statement),
                context.write_log,
            )
        else:
            with _database_errors("the query failed"), conn.transaction():
                _execute(conn, statement)
            applied = True
    if applied:
        context.write_log(f"pg>: ran {context.message.command}\n")
    else:
        context.write_log("pg>: already applied by an earlier run of this task; skipped\n")
    return {}


def _query_id(context: OperatorContext) -> uuid.UUID:
    """The same for every run of one task of one attempt, and for nothing else: the random
    session UUID keeps apart the tasks of two stores that share one user database."""
    message = context.message
    session = message.params.get("session_uuid", "")
    return uuid.uuid5(QUERY_NAMESPACE, f"{session}/{message.attempt_id}/{message.task_id}")


def merged_params(params: dict[str, Any]) -> dict[str, Any]:
    """The task's params over its ``pg:`` mapping (Digdag merges them the same way)."""
    nested = params.get("pg")
    base = dict(nested) if isinstance(nested, dict) else {}
    return base | {key: value for key, value in params.items() if key != "pg"}


def read_options(params: dict[str, Any]) -> PgOptions:
    """The options of a task, checked again at run time (``${...}`` may have given them)."""
    given = [key for key in MODIFIERS if params.get(key) is not None]
    store = str(params.get("store_last_results", "false")).lower()
    if store not in STORE_LAST_RESULTS:
        raise OperatorFailed(f"'pg>' store_last_results must be false, first or all, got {store!r}")
    if store != "false":
        given.append("store_last_results")
    if len(given) > 1:
        raise OperatorFailed(f"'pg>' can't use {' and '.join(given)} together")
    try:
        cleanup = parse_duration(params.get("status_table_cleanup", DEFAULT_STATUS_CLEANUP_SECONDS))
    except BadDuration as exc:
        raise OperatorFailed(f"'pg>' status_table_cleanup: {exc}") from None
    schema = params.get("status_table_schema", params.get("schema"))
    return PgOptions(
        create_table=_optional_text(params, "create_table"),
        insert_into=_optional_text(params, "insert_into"),
        download_file=_optional_text(params, "download_file"),
        store_last_results=store,
        strict_transaction=_flag(params.get("strict_transaction", True), "strict_transaction"),
        status_table=str(params.get("status_table") or DEFAULT_STATUS_TABLE),
        status_table_schema=None if schema is None else str(schema),
        status_table_cleanup_seconds=cleanup,
    )


def connection_settings(params: dict[str, Any], secrets: dict[str, str]) -> dict[str, Any]:
    """psycopg's connection arguments: secrets ``pg.*`` win over params, as in Digdag."""

    def setting(key: str) -> Any:
        secret = secrets.get(f"pg.{key}")
        return secret if secret not in (None, "") else params.get(key)

    user, database = setting("user"), setting("database")
    if not database:
        raise OperatorFailed("'pg>' needs a database (the param database or the secret)")
    if not user:
        raise OperatorFailed("'pg>' needs a user (the param user or the secret pg.user)")
    try:
        port = int(setting("port") or DEFAULT_PORT)
        timeout = parse_duration(
            setting("connect_timeout") or DEFAULT_CONNECT_TIMEOUT_SECONDS, minimum=1
        )
    except (TypeError, ValueError, BadDuration) as exc:
        raise OperatorFailed(f"'pg>' port or connect_timeout: {exc}") from None
    settings: dict[str, Any] = {
        "host": str(setting("host") or "localhost"),
        "port": port,
        "user": str(user),
        "dbname": str(database),
        "connect_timeout": timeout,
        "sslmode": "require" if _flag(setting("ssl") or False, "ssl") else "disable",
        "application_name": "tickwork",
    }
    password = _password(params, secrets, setting("password"))
    if password not in (None, ""):
        settings["password"] = str(password)
    options = []
    schema = setting("schema")
    if schema:
        options.append(f"-c search_path={_search_path(str(schema))}")
    socket_timeout = setting("socket_timeout")
    if socket_timeout not in (None, ""):
        try:
            seconds = parse_duration(socket_timeout, minimum=1)
        except (TypeError, ValueError, BadDuration) as exc:
            raise OperatorFailed(f"'pg>' socket_timeout: {exc}") from None
        # A statement the server works on longer than this is cancelled there, and a
        # connection whose sent data stays unacknowledged that long is dropped.
        options.append(f"-c statement_timeout={int(seconds * 1000)}")
        settings["tcp_user_timeout"] = int(seconds * 1000)
    if options:
        settings["options"] = " ".join(options)
    return settings


def _password(params: dict[str, Any], secrets: dict[str, str], default: Any) -> Any:
    """The password: the secret ``pg.NAME`` that ``password_override: NAME`` names (it
    must be set), else ``default`` (the secret ``pg.password``, else the param)."""
    override = params.get("password_override")
    if override in (None, ""):
        return default
    name = f"pg.{override}"
    if name not in secrets:
        raise OperatorFailed(
            f"'pg>' password_override: the secret {name} is not set for this project "
            f"(tickwork secrets set PROJECT {name})"
        )
    return secrets[name]


def modified_statement(query: str, options: PgOptions) -> sql.Composable:
    """The statement to run: the query itself, or wrapped by create_table / insert_into."""
    body = sql.SQL(query)  # the user's own SQL, run as written
    if options.create_table is not None:
        table = table_identifier(options.create_table)
        return sql.SQL("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} AS\n{body}").format(
            table=table, body=body
        )
    if options.insert_into is not None:
        table = table_identifier(options.insert_into)
        return sql.SQL("INSERT INTO {table}\n{body}").format(table=table, body=body)
    return body


def table_identifier(name: str, schema: str | None = None) -> sql.Identifier:
    """``name`` (``table`` or ``schema.table``) quoted as an identifier."""
    parts = [part for part in name.split(".")]
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise OperatorFailed(f"'pg>' {name!r} is not a table name (table or schema.table)")
    if schema is not None and len(parts) == 1:
        parts.insert(0, schema)
    return sql.Identifier(*parts)


def csv_line(values: Sequence[Any]) -> str:
    """One line of Digdag's CSV: CRLF at its end, NULL as nothing, "" for an empty string,
    a value holding a comma, a quote or a line break quoted."""
    return ",".join(_csv_field(None if v is None else _text(v)) for v in values) + "\r\n"


def _csv_field(value: str | None) -> str:
    if value is None:
        return ""
    if value == "":
        return '""'
    if any(c in value for c in ',"\r\n'):
        return '"' + value.replace('"', '""').replace("\r\n", "\n").replace("\r", "\n") + '"'
    return value


def _query(context: OperatorContext, params: dict[str, Any]) -> str:
    name = context.message.command
    if not isinstance(name, str) or not name.strip():
        raise OperatorFailed("'pg>' needs a query file (pg>: queries/select.sql)")
    path = _task_file(context, name)
    if not path.is_file():
        raise OperatorFailed(f"'pg>' query file {name!r} does not exist")
    try:
        return str(render(path.read_text(encoding="utf-8"), params))
    except TickworkError as exc:
        raise OperatorFailed(f"'pg>' query file {name!r}: {exc}") from None
    except UnicodeDecodeError:
        raise OperatorFailed(f"'pg>' query file {name!r} is not UTF-8 text") from None


def _task_file(context: OperatorContext, name: str) -> Path:
    """A path of the task's directory; anything resolving outside it is refused."""
    root = context.project_dir.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root) or path == root:
        raise OperatorFailed(f"'pg>' file {name!r} is outside the task's directory")
    return path


@contextmanager
def _connect(context: OperatorContext, settings: dict[str, Any]) -> Iterator[psycopg.Connection]:
    where = f"{settings['user']}@{settings['host']}:{settings['port']}/{settings['dbname']}"
    try:
        conn = psycopg.connect(**settings)
    except psycopg.Error as exc:
        raise OperatorFailed(
            f"'pg>' could not connect to {where}: {_server_message(exc)}"
        ) from None
    # Killing the task or stopping the agent cancels the query running on the server.
    if not context.control.attach(conn.cancel_safe, lambda: False):
        conn.close()
        raise OperatorFailed(f"'pg>' stopped before its query ran: {context.control.reason}")
    try:
        with conn:
            yield conn
    finally:
        context.control.detach()


def _read(
    context: OperatorContext, conn: psycopg.Connection, query: str, options: PgOptions
) -> dict[str, Any]:
    conn.read_only = True
    try:
        with conn.transaction(), conn.cursor() as cursor:
            cursor.execute(query.encode())
            if cursor.description is None:
                raise OperatorFailed("'pg>' the query returned no rows to read (not a SELECT?)")
            columns = [column.name for column in cursor.description]
            if options.download_file is not None:
                _download(context, options.download_file, columns, cursor)
                return {}
            return {"pg": {"last_results": _last_results(columns, cursor, options)}}
    except psycopg.Error as exc:
        if exc.sqlstate == READ_ONLY_VIOLATION:
            what = "download_file" if options.download_file else "store_last_results"
            raise OperatorFailed(
                f"'pg>' the query must be read-only when {what} is set: {_server_message(exc)}"
            ) from None
        raise OperatorFailed(f"'pg>' the query failed: {_server_message(exc)}") from None


def _download(
    context: OperatorContext, name: str, columns: list[str], cursor: psycopg.Cursor[Any]
) -> None:
    path = _task_file(context, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write(csv_line(columns))
        for row in cursor:
            out.write(csv_line(row))
            rows += 1
    context.write_log(f"pg>: wrote {rows} row(s) to {name}\n")


def _last_results(
    columns: list[str], cursor: psycopg.Cursor[Any], options: PgOptions
) -> dict[str, Any] | list[dict[str, Any]]:
    if len(columns) > MAX_RESULT_COLUMNS:
        raise OperatorFailed(
            f"'pg>' the number of result columns exceeded the limit: {len(columns)} > "
            f"{MAX_RESULT_COLUMNS}"
        )
    if options.store_last_results == "first":
        row = cursor.fetchone()
        return {} if row is None else _result_row(columns, row)
    results: list[dict[str, Any]] = []
    for row in cursor:
        if len(results) == MAX_RESULT_ROWS:
            raise OperatorFailed(
                f"'pg>' the number of result rows exceeded the limit of {MAX_RESULT_ROWS}"
            )
        results.append(_result_row(columns, row))
    return results


def _result_row(columns: list[str], row: Sequence[Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for column, value in zip(columns, row, strict=True):
        stored = _stored_value(value)
        if isinstance(stored, str) and len(stored) > MAX_RESULT_VALUE_CHARS:
            raise OperatorFailed(
                f"'pg>' the size of result value exceeded the limit: {len(stored)} > "
                f"{MAX_RESULT_VALUE_CHARS}"
            )
        values[column] = stored
    return values


def _stored_value(value: Any) -> Any:
    """A result value as a param: numbers, booleans, text and JSON as they are, the rest as
    text (dates in ISO 8601)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict | list):
        return json.loads(json.dumps(value, default=_text))
    return _text(value)


def _text(value: Any) -> str:
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, dict | list):
        return json.dumps(value, default=_text)
    return str(value)


def _only_reads(conn: psycopg.Connection, statement: sql.Composable) -> bool:
    """Run a plain script in a read-only transaction: True if it ran so (a SELECT leaves
    nothing behind, not even a status row), False if it writes (nothing of it was kept)."""
    conn.read_only = True
    try:
        with conn.transaction():
            _execute(conn, statement)
    except psycopg.Error as exc:
        if exc.sqlstate != READ_ONLY_VIOLATION:
            raise OperatorFailed(f"'pg>' the query failed: {_server_message(exc)}") from None
        return False
    finally:
        conn.read_only = False
    return True


def _execute(conn: psycopg.Connection, statement: sql.Composable) -> None:
    # Without parameters psycopg sends the text as a simple query: several statements run.
    conn.execute(statement.as_string(conn).encode())


def _strict(
    conn: psycopg.Connection,
    options: PgOptions,
    query_id: str,
    action: Callable[[], None],
    log: Callable[[str], None],
) -> bool:
    """Run ``action`` once per ``query_id``: False if an earlier run already committed it."""
    table = table_identifier(options.status_table, options.status_table_schema)
    conn.autocommit = True
    with _database_errors(f"could not create the status table {options.status_table}"):
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (query_id text NOT NULL UNIQUE,"
                " created_at timestamptz NOT NULL, completed_at timestamptz)"
            ).format(table)
        )
    applied = _locked_transaction(conn, table, query_id, action)
    try:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE completed_at < now() - make_interval(secs => %s)").format(
                table
            ),
            (options.status_table_cleanup_seconds,),
        )
    except psycopg.Error as exc:
        # The statement committed: an old row left behind must not fail the task (Digdag
        # ignores this error too).
        log(f"pg>: old rows of the status table were not deleted: {_server_message(exc)}\n")
    return applied


def _locked_transaction(
    conn: psycopg.Connection, table: sql.Identifier, query_id: str, action: Callable[[], None]
) -> bool:
    """Lock the status row of ``query_id`` (inserting it first), then run ``action`` and
    mark the row done in the same transaction; skip it if the row is already done."""
    wait = LOCK_RETRY_FIRST_SECONDS
    while True:
        try:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL(
                        "SELECT completed_at FROM {} WHERE query_id = %s FOR UPDATE NOWAIT"
                    ).format(table),
                    (query_id,),
                ).fetchone()
                if row is None:
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (query_id, created_at) VALUES (%s, now())"
                            " ON CONFLICT (query_id) DO NOTHING"
                        ).format(table),
                        (query_id,),
                    )
                    continue  # committed: lock the row just inserted
                if row[0] is not None:
                    return False
                with _database_errors("the query failed"):
                    action()
                conn.execute(
                    sql.SQL("UPDATE {} SET completed_at = now() WHERE query_id = %s").format(table),
                    (query_id,),
                )
                return True
        except psycopg.errors.LockNotAvailable:
            # Another run of this same task holds the row: wait for it to end.
            time.sleep(wait)
            wait = min(wait * 2, LOCK_RETRY_MAX_SECONDS)
        except psycopg.Error as exc:
            raise OperatorFailed(f"'pg>' status table: {_server_message(exc)}") from None


@contextmanager
def _database_errors(what: str) -> Iterator[None]:
    """Turn a database error into the task's failure, with the server's message."""
    try:
        yield
    except psycopg.Error as exc:
        raise OperatorFailed(f"'pg>' {what}: {_server_message(exc)}") from None


def _server_message(exc: psycopg.Error) -> str:
    diag = exc.diag
    message = diag.message_primary or str(exc).strip()
    return f"{message} (SQLSTATE {exc.sqlstate})" if exc.sqlstate else message


def _optional_text(params: dict[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise OperatorFailed(f"'pg>' {key} must be a non-empty string, got {value!r}")
    return value


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise OperatorFailed(f"'pg>' {name} must be true or false, got {value!r}")


def _search_path(schema: str) -> str:
    if not schema.replace("_", "").isalnum():
        raise OperatorFailed(f"'pg>' schema {schema!r} is not a plain schema name")
    return schema
