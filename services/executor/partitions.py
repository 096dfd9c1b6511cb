"""Which partitions of the attempts this executor runs: PostgreSQL advisory locks shared
out fairly among the live executors.

Every live executor holds the membership lock (:data:`MEMBER_KEY`, in shared mode) on its
lock connection, and each partition it runs under an exclusive lock ``(MEMBER_KEY,
partition)`` on the same connection. All of them are visible in ``pg_locks``, so each
executor sees who is live and who holds what, and moves towards its share: the live
executors ordered by their connection's process id, the first ``count % live`` get
``count // live + 1`` partitions, the others ``count // live``. An executor above its
share gives the extra partitions up; one below it takes free ones. When an executor dies
its connection closes and PostgreSQL drops its locks, so the others take its partitions
at their next look (every :data:`REBALANCE_SECONDS`).

The membership lock is the key an executor of a release before partitions takes alone
(in exclusive mode): while one of those runs, none of these joins, and the other way
round, so an old and a new executor never run the same attempts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy import Connection, text

log = logging.getLogger(__name__)

MEMBER_KEY = 0x7469636B
"""``tick``: the advisory lock every live executor holds in shared mode (an executor of a
release before partitions took it alone, as the active one)."""
REBALANCE_SECONDS = 0.5
"""How often an executor looks at who is live and who holds what."""

_LOCKS = text(
    """
    SELECT pid, objsubid, objid::bigint AS objid FROM pg_locks
    WHERE locktype = 'advisory' AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((classid::bigint = 0 AND objid::bigint = :key AND objsubid = 1)
        OR (classid::bigint = :key AND objsubid = 2))
    """
)


@dataclass(frozen=True)
class Holdings:
    """What ``pg_locks`` says: the live executors (by process id) and each held
    partition's holder."""

    members: tuple[int, ...]
    holders: dict[int, int]  # partition -> pid


def fair_share(members: Collection[int], pid: int, partition_count: int) -> int:
    """How many partitions ``pid`` should hold among ``members``."""
    ordered = sorted({*members, pid})
    rank = ordered.index(pid)
    base, extra = divmod(partition_count, len(ordered))
    return base + (1 if rank < extra else 0)


class PartitionLeases:
    """The partitions one executor holds, under advisory locks on its lock connection
    (an AUTOCOMMIT connection kept for as long as it runs)."""

    def __init__(self, conn: Connection, partition_count: int) -> None:
        self.conn = conn
        self.partition_count = partition_count
        self.held: frozenset[int] = frozenset()
        self.pid = 0

    def join(self) -> bool:
        """Take the membership lock; False while an executor of an older release runs."""
        self.pid = int(self.conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        taken = self.conn.execute(
            text("SELECT pg_try_advisory_lock_shared(:k)"), {"k": MEMBER_KEY}
        ).scalar()
        return bool(taken)

    def leave(self) -> None:
        """Give every partition and the membership up (the connection stays open)."""
        self.release(self.held)
        self.conn.execute(text("SELECT pg_advisory_unlock_shared(:k)"), {"k": MEMBER_KEY})

    def look(self) -> Holdings:
        """Who is live and who holds which partition now."""
        members: set[int] = set()
        holders: dict[int, int] = {}
        for row in self.conn.execute(_LOCKS, {"key": MEMBER_KEY}):
            if row.objsubid == 1:
                members.add(int(row.pid))
            elif 0 <= int(row.objid) < self.partition_count:
                holders[int(row.objid)] = int(row.pid)
        return Holdings(tuple(sorted(members)), holders)

    def rebalance(self, before_release: Callable[[], None] | None = None) -> bool:
        """Give up partitions above this executor's share, take free ones up to it;
        whether what it holds changed. ``before_release`` runs before any partition is
        given up (the executor sends what it owes their next holder). Raises
        SQLAlchemyError when the connection is lost (its locks are gone with it)."""
        holdings = self.look()
        share = fair_share(holdings.members, self.pid, self.partition_count)
        mine = {p for p, pid in holdings.holders.items() if pid == self.pid}
        if mine != self.held:
            log.warning("the store no longer shows partitions this executor held")
            self.held = frozenset(mine)
        before = self.held
        if len(self.held) > share:
            if before_release is not None:
                before_release()
            self.release(sorted(self.held)[share:])
        elif len(self.held) < share:
            free = [p for p in range(self.partition_count) if p not in holdings.holders]
            self.take(free[: share - len(self.held)])
        if self.held != before:
            log.info(
                "partitions held: %d of %d (%d executors) partitions=%s",
                len(self.held),
                self.partition_count,
                len(holdings.members),
                ",".join(map(str, sorted(self.held))) or "-",
            )
        return self.held != before

    def take(self, partitions: Collection[int]) -> None:
        """Try each partition's lock; those taken join :attr:`held`."""
        taken = set()
        for partition in partitions:
            got = self.conn.execute(
                text("SELECT pg_try_advisory_lock(:k, :p)"), {"k": MEMBER_KEY, "p": partition}
            ).scalar()
            if got:
                taken.add(partition)
        self.held = self.held | taken

    def release(self, partitions: Collection[int]) -> None:
        """Give partitions up (between passes only: none of their work is under way)."""
        for partition in sorted(partitions):
            self.conn.execute(
                text("SELECT pg_advisory_unlock(:k, :p)"), {"k": MEMBER_KEY, "p": partition}
            )
        self.held = self.held - frozenset(partitions)
