"""Specifications of the store's dialect component (shared/store/dialects.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import Engine

from shared.store.dialects import PostgresDialect, SqliteDialect, dialect_named, dialect_of

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
