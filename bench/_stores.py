"""What the benchmarks share: throwaway PostgreSQL databases, nearest-rank percentiles,
and attempts of no-op workflows."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from tickwork.services.compose.embedded import RunRequest, default_session_time
from tickwork.shared.clock import SystemClock
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store.engine import create_store_engine, libpq_url
from tickwork.shared.store.migrate import upgrade_database


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with ``fraction`` of values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@contextmanager
def throwaway_database(server_url: str, *, migrate: bool = True) -> Iterator[str]:
    """A new database ``tickwork_bench_<hex>``, migrated unless ``migrate`` is false (for
    another checkout's migrations); dropped afterwards."""
    name = f"tickwork_bench_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_url(server_url), autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            engine = create_store_engine(url)
            upgrade_database(engine)
            engine.dispose()
        yield url
    finally:
        with psycopg.connect(libpq_url(server_url), autocommit=True, connect_timeout=5) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(name)))


def noop_workflow_text(tasks: int, parallel: bool) -> str:
    """One group of ``tasks`` no-op ``echo>: x`` tasks, fanned out or chained."""
    lines = ["+all:"]
    if parallel:
        lines.append("  _parallel: true")
    for index in range(tasks):
        lines += [f"  +t{index:05d}:", "    echo>: x"]
    return "\n".join(lines) + "\n"


def run_request(database_url: str, project_dir: Path, name: str, text: str) -> RunRequest:
    """What creating an attempt of workflow ``name`` (its ``.dig`` text) takes, at its
    default session time: the caller creates it with ``create_run_attempt``."""
    definition = parse_workflow_text(text, f"{name}.dig", project_dir)
    return RunRequest(
        definition=definition,
        project_dir=project_dir,
        state_dir=project_dir / ".tickwork",
        database_url=database_url,
        params={},
        session_time=default_session_time(definition, SystemClock().now()),
    )
