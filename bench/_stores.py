"""What the benchmarks share: throwaway PostgreSQL databases and nearest-rank percentiles."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from shared.store.engine import create_store_engine, libpq_url
from shared.store.migrate import upgrade_database


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with ``fraction`` of values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@contextmanager
def throwaway_database(server_url: str) -> Iterator[str]:
    """A new database ``tickwork_bench_<hex>``, migrated; dropped afterwards."""
    name = f"tickwork_bench_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_url(server_url), autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        engine = create_store_engine(url)
        upgrade_database(engine)
        engine.dispose()
        yield url
    finally:
        with psycopg.connect(libpq_url(server_url), autocommit=True, connect_timeout=5) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(name)))
