"""A PostgreSQL primary and a streaming standby of real processes, for failover specs.

The primary is made with ``initdb`` (tests/support/servers.py), the standby with
``pg_basebackup -R`` from it; each runs on a free port in a temporary directory of its own
(removed when it stops), as the ``postgres`` OS user when the tests run as root.
Replication is asynchronous unless ``synchronous`` is asked (``synchronous_standby_names =
'*'``: a commit waits for the standby to have the WAL on disk).

:meth:`ReplicatedPostgres.url` names both servers in libpq's multi-host form with
``target_session_attrs=read-write``; :meth:`ReplicatedPostgres.fail_over` stops the primary
(immediate mode: no checkpoint, no waiting for clients) and promotes the standby, as
Patroni or a managed service's failover would.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.servers import (
    POSTGRES_START_TIMEOUT_SECONDS,
    ServerUnavailable,
    ThrowawayPostgres,
    find_free_port,
    find_postgres_binaries,
    libpq_conninfo,
)

DATABASE = "tickwork"


class MissingBinaries(ServerUnavailable):
    """This machine has no PostgreSQL server binaries to make a primary and a standby."""


@dataclass(frozen=True)
class WalPositions:
    """How far the primary had written WAL and how far the standby had replayed it, when
    the primary was stopped."""

    primary_lsn: str
    standby_lsn: str
    unreplicated_bytes: int


@dataclass
class ReplicatedPostgres:
    primary: ThrowawayPostgres
    standby: ThrowawayPostgres
    synchronous: bool

    def url(self, database: str = DATABASE) -> str:
        """Both servers, the primary first, as a libpq multi-host URL for SQLAlchemy."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return (
            f"postgresql+psycopg://postgres@{hosts}/{database}"
            "?target_session_attrs=read-write&connect_timeout=2"
        )

    @classmethod
    def start(cls, *, synchronous: bool) -> ReplicatedPostgres:
        found = find_postgres_binaries()
        # initdb may be a link on PATH: pg_basebackup is beside the file it points to
        bin_dir = None if found is None else (found / "initdb").resolve().parent
        if bin_dir is None or not (bin_dir / "pg_basebackup").exists():
            raise MissingBinaries("needs PostgreSQL's server binaries (initdb, pg_basebackup)")
        primary = ThrowawayPostgres.start(bin_dir)
        # Like the primary's, its directory is a new temporary one: the postgres OS user
        # must reach it, and a test's own temporary directory is root's alone.
        standby_root = Path(tempfile.mkdtemp(prefix="tickwork-pg-standby-"))
        standby = ThrowawayPostgres(bin_dir, standby_root, find_free_port(), primary.run_as)
        replicated = cls(primary, standby, synchronous)
        try:
            _execute(primary.url, f"CREATE DATABASE {DATABASE}")
            if standby.run_as is not None:
                entry = pwd.getpwnam(standby.run_as)
                os.chown(standby.root, entry.pw_uid, entry.pw_gid)
            standby._run(
                [
                    str(bin_dir / "pg_basebackup"),
                    f"--dbname=host=127.0.0.1 port={primary.port} user=postgres",
                    "-D",
                    str(standby.data_dir),
                    "-R",
                    "-X",
                    "stream",
                    "--checkpoint=fast",
                    "--no-sync",
                ],
                timeout_seconds=POSTGRES_START_TIMEOUT_SECONDS,
            )
            standby._pg_ctl_start()
            replicated._wait_for_streaming()
            if synchronous:
                _execute(primary.url, "ALTER SYSTEM SET synchronous_standby_names = '*'")
                _execute(primary.url, "SELECT pg_reload_conf()")
                replicated._wait_until_synchronous()
        except BaseException:
            replicated.stop()
            raise
        return replicated

    def _replication_state(self) -> tuple[str, str] | None:
        with psycopg.connect(libpq_conninfo(self.primary.url), autocommit=True) as conn:
            row = conn.execute("SELECT state, sync_state FROM pg_stat_replication").fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def _wait_for_streaming(self) -> None:
        self._wait("the standby streams from the primary", lambda s: s[0] == "streaming")

    def _wait_until_synchronous(self) -> None:
        self._wait("the standby is synchronous", lambda s: s[1] == "sync")

    def _wait(self, what: str, done: object) -> None:
        deadline = time.monotonic() + POSTGRES_START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            state = self._replication_state()
            if state is not None and done(state):  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise ServerUnavailable(f"{what}: not within {POSTGRES_START_TIMEOUT_SECONDS}s")

    def fail_over(self) -> WalPositions:
        """Stop the primary at once, then promote the standby; how much WAL the primary
        had that the standby never received."""
        with psycopg.connect(libpq_conninfo(self.primary.url), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
            primary_lsn = str(row[0] if row else "")
        self.primary._run(
            [*self.primary._pg_ctl(), "-m", "immediate", "-w", "-t", "10", "stop"],
            timeout_seconds=15,
        )
        standby_url = self.standby.url
        with psycopg.connect(libpq_conninfo(standby_url), autocommit=True) as conn:
            row = conn.execute("SELECT pg_last_wal_receive_lsn()").fetchone()
            standby_lsn = str(row[0] if row else "")
            behind = conn.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (primary_lsn, standby_lsn)
            ).fetchone()
        self.standby._run(
            [*self.standby._pg_ctl(), "-w", "-t", "30", "promote"], timeout_seconds=35
        )
        return WalPositions(primary_lsn, standby_lsn, max(0, int(behind[0] if behind else 0)))

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                server.stop()


def _execute(server_url: str, statement: str) -> None:
    with psycopg.connect(libpq_conninfo(server_url), autocommit=True) as conn:
        conn.execute(statement.encode())
