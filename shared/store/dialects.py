"""Every SQL difference between PostgreSQL and SQLite, behind one small interface.

The store's query modules ask ``dialect_of(conn)`` for the component of the database
they talk to and call its methods (insert-or-ignore, skip-locked claims, NOTIFY, ...);
none of them compares dialect names. PostgreSQL serves the distributed services;
SQLite serves the embedded, one-process mode, where one writer at a time holds the file.
"""

from __future__ import annotations

import _socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from functools import lru_cache, partial
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    ColumnElement,
    Connection,
    Engine,
    Float,
    Insert,
    Integer,
    Row,
    Select,
    String,
    Table,
    TypeDecorator,
    and_,
    any_,
    bindparam,
    cast,
    column,
    create_engine,
    event,
    func,
    literal_column,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Dialect, ExceptionContext
from sqlalchemy.exc import InvalidatePoolError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.sql.visitors import InternalTraversal

from tickwork.shared.store.unnest import column_types, rows_select

READ_ONLY_OPTION = "tickwork_read_only"
"""The execution option of a connection that only reads (see :meth:`connect_for_reads`)."""

JsonSerializer = Callable[[Any], str]
JsonDeserializer = Callable[[str | bytes], Any]


RowFilter = Callable[[Any], ColumnElement[bool]]
"""A condition on the columns of rows about to be written (see ``upsert_rows``)."""


class StoreDialect(ABC):
    """What the store does differently on one kind of database."""

    name: ClassVar[str]
    """SQLAlchemy's name for the dialect."""
    serves_many_processes: ClassVar[bool]
    """Whether separate services share this database as a server: it has session advisory
    locks (executors sharing the partitions) and LISTEN/NOTIFY (wake-ups across processes)."""
    concurrent_writers: ClassVar[bool]
    """Whether two transactions can write at once (SQLite holds one writer at a time)."""
    chains_inserts: ClassVar[bool]
    """Whether one statement can insert rows read from bound arrays and insert more rows
    from those the first insert returned (data-modifying ``WITH`` and ``unnest``); an
    ``UPDATE`` there can likewise feed another."""
    alters_tables_in_place: ClassVar[bool]
    """Whether ``ALTER TABLE`` can add constraints and change columns; SQLite rebuilds
    the table instead (Alembic's batch mode)."""
    compresses_large_values: ClassVar[bool]
    """Whether the database compresses large values on its own (PostgreSQL's TOAST), which
    a column of data compressed already is told not to."""

    @abstractmethod
    def create_engine(
        self,
        url: URL,
        *,
        pool_size: int,
        max_overflow: int,
        json_serializer: JsonSerializer,
        json_deserializer: JsonDeserializer,
    ) -> Engine:
        """An engine for ``url``, set up the way the store expects this database."""

    @abstractmethod
    def connect_for_reads(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A connection that only reads, as cheap as this database allows."""

    @abstractmethod
    def connection_lost(self, conn: Connection) -> bool:
        """Whether the server closed ``conn`` while it was idle (restarted, failed over,
        ended its backend): what a pooled connection is checked for as it is taken, for
        a connection a loop keeps across its passes. Costs no round trip."""

    @abstractmethod
    def timestamp_param(self, value: datetime) -> datetime:
        """An aware UTC datetime as this database stores it."""

    @abstractmethod
    def insert_ignoring_conflicts(
        self, table: Table, *, index_elements: Sequence[str] | None = None
    ) -> Insert:
        """``INSERT INTO table ... ON CONFLICT DO NOTHING`` (on ``index_elements``, if given)."""

    @abstractmethod
    def upsert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        *,
        index_elements: Sequence[str],
        updated: Sequence[str],
        only_given: str | None = None,
        only_larger: str | None = None,
        only_if: RowFilter | None = None,
    ) -> None:
        """Insert non-empty ``rows`` (all with the same keys) at once; a row that conflicts
        on ``index_elements`` sets the ``updated`` columns of the row it met instead (with
        ``only_given``, only if its ``only_given`` value is not NULL; with ``only_larger``,
        only if its ``only_larger`` value is larger than the row's; else it leaves the row
        it met as it is). With ``only_if``, only the rows its condition (given the rows'
        columns) holds for are written: the others are left out, not an error."""

    @abstractmethod
    def insert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        returning: Sequence[ColumnElement[Any]],
        *,
        ignore_conflicts: bool,
    ) -> Sequence[Row[*tuple[Any, ...]]]:
        """Insert non-empty ``rows`` (all with the same keys) at once; the ``returning``
        columns of the rows inserted."""

    @abstractmethod
    def update_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        constant_values: Mapping[str, Any],
    ) -> None:
        """Update non-empty ``rows`` of ``table`` at once: each row names its ``id`` and the
        values of the other columns it sets; ``constant_values`` are set on every row."""

    @abstractmethod
    def in_ids(self, column: ColumnElement[Any], ids: Sequence[int]) -> ColumnElement[bool]:
        """``column IN (ids)`` for whole numbers ``ids``."""

    @abstractmethod
    def in_bound_ids(self, column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
        """``column IN`` the whole numbers of the list bound as ``name``, for a statement
        built once and run with lists of any length."""

    @abstractmethod
    def in_bound_pairs(
        self, columns: tuple[ColumnElement[Any], ColumnElement[Any]], name: str
    ) -> ColumnElement[bool]:
        """``(a, b) IN`` the pairs of whole numbers of the list bound as ``name``, as
        :meth:`in_bound_ids`."""

    @abstractmethod
    def in_selected_ids(self, column: ColumnElement[Any], ids: Select[Any]) -> ColumnElement[bool]:
        """``column IN`` the whole numbers ``ids`` (a one-column select) gives, gathered
        before ``column``'s table is read: its rows are then found by those ids (by its
        index, or in one pass over a table small enough), whatever the planner knows of
        the tables, never joined from a scan of the whole table."""

    @abstractmethod
    def json_list_in_order(
        self, value: ColumnElement[Any], order_by: Sequence[ColumnElement[Any]]
    ) -> ColumnElement[Any]:
        """An aggregate of the JSON ``value`` of each row into one JSON list, in the order
        of ``order_by`` (whole numbers); its value is read with :meth:`read_json_list`."""

    @abstractmethod
    def read_json_list(self, found: Any) -> list[Any]:
        """The values a :meth:`json_list_in_order` aggregate gathered, in its order (none
        when no row was aggregated)."""

    @abstractmethod
    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        """``query`` locking the rows it reads for this transaction, skipping rows another
        transaction holds."""

    @abstractmethod
    def database_now(self, conn: Connection) -> datetime | None:
        """The database server's clock, or None when the database has none of its own."""

    @abstractmethod
    def notify(self, conn: Connection, channel: str, payloads: Sequence[str] = ("",)) -> None:
        """Signal listeners of ``channel`` when this transaction commits, once per payload
        (the same payload twice in one transaction is one signal)."""

    @abstractmethod
    def advisory_transaction_lock(self, conn: Connection, key: int) -> None:
        """Wait for the lock named ``key``, held until this transaction ends."""

    @abstractmethod
    def try_advisory_lock(self, conn: Connection, key: int) -> bool:
        """Take the lock named ``key`` for ``conn``'s session if no other session holds it
        (without waiting); whether it is held now. :meth:`advisory_unlock` lets it go."""

    @abstractmethod
    def advisory_unlock(self, conn: Connection, key: int) -> None:
        """Let go of the lock :meth:`try_advisory_lock` took on ``conn``."""

    @abstractmethod
    def reclaim_space(self, conn: Connection) -> None:
        """Give the space of deleted rows back where the database does not on its own."""

    @abstractmethod
    def vacuum(self, engine: Engine) -> bool:
        """Rewrite the whole database to give every free page back, outside any
        transaction; whether this database needs that (PostgreSQL's autovacuum does not)."""

    @abstractmethod
    def checkpoint(self, engine: Engine) -> bool:
        """Copy the commits a write-ahead log holds into the database file, outside any
        transaction, without waiting for (or blocking) readers and writers; whether this
        database leaves that to its clients (PostgreSQL's own checkpointer does it)."""


class PostgresDialect(StoreDialect):
    """PostgreSQL through psycopg 3: the distributed services' database."""

    name = "postgresql"
    serves_many_processes = True
    compresses_large_values = True
    concurrent_writers = True
    chains_inserts = True
    alters_tables_in_place = True

    def create_engine(
        self,
        url: URL,
        *,
        pool_size: int,
        max_overflow: int,
        json_serializer: JsonSerializer,
        json_deserializer: JsonDeserializer,
    ) -> Engine:
        engine = create_engine(
            url,
            json_serializer=json_serializer,
            json_deserializer=json_deserializer,
            pool_size=pool_size,
            max_overflow=max_overflow,
            connect_args={"connect_timeout": 10},  # an unreachable server fails, not hangs
        )
        event.listen(engine, "connect", _use_utc)
        event.listen(engine, "checkout", partial(_refuse_lost_connection, engine.dialect))
        event.listen(engine, "handle_error", _drop_read_only_connections)
        return engine

    @contextmanager
    def connect_for_reads(self, engine: Engine) -> Iterator[Connection]:
        # Autocommit: at READ COMMITTED each statement takes its own snapshot inside a
        # transaction too, so BEGIN and ROLLBACK would only cost round trips.
        with engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    def connection_lost(self, conn: Connection) -> bool:
        raw = conn.connection.dbapi_connection
        return raw is None or bool(raw.closed) or _has_input(_socket_of(raw))

    def timestamp_param(self, value: datetime) -> datetime:
        return value

    def insert_ignoring_conflicts(
        self, table: Table, *, index_elements: Sequence[str] | None = None
    ) -> Insert:
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=index_elements)

    def upsert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        *,
        index_elements: Sequence[str],
        updated: Sequence[str],
        only_given: str | None = None,
        only_larger: str | None = None,
        only_if: RowFilter | None = None,
    ) -> None:
        # INSERT ... SELECT FROM unnest(...) ON CONFLICT DO UPDATE, one array per column:
        # one round trip, and one statement built once per table and columns.
        names = tuple(rows[0])
        statement = _postgres_upsert(
            table,
            names,
            tuple(index_elements),
            tuple(updated),
            (only_given, only_larger),
            only_if,
        )
        conn.execute(statement, {f"a_{name}": [row[name] for row in rows] for name in names})

    def insert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        returning: Sequence[ColumnElement[Any]],
        *,
        ignore_conflicts: bool,
    ) -> Sequence[Row[*tuple[Any, ...]]]:
        # INSERT ... SELECT FROM unnest(...): one array per column, whatever the row count.
        source = rows_select(rows, column_types(table)).subquery()
        insert = postgresql.insert(table).from_select(list(rows[0]), select(*source.c))
        if ignore_conflicts:
            insert = insert.on_conflict_do_nothing()
        return conn.execute(insert.returning(*returning)).all()

    def update_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        constant_values: Mapping[str, Any],
    ) -> None:
        # One UPDATE ... FROM unnest(...) instead of one UPDATE per row.
        source = rows_select(rows, column_types(table)).subquery()
        values = {name: source.c[name] for name in rows[0] if name != "id"}
        conn.execute(
            table.update().where(table.c.id == source.c.id).values(**values, **constant_values)
        )

    def in_ids(self, column: ColumnElement[Any], ids: Sequence[int]) -> ColumnElement[bool]:
        # The ids are written into the statement, not bound, so each run is planned for
        # its own ids. psycopg prepares a statement it has run five times, and PostgreSQL
        # may then switch it to a generic plan: for a join filtered on hundreds of unknown
        # ids that plan can be twenty times slower.
        array = "{" + ",".join(str(int(i)) for i in ids) + "}"
        return column == any_(literal_column(f"'{array}'::bigint[]"))

    def in_bound_ids(self, column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
        return column.in_(bindparam(name, expanding=True))

    def in_bound_pairs(
        self, columns: tuple[ColumnElement[Any], ColumnElement[Any]], name: str
    ) -> ColumnElement[bool]:
        return tuple_(*columns).in_(bindparam(name, expanding=True))

    def in_selected_ids(self, column: ColumnElement[Any], ids: Select[Any]) -> ColumnElement[bool]:
        # An array the statement makes first (an InitPlan or a SubPlan), which the rows
        # are matched against: a subquery IN lets the planner join from either side, and
        # on tables it had no statistics of yet (a new store) it joined from every task.
        (selected,) = ids.selected_columns
        listed = ids.with_only_columns(func.array_agg(selected)).scalar_subquery()
        return column == any_(cast(listed, postgresql.ARRAY(BigInteger)))

    def json_list_in_order(
        self, value: ColumnElement[Any], order_by: Sequence[ColumnElement[Any]]
    ) -> ColumnElement[Any]:
        ordered = postgresql.aggregate_order_by(value, *order_by)
        return func.json_agg(ordered, type_=postgresql.JSON)

    def read_json_list(self, found: Any) -> list[Any]:
        return list(found or ())

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        return query.with_for_update(skip_locked=True)

    def database_now(self, conn: Connection) -> datetime | None:
        found: datetime = conn.execute(select(func.statement_timestamp())).scalar_one()
        return found

    def notify(self, conn: Connection, channel: str, payloads: Sequence[str] = ("",)) -> None:
        if len(payloads) == 1:
            conn.execute(_NOTIFY, {"channel": channel, "payload": payloads[0]})
            return
        conn.execute(_NOTIFY_MANY, {"channel": channel, "payloads": list(payloads)})

    def advisory_transaction_lock(self, conn: Connection, key: int) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})

    def try_advisory_lock(self, conn: Connection, key: int) -> bool:
        taken = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        return bool(taken)

    def advisory_unlock(self, conn: Connection, key: int) -> None:
        conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})

    def reclaim_space(self, conn: Connection) -> None:
        pass  # autovacuum makes the space of deleted rows reusable

    def vacuum(self, engine: Engine) -> bool:
        return False

    def checkpoint(self, engine: Engine) -> bool:
        return False


class SqliteDialect(StoreDialect):
    """SQLite: the embedded mode's one file, written by one transaction at a time."""

    name = "sqlite"
    serves_many_processes = False
    compresses_large_values = False
    concurrent_writers = False
    chains_inserts = False
    alters_tables_in_place = False

    def create_engine(
        self,
        url: URL,
        *,
        pool_size: int,
        max_overflow: int,
        json_serializer: JsonSerializer,
        json_deserializer: JsonDeserializer,
    ) -> Engine:
        # No pool size or overflow: SQLAlchemy picks SQLite's own pool.
        engine = create_engine(
            url,
            json_serializer=json_serializer,
            json_deserializer=json_deserializer,
            connect_args={"check_same_thread": False, "timeout": 30},
        )
        event.listen(engine, "connect", _configure_sqlite)
        event.listen(engine, "begin", _begin_immediate)
        return engine

    @contextmanager
    def connect_for_reads(self, engine: Engine) -> Iterator[Connection]:
        # In WAL mode a reader needs no lock at all: it never waits for (or blocks) a writer.
        with engine.connect() as conn:
            yield conn.execution_options(**{READ_ONLY_OPTION: True})

    def connection_lost(self, conn: Connection) -> bool:
        return False  # a file: nothing closes it but this process

    def timestamp_param(self, value: datetime) -> datetime:
        return value.replace(tzinfo=None)  # stored naive; read back as UTC

    def insert_ignoring_conflicts(
        self, table: Table, *, index_elements: Sequence[str] | None = None
    ) -> Insert:
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=index_elements)

    def upsert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        *,
        index_elements: Sequence[str],
        updated: Sequence[str],
        only_given: str | None = None,
        only_larger: str | None = None,
        only_if: RowFilter | None = None,
    ) -> None:
        names = tuple(rows[0]) if only_if is not None else ()
        statement = _sqlite_upsert(
            table,
            tuple(index_elements),
            tuple(updated),
            (only_given, only_larger),
            (names, only_if),
        )
        # One row (a chain's chunk) goes the plain way: executemany costs more for it.
        conn.execute(statement, rows[0] if len(rows) == 1 else list(rows))

    def insert_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        returning: Sequence[ColumnElement[Any]],
        *,
        ignore_conflicts: bool,
    ) -> Sequence[Row[*tuple[Any, ...]]]:
        statement = sqlite.insert(table)
        if ignore_conflicts:
            statement = statement.on_conflict_do_nothing()
        return conn.execute(statement.returning(*returning), list(rows)).all()

    def update_rows(
        self,
        conn: Connection,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        constant_values: Mapping[str, Any],
    ) -> None:
        # One statement run for many parameter sets; the b_ prefix keeps the bound names
        # apart from the columns' own.
        values: dict[str, Any] = {name: bindparam(f"b_{name}") for name in rows[0] if name != "id"}
        statement = (
            table.update()
            .where(table.c.id == bindparam("b_id"))
            .values(**values, **constant_values)
        )
        conn.execute(statement, [{f"b_{key}": value for key, value in row.items()} for row in rows])

    def in_ids(self, column: ColumnElement[Any], ids: Sequence[int]) -> ColumnElement[bool]:
        return column.in_(list(ids))

    # The list goes in as one JSON array, read with json_each: the statement's text stays
    # the same whatever the list's length, where an expanding IN would have SQLAlchemy
    # rewrite it on every run (a tenth of a millisecond for a chain's hop).
    def in_bound_ids(self, column: ColumnElement[Any], name: str) -> ColumnElement[bool]:
        bound = func.json_each(bindparam(name, type_=_JsonNumbers())).table_valued("value")
        return column.in_(select(bound.c.value))

    def in_bound_pairs(
        self, columns: tuple[ColumnElement[Any], ColumnElement[Any]], name: str
    ) -> ColumnElement[bool]:
        bound = func.json_each(bindparam(name, type_=_JsonNumbers())).table_valued("value")
        first = func.json_extract(bound.c.value, fixed("$[0]"))
        second = func.json_extract(bound.c.value, fixed("$[1]"))
        return tuple_(*columns).in_(select(first, second))

    def in_selected_ids(self, column: ColumnElement[Any], ids: Select[Any]) -> ColumnElement[bool]:
        return column.in_(ids)

    def json_list_in_order(
        self, value: ColumnElement[Any], order_by: Sequence[ColumnElement[Any]]
    ) -> ColumnElement[Any]:
        # SQLite 3.40 takes no ORDER BY in an aggregate: each value goes with its keys,
        # and read_json_list sorts by them.
        return func.json_group_array(func.json_array(*order_by, func.json(value)), type_=JSON)

    def read_json_list(self, found: Any) -> list[Any]:
        return [item[-1] for item in sorted(found or (), key=lambda item: item[:-1])]

    def skip_locked(self, query: Select[Any]) -> Select[Any]:
        return query  # a writer holds the whole file (BEGIN IMMEDIATE): nothing to skip

    def database_now(self, conn: Connection) -> datetime | None:
        return None  # the file has no clock: the one process's is the only one

    def notify(self, conn: Connection, channel: str, payloads: Sequence[str] = ("",)) -> None:
        pass  # the embedded executor and log followers poll

    def advisory_transaction_lock(self, conn: Connection, key: int) -> None:
        pass  # a writing transaction already holds the whole file

    def try_advisory_lock(self, conn: Connection, key: int) -> bool:
        return True  # one process uses the file: nobody else can hold it

    def advisory_unlock(self, conn: Connection, key: int) -> None:
        pass

    def reclaim_space(self, conn: Connection) -> None:
        # Frees the pages deleted rows left, on a file made with auto_vacuum=INCREMENTAL
        # (every new store); a no-op on an older file (`tickwork db prune --vacuum`).
        # Each step of the statement frees pages: it runs until it is done.
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("PRAGMA incremental_vacuum").fetchall()
        cursor.close()

    def vacuum(self, engine: Engine) -> bool:
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            raw.execute("VACUUM")  # outside SQLAlchemy's transaction: VACUUM cannot run in one
        return True

    def checkpoint(self, engine: Engine) -> bool:
        # PASSIVE: copies what no reader still needs, takes no lock a writer waits for.
        # Outside SQLAlchemy's transaction, whose BEGIN IMMEDIATE would take the write lock.
        with engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        return True


_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
_NOTIFY_MANY = text("SELECT pg_notify(:channel, p) FROM unnest(CAST(:payloads AS text[])) AS p")


def postgres_upsert(
    table: Table,
    names: tuple[str, ...],
    *,
    index_elements: tuple[str, ...],
    updated: tuple[str, ...],
    only_larger: str | None = None,
    only_if: RowFilter | None = None,
) -> Insert:
    """The statement :meth:`PostgresDialect.upsert_rows` runs for rows with the columns
    ``names`` (in that order), built once: for a statement that writes such rows as one of
    its parts (a data-modifying ``WITH``). Its parameters are one array per column,
    ``a_<column>``."""
    return _postgres_upsert(table, names, index_elements, updated, (None, only_larger), only_if)


@lru_cache(maxsize=16)
def _postgres_upsert(
    table: Table,
    names: tuple[str, ...],
    index_elements: tuple[str, ...],
    updated: tuple[str, ...],
    conditions: tuple[str | None, str | None],
    only_if: RowFilter | None = None,
) -> Insert:
    arrays = [bindparam(f"a_{name}", type_=postgresql.ARRAY(table.c[name].type)) for name in names]
    columns = [column(name, table.c[name].type) for name in names]
    source = func.unnest(*arrays).table_valued(*columns).render_derived()
    chosen = select(*source.c)
    if only_if is not None:
        chosen = chosen.where(only_if(source.c))
    only_given, only_larger = conditions
    return postgres_upsert_from(
        table, names, chosen, index_elements, updated, only_given, only_larger
    )


def postgres_upsert_from(
    table: Table,
    names: Sequence[str],
    source: Select[Any],
    index_elements: Sequence[str],
    updated: Sequence[str],
    only_given: str | None,
    only_larger: str | None = None,
) -> Insert:
    """The rows ``source`` selects (its columns ``names``) inserted into ``table``, on
    PostgreSQL; one meeting a row on ``index_elements`` sets its ``updated`` columns
    instead (with ``only_given``, only where its ``only_given`` value is not NULL; with
    ``only_larger``, only where its value is larger than the row's): what
    :meth:`StoreDialect.upsert_rows` does, from any ``SELECT``."""
    insert = postgresql.insert(table).from_select(list(names), source)
    return _on_conflict_update(insert, table, index_elements, updated, only_given, only_larger)


def _on_conflict_update(
    insert: Any,
    table: Table,
    index_elements: Sequence[str],
    updated: Sequence[str],
    only_given: str | None,
    only_larger: str | None,
) -> Insert:
    """``insert`` (either dialect's) setting ``updated`` on a conflict, under the
    conditions of :meth:`StoreDialect.upsert_rows`."""
    values = {name: insert.excluded[name] for name in updated}
    conditions = []
    if only_given is not None:
        conditions.append(insert.excluded[only_given].is_not(None))
    if only_larger is not None:
        conditions.append(insert.excluded[only_larger] > table.c[only_larger])
    where = and_(*conditions) if conditions else None
    upsert: Insert = insert.on_conflict_do_update(
        index_elements=index_elements, set_=values, where=where
    )
    return upsert


@lru_cache(maxsize=16)
def _sqlite_upsert(
    table: Table,
    index_elements: tuple[str, ...],
    updated: tuple[str, ...],
    conditions: tuple[str | None, str | None],
    filtered: tuple[tuple[str, ...], RowFilter | None],
) -> Insert:
    only_given, only_larger = conditions
    names, only_if = filtered
    insert = sqlite.insert(table)
    if only_if is not None:
        # One row's values as a SELECT, kept only where the condition holds; run once
        # per row (executemany). WHERE also keeps SQLite from reading ON CONFLICT as a
        # join's ON.
        row = select(*[bindparam(n, type_=table.c[n].type).label(n) for n in names]).subquery()
        insert = insert.from_select(list(names), select(*row.c).where(only_if(row.c)))
    return _on_conflict_update(insert, table, index_elements, updated, only_given, only_larger)


def _use_utc(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    """Have PostgreSQL send times in UTC, whatever the server's ``TimeZone``: psycopg then
    reads them with ``datetime.UTC``, which the store's timestamps keep as they are (no
    SQL of the store depends on the session's zone)."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'UTC'")
    dbapi_connection.commit()


READ_ONLY_SQLSTATES = frozenset({"25006"})
"""``read_only_sql_transaction``: the server is a standby now (its primary was switched)."""


def _drop_read_only_connections(context: ExceptionContext) -> None:
    """A statement refused as read-only went to a server that is no longer the primary (a
    demoted primary, or a standby a multi-host URL reached before the switch): the pool
    drops that connection and every other it holds, and new ones find the primary again
    (``target_session_attrs=read-write``)."""
    sqlstate = getattr(context.original_exception, "sqlstate", None)
    if sqlstate in READ_ONLY_SQLSTATES:
        context.is_disconnect = True
        context.invalidate_pool_on_disconnect = True


def _refuse_lost_connection(
    dialect: Dialect, dbapi_connection: Any, _record: Any, _proxy: Any
) -> None:
    """Refuse, at checkout, a pooled connection the server has closed (it restarted, or
    ended the backend): the pool then drops every connection older than this moment and
    hands out a new one, as a pre-ping would.

    An idle connection's server sends nothing unasked, so its socket is looked at without
    waiting: nothing to read (the usual case) is a live connection, with no ``SELECT 1``
    round trip; the end of the stream is a closed one; anything else (a shutdown's error
    message, a notice) is settled by the ping itself.
    """
    if not dbapi_connection.closed and not _has_input(_socket_of(dbapi_connection)):
        return
    try:
        dialect.do_ping(dbapi_connection)
    except Exception as exc:  # whatever the ping met, the connection cannot be used
        raise InvalidatePoolError(f"the server ended the connection: {exc}") from None


def _socket_of(dbapi_connection: Any) -> int | None:
    """The descriptor of a psycopg connection's socket; None when it has none any more."""
    try:
        fd: int = dbapi_connection.pgconn.socket
    except Exception:  # psycopg's OperationalError: libpq holds no socket
        return None
    return fd


def _has_input(fd: int | None) -> bool:
    """Whether the socket ``fd`` has bytes to read or has ended (peeked, not consumed);
    True for no socket at all."""
    if fd is None:
        return True
    probe = _socket.socket(fileno=fd)  # the unpatched socket module: never a green wait
    try:
        probe.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        probe.detach()  # the descriptor stays libpq's
    return True


class _JsonNumbers(TypeDecorator[Sequence[Any]]):
    """A list of whole numbers, or of pairs of them, bound as the text of a JSON array
    (written here: ``json.dumps`` costs more for so simple a value)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Sequence[Any] | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        items = (
            f"[{int(item[0])},{int(item[1])}]" if isinstance(item, tuple | list) else str(int(item))
            for item in value
        )
        return "[" + ",".join(items) + "]"


def fixed(value: str | float) -> ColumnElement[Any]:
    """``value``, a state, key or number the code itself names, written into a statement's
    text instead of bound: SQLAlchemy processes every bound value on every execution
    (ending a run on SQLite took a tenth longer with its eight fixed values bound)."""
    if isinstance(value, str):
        return literal_column("'" + value.replace("'", "''") + "'", String)
    if isinstance(value, int):
        return literal_column(str(int(value)), Integer)
    return literal_column(repr(float(value)), Float)


class TableQualified(ColumnElement[Any]):
    """An expression whose columns are written with their tables' names wherever it is:
    SQLAlchemy writes a RETURNING clause for SQLite without them, subqueries included,
    where a subquery's ``id`` would then be read as its own table's."""

    inherit_cache = True
    _traverse_internals = [("element", InternalTraversal.dp_clauseelement)]

    def __init__(self, element: ColumnElement[Any]) -> None:
        self.element = element
        self.type = element.type


@compiles(TableQualified)
def _compile_table_qualified(element: TableQualified, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.element, **{**kw, "include_table": True}))


def _configure_sqlite(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # Before anything else: it only takes on a file that has no table yet (a new store),
    # and lets retention give pages back with `PRAGMA incremental_vacuum`.
    cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA cache_size=-65536")  # 64 MiB: the task table stays in memory
    cursor.execute("PRAGMA temp_store=MEMORY")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    # Writers take the write lock at BEGIN, so two of them queue on busy_timeout instead of
    # failing with "database is locked" when a read transaction tries to upgrade. Readers
    # (see connect_for_reads) need no lock at all in WAL mode.
    if connection.get_execution_options().get(READ_ONLY_OPTION):
        connection.exec_driver_sql("BEGIN")
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


# One component per dialect name, made once.
_DIALECTS: dict[str, StoreDialect] = {d.name: d for d in (PostgresDialect(), SqliteDialect())}


def dialect_named(name: str) -> StoreDialect:
    """The component of SQLAlchemy's dialect ``name``; ValueError for another database."""
    try:
        return _DIALECTS[name]
    except KeyError:
        raise ValueError(f"the store does not run on {name!r}") from None


def dialect_of(bind: Connection | Engine | Dialect) -> StoreDialect:
    """The component of the database ``bind`` (a connection, an engine or their dialect)."""
    sqlalchemy_dialect = bind if isinstance(bind, Dialect) else bind.dialect
    return dialect_named(sqlalchemy_dialect.name)
