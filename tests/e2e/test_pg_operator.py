"""``pg>`` in whole runs against the real local PostgreSQL, in a throwaway database:
embedded (``tickwork run``, the connection partly from the project's secrets) and
distributed (an executor and an agent as processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.e2e._run import Project
from tests.e2e._standalone import serving_local_store
from tests.fault._cluster import Cluster
from tests.support.servers import libpq_conninfo, throwaway_postgres_database

pytestmark = pytest.mark.e2e

KEY = "a passphrase long enough for tests"


@pytest.fixture(scope="module")
def user_database(postgres_server_url: str) -> Iterator[str]:
    """The SQLAlchemy URL of the user's throwaway database, with a table of orders."""
    with throwaway_postgres_database(postgres_server_url) as url:
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id int, amount int)")
            conn.execute("INSERT INTO orders VALUES (1, 10), (2, 20), (3, 30)")
        yield url


def count(url: str, table: str) -> int:
    with psycopg.connect(libpq_conninfo(url)) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()
    assert row is not None
    return int(row[0])


def set_secret(project: Project, name: str, value: str) -> None:
    """``tickwork secrets set --create-project`` for the local project, through a
    ``tickwork standalone`` on its state directory."""
    with serving_local_store(project.state_dir, KEY) as server:
        done = server.tickwork("secrets", "set", "--create-project", "project", name, stdin=value)
        assert done.exit_code == 0, done.explain()


def test_tickwork_run_creates_inserts_selects_and_downloads(
    tmp_path: Path, user_database: str
) -> None:
    url = make_url(user_database)
    # Given a project whose database name and password are secrets
    project = Project.empty(tmp_path)
    set_secret(project, "pg.database", str(url.database))
    set_secret(project, "pg.password", "not-checked-by-trust")
    project.write("queries/big.sql", "SELECT id, amount FROM orders WHERE amount > ${limit}")
    project.write("queries/total.sql", "SELECT sum(amount) AS total FROM big_orders")
    project.write(
        "wf.dig",
        f"""
        _export:
          pg:
            host: {url.host}
            port: {url.port or 5432}
            user: {url.username}
          limit: 15
        +create:
          pg>: queries/big.sql
          create_table: big_orders
          password: ${{secret:pg.password}}
        +append:
          pg>: queries/big.sql
          insert_into: big_orders
        +total:
          pg>: queries/total.sql
          store_last_results: first
        +report:
          sh>: echo "${{pg.last_results.total}}" > total.txt
        +download:
          pg>: queries/big.sql
          download_file: out/big.csv
        """,
    )
    # When it runs embedded
    run = project.run("wf.dig", env={"TICKWORK_SECRET_KEY": KEY})
    # Then the table was made, appended to once, summed and downloaded
    assert run.exit_code == 0, run.explain()
    assert count(user_database, "big_orders") == 4
    assert project.read("total.txt") == "100\n"
    assert (project.root / "out/big.csv").read_bytes() == b"id,amount\r\n2,20\r\n3,30\r\n"


def test_a_failed_statement_fails_the_run_with_the_server_message(
    tmp_path: Path, user_database: str
) -> None:
    url = make_url(user_database)
    project = Project.empty(tmp_path)
    project.write("bad.sql", "SELECT amount FROM no_such_table")
    project.write(
        "wf.dig",
        f"""
        +bad:
          pg>: bad.sql
          host: {url.host}
          user: {url.username}
          database: {url.database}
        """,
    )
    run = project.run("wf.dig")
    assert run.exit_code == 1
    assert 'relation "no_such_table" does not exist' in run.stdout, run.explain()
    assert "Traceback" not in run.stdout + run.stderr


@pytest.mark.timeout(90)
def test_a_distributed_run_inserts_and_stores_results(cluster: Cluster, user_database: str) -> None:
    url = make_url(user_database)
    cluster.start_executor()
    cluster.start_agent("agent-a")
    (cluster.project_dir / "copy.sql").write_text("SELECT id FROM orders")
    (cluster.project_dir / "count.sql").write_text("SELECT count(*) AS n FROM copied")
    (cluster.project_dir / "wf.dig").write_text(
        f"""
_export:
  pg:
    host: {url.host}
    user: {url.username}
    database: {url.database}
+prepare:
  pg>: copy.sql
  create_table: copied
+copy:
  pg>: copy.sql
  insert_into: copied
+count:
  pg>: count.sql
  store_last_results: all
+show:
  sh>: echo "rows=${{pg.last_results[0].n}}" > {cluster.project_dir / "rows.txt"}
"""
    )
    done = cluster.tickwork("run", str(cluster.project_dir / "wf.dig"), "--on-executor", "-q")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{cluster.explain()}"
    assert (cluster.project_dir / "rows.txt").read_text() == "rows=6\n"
