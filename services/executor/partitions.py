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

Executors must agree on the partition count, or two of them could run one attempt (its
partition differs with the count). Each member also holds ``(COUNT_KEY, its count)`` in
shared mode, so every one sees the others' counts. The count that rules is that of the
first executor (lowest process id) among those holding partitions, or among the members
while none holds any: a member set to another count gives its partitions up and stands
by, saying why, until they agree. Executors rebalance one at a time (under
:data:`REBALANCE_KEY`, tried, never waited for), so each takes partitions having seen
what the others hold. So an executor started with a new count waits for the
last one of the old count to stop (a rolling change), and never runs beside it.
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
COUNT_KEY = 0x7469636E
"""``ticn``: each member holds ``(COUNT_KEY, partition count)`` in shared mode."""
REBALANCE_KEY = 0x7469636F
"""``tico``: held for the moment of one rebalance, so that executors look and take one at a
time (two with different counts never both take partitions on one look)."""
REBALANCE_SECONDS = 0.5
"""How often an executor looks at who is live and who holds what."""

_LOCKS = text(
    """
    SELECT pid, classid::bigint AS classid, objsubid, objid::bigint AS objid FROM pg_locks
    WHERE locktype = 'advisory' AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((classid::bigint = 0 AND objid::bigint = :key AND objsubid = 1)
        OR (classid::bigint IN (:key, :count_key) AND objsubid = 2))
    """
)


class PartitionCountConflict(Exception):
    """Another executor rules with a different partition count (the message says which)."""


@dataclass(frozen=True)
class Holdings:
    """What ``pg_locks`` says: the live executors (by process id), each held
    partition's holder (whatever count it is under), and each member's count."""

    members: tuple[int, ...]
    holders: dict[int, int]  # partition -> pid
    counts: dict[int, int]  # pid -> partition count

    def ruling(self) -> tuple[int, int] | None:
        """``(pid, count)`` of the executor whose partition count rules (see the module
        docstring); None while no member says its count."""
        holding = sorted(pid for pid in set(self.holders.values()) if pid in self.counts)
        judges = holding or sorted(self.counts)
        return (judges[0], self.counts[judges[0]]) if judges else None


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
        self.refusal = ""  # why the last join failed
        self.refusal_level = logging.INFO  # how loudly to say it: ERROR for a misconfiguration

    def join(self) -> bool:
        """Say this executor's count, then take the membership lock; False (and
        :attr:`refusal` says why) while an executor with another partition count rules,
        or one of an older release runs. The count is checked first, so that one which
        must stand by is never counted as a member by the others."""
        self.pid = int(self.conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
        count = {"k": COUNT_KEY, "n": self.partition_count}
        self.conn.execute(text("SELECT pg_advisory_lock_shared(:k, :n)"), count)
        try:
            self.check_count(self.look())
        except PartitionCountConflict as conflict:
            self.refusal, self.refusal_level = f"standby: {conflict}", logging.ERROR
        else:
            taken = self.conn.execute(
                text("SELECT pg_try_advisory_lock_shared(:k)"), {"k": MEMBER_KEY}
            ).scalar()
            if taken:
                return True
            self.refusal = "standby: an executor of an older release is active"
            self.refusal_level = logging.INFO
        self.conn.execute(text("SELECT pg_advisory_unlock_shared(:k, :n)"), count)
        return False

    def check_count(self, holdings: Holdings) -> None:
        """Raise PartitionCountConflict if another executor's count rules, and differs."""
        ruling = holdings.ruling()
        if ruling is None or ruling[0] == self.pid or ruling[1] == self.partition_count:
            return
        raise PartitionCountConflict(
            f"the executor on PostgreSQL backend {ruling[0]} runs {ruling[1]} partitions and "
            f"this one is set to {self.partition_count} (TICKWORK_EXECUTOR_PARTITIONS): it "
            "stands by until every executor is set alike"
        )

    def leave(self) -> None:
        """Give every partition and the membership up (the connection stays open)."""
        self.release(self.held)
        self.conn.execute(
            text("SELECT pg_advisory_unlock_shared(:k, :n)"),
            {"k": COUNT_KEY, "n": self.partition_count},
        )
        self.conn.execute(text("SELECT pg_advisory_unlock_shared(:k)"), {"k": MEMBER_KEY})

    def look(self) -> Holdings:
        """Who is live, who holds which partition and who says which count, now."""
        members: set[int] = set()
        holders: dict[int, int] = {}
        counts: dict[int, int] = {}
        values = {"key": MEMBER_KEY, "count_key": COUNT_KEY}
        for row in self.conn.execute(_LOCKS, values):
            if row.objsubid == 1:
                members.add(int(row.pid))
            elif int(row.classid) == COUNT_KEY:
                counts[int(row.pid)] = int(row.objid)
            else:
                holders[int(row.objid)] = int(row.pid)
        return Holdings(tuple(sorted(members)), holders, counts)

    def rebalance(self, before_release: Callable[[], None] | None = None) -> bool:
        """Give up partitions above this executor's share, take free ones up to it;
        whether what it holds changed. ``before_release`` runs before any partition is
        given up (the executor sends what it owes their next holder). Raises
        SQLAlchemyError when the connection is lost (its locks are gone with it), and
        PartitionCountConflict when another executor's partition count rules (this one
        should then :meth:`leave`)."""
        key = {"k": REBALANCE_KEY}
        if not self.conn.execute(text("SELECT pg_try_advisory_lock(:k)"), key).scalar():
            return False  # another executor is rebalancing: look again next time
        try:
            return self._rebalance(before_release)
        finally:
            self.conn.execute(text("SELECT pg_advisory_unlock(:k)"), key)

    def _rebalance(self, before_release: Callable[[], None] | None) -> bool:
        holdings = self.look()
        self.check_count(holdings)
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
