"""Specifications of the store's dialect component (shared/store/dialects.py)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from sqlalchemy import JSON, Column, Engine, MetaData, Table, select, text

from tickwork.shared.store.dialects import PostgresDialect, SqliteDialect, dialect_named, dialect_of
from tickwork.shared.store.engine import create_store_engine

ROOT = Path(__file__).resolve().parents[2]


def test_each_database_gets_its_own_component_made_once(engine: Engine) -> None:
    expected = PostgresDialect if engine.dialect.name == "postgresql" else SqliteDialect
    with engine.connect() as conn:
        assert isinstance(dialect_of(conn), expected)
        assert dialect_of(conn) is dialect_of(engine) is dialect_of(engine.dialect)


def test_another_kind_of_database_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="mysql"):
        dialect_named("mysql")


def test_only_postgresql_is_shared_by_services_and_takes_writers_at_once() -> None:
    postgres, sqlite = dialect_named("postgresql"), dialect_named("sqlite")
    assert postgres.serves_many_processes and not sqlite.serves_many_processes
    assert postgres.concurrent_writers and not sqlite.concurrent_writers


def test_no_module_outside_the_component_compares_dialect_names() -> None:
    # Given every Python module of shared/ and services/ but the component itself
    component = ROOT / "shared" / "store" / "dialects.py"
    modules = [
        path
        for folder in ("shared", "services")
        for path in (ROOT / folder).rglob("*.py")
        if path != component
    ]
    # Then none of them branches on a dialect's name
    comparison = re.compile(r"dialect\.name\s*(==|!=)|(==|!=)\s*\S*dialect\.name")
    offenders = [str(p.relative_to(ROOT)) for p in modules if comparison.search(p.read_text())]
    assert offenders == []


def _pooled_backend_pids(engine: Engine) -> list[int]:
    """The server pids of two connections that are then back in the pool, idle."""
    with engine.connect() as first, engine.connect() as second:
        return [
            conn.execute(text("SELECT pg_backend_pid()")).scalar_one() for conn in (first, second)
        ]


def _terminate(url: str, pids: list[int]) -> None:
    """End the backends ``pids`` and wait (at most 10 s) until they are gone."""
    other = create_store_engine(url, pool_size=1)
    listed = text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)")
    try:
        with other.connect() as conn:
            for pid in pids:
                conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            deadline = time.monotonic() + 10
            while conn.execute(listed, {"pids": pids}).scalar_one() and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        other.dispose()


def test_a_pooled_connection_the_server_ended_is_replaced_at_checkout(postgres_url: str) -> None:
    # Given two pooled connections whose server backends are then ended (as a restart does)
    engine = create_store_engine(postgres_url, pool_size=2)
    try:
        ended = _pooled_backend_pids(engine)
        _terminate(postgres_url, ended)
        # When connections are taken from the pool again
        with engine.connect() as first, engine.connect() as second:
            pids = [
                conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
                for conn in (first, second)
            ]
        # Then each works, on a new backend: no statement met a closed connection
        assert not set(pids) & set(ended)
    finally:
        engine.dispose()


def test_a_live_pooled_connection_is_reused_without_a_ping(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pooled connection that the server keeps
    engine = create_store_engine(postgres_url, pool_size=2)
    pings: list[object] = []
    monkeypatch.setattr(engine.dialect, "do_ping", pings.append)
    try:
        pids = _pooled_backend_pids(engine)
        # When it is taken again
        with engine.connect() as conn:
            again = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        # Then it is one of the same connections, taken without a SELECT 1 round trip
        assert again in pids
        assert pings == []
    finally:
        engine.dispose()


JSON_TEXTS = [
    "{}",
    '{"a": 1, "a": 2, "b": [true, null, -0.0]}',
    "[12345678901234567890123456789, -98765432109876543210]",
    "[0.1, 1e100, 1.7976931348623157e308, 5e-324, 1E-7, 1.0]",
    '"caf\\u00e9 \\u2028 \\ud83d\\ude00 \\ud800"',
    '{"nested": {"x": "\\n\\t\\"\\\\/"}, "text": "été"}',
]


@pytest.mark.parametrize("stored", JSON_TEXTS)
def test_a_json_column_reads_as_json_loads_reads_its_text(engine: Engine, stored: str) -> None:
    # Given JSON text as a table holds it (another writer, or psql, may have written it)
    probe = Table("json_probe", MetaData(), Column("value", JSON))
    value = "CAST(:v AS json)" if engine.dialect.name == "postgresql" else ":v"
    with engine.begin() as conn:
        probe.create(conn)
        conn.execute(text(f"INSERT INTO json_probe (value) VALUES ({value})"), {"v": stored})
    # When it is read through the table's JSON column
    with engine.connect() as conn:
        read = conn.execute(select(probe.c.value)).scalar_one()
    # Then it is exactly the value json.loads gives: same types, same key order
    assert repr(read) == repr(json.loads(stored))
