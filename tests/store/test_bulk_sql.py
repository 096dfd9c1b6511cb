"""Specifications of the bulk SQL helpers (shared/store/sql.py) on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import BigInteger, Engine, String, select

from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.sql import in_ids, insert_rows, rows_select, update_rows
from tickwork.shared.store.tables import projects

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

AWKWARD_WORDS = [
    "plain",
    "two words",
    'a "quote"',
    "back\\slash",
    "comma,inside",
    "{braces}",
    "null",
    "NULL",
    "nullish",
    "",
    "ünïcode",
    "\u00a0no-break space",
    "tab\there",
]


class TestRowsSelect:
    """PostgreSQL only: rows travel as one array per column and come back unchanged."""

    @pytest.fixture
    def pg_engine(self, postgres_url: str) -> Iterator[Engine]:
        engine = create_store_engine(postgres_url)
        yield engine
        engine.dispose()

    @pytest.mark.parametrize(
        "values",
        [
            AWKWARD_WORDS,
            ["Europe/Berlin", "UTC", "3f2a9c1e-0b6d-4e1a-9d7c-2b8f7a6e5d4c"],
            [None, "a", None],
            ["same", "same", "same"],
        ],
        ids=["awkward-words", "plain-words", "with-nulls", "all-equal"],
    )
    def test_text_values_round_trip_exactly(self, pg_engine: Engine, values: list[str]) -> None:
        # Given rows whose text column holds words that need quoting in an array literal
        rows = [{"k": i, "v": v} for i, v in enumerate(values)]
        # When they are selected back from unnest()
        with pg_engine.connect() as conn:
            query = rows_select(rows, {"k": BigInteger(), "v": String(255)}).subquery()
            found = conn.execute(select(query.c.v).order_by(query.c.k)).scalars().all()
        # Then every value comes back as it went in, in order
        assert found == values

    @pytest.mark.parametrize(
        "values", [[1, 2, 3], [7, 7, 7], [1, None, 3], [2**62, -5, 0]], ids=str
    )
    def test_whole_numbers_round_trip_exactly(self, pg_engine: Engine, values: list[int]) -> None:
        rows = [{"k": i, "v": v} for i, v in enumerate(values)]
        with pg_engine.connect() as conn:
            query = rows_select(rows, {"k": BigInteger(), "v": BigInteger()}).subquery()
            found = conn.execute(select(query.c.v).order_by(query.c.k)).scalars().all()
        assert found == values


class TestInsertRows:
    def test_inserts_every_row_and_returns_the_requested_columns(self, engine: Engine) -> None:
        rows = [{"name": f"p-{i}", "source_dir": None, "created_at": NOW} for i in range(3)]
        with engine.begin() as conn:
            returned = insert_rows(conn, projects, rows, (projects.c.name,))
            stored = conn.execute(select(projects.c.name).order_by(projects.c.name)).scalars()
            assert sorted(name for (name,) in returned) == ["p-0", "p-1", "p-2"]
            assert list(stored) == ["p-0", "p-1", "p-2"]

    def test_rows_that_break_a_unique_key_are_skipped_when_asked(self, engine: Engine) -> None:
        # Given one project already stored
        first = [{"name": "kept", "source_dir": "/first", "created_at": NOW}]
        again = [
            {"name": "kept", "source_dir": "/second", "created_at": NOW},
            {"name": "new", "source_dir": None, "created_at": NOW},
        ]
        with engine.begin() as conn:
            insert_rows(conn, projects, first, (projects.c.id,))
            # When both rows are inserted, ignoring conflicts
            returned = insert_rows(conn, projects, again, (projects.c.name,), ignore_conflicts=True)
            # Then only the new one is inserted and returned; the old one is unchanged
            assert [name for (name,) in returned] == ["new"]
            query = select(projects.c.source_dir).where(projects.c.name == "kept")
            assert conn.execute(query).scalar_one() == "/first"

    def test_no_rows_is_no_statement(self, engine: Engine) -> None:
        with engine.begin() as conn:
            assert insert_rows(conn, projects, [], (projects.c.id,)) == []


class TestUpdateRows:
    def test_each_row_gets_its_own_values_and_every_row_the_constant_ones(
        self, engine: Engine
    ) -> None:
        # Given three projects
        rows = [{"name": f"p-{i}", "source_dir": "/old", "created_at": NOW} for i in range(3)]
        with engine.begin() as conn:
            ids = sorted(int(i) for (i,) in insert_rows(conn, projects, rows, (projects.c.id,)))
            # When two of them are updated, each with its own name, and one constant value
            updates = [{"id": ids[0], "name": "first"}, {"id": ids[2], "name": "third"}]
            update_rows(conn, projects, updates, {"source_dir": None})
            # Then those two have their new name and the constant; the third is unchanged
            query = select(projects.c.name, projects.c.source_dir).order_by(projects.c.id)
            found = [(row.name, row.source_dir) for row in conn.execute(query)]
            assert found == [("first", None), ("p-1", "/old"), ("third", None)]

    def test_no_rows_is_no_statement(self, engine: Engine) -> None:
        with engine.begin() as conn:
            update_rows(conn, projects, [], {"source_dir": None})


class TestInIds:
    def test_matches_exactly_the_given_ids(self, engine: Engine) -> None:
        rows = [{"name": f"p-{i}", "source_dir": None, "created_at": NOW} for i in range(5)]
        with engine.begin() as conn:
            ids = sorted(int(i) for (i,) in insert_rows(conn, projects, rows, (projects.c.id,)))
            wanted = {ids[0], ids[3]}
            query = select(projects.c.id).where(in_ids(conn, projects.c.id, wanted))
            assert set(conn.execute(query).scalars()) == wanted

    def test_no_ids_match_nothing(self, engine: Engine) -> None:
        with engine.begin() as conn:
            row = {"name": "p", "source_dir": None, "created_at": NOW}
            insert_rows(conn, projects, [row], (projects.c.id,))
            query = select(projects.c.id).where(in_ids(conn, projects.c.id, []))
            assert list(conn.execute(query).scalars()) == []
