"""Pools: their rows (``tickwork pools set``), what the store counts of them, and the
admission that keeps any number of executors from over-filling one.

Slots are not kept as a counter: a pool's used slots are its tasks in flight (QUEUED or
RUNNING), counted under a lock on the pool's row. An executor admitting tasks to a pool
locks the row (``SELECT ... FOR UPDATE``; SQLite has one writer), counts, and queues at
most the free slots in the same transaction; another executor admitting to the same pool
waits for that commit and then counts what it queued. A slot comes back by itself when its
task leaves QUEUED and RUNNING, however it ends (a result, a kill, a timeout).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import Connection, delete, func, select

from tickwork.shared.domain.pools import PoolUsage
from tickwork.shared.domain.states import TaskState
from tickwork.shared.errors import NotFound
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.partitions import AttemptSet, restrict
from tickwork.shared.store.tables import pools, tasks

IN_FLIGHT = (TaskState.QUEUED.value, TaskState.RUNNING.value)


def _counts(
    conn: Connection, states: Collection[str], names: Collection[str] | None
) -> dict[str, int]:
    """Tasks in ``states`` per pool (of ``names``, or of every pool)."""
    query = (
        select(tasks.c.pool, func.count().label("n"))
        .where(tasks.c.state.in_(list(states)), tasks.c.pool.is_not(None))
        .group_by(tasks.c.pool)
    )
    if names is not None:
        query = query.where(tasks.c.pool.in_(sorted(names)))
    return {str(row.pool): int(row.n) for row in conn.execute(query)}


def list_pools(conn: Connection) -> list[PoolUsage]:
    """Every pool, and every name tasks wait for or run under without a pool of that
    name (``slots`` None), by name."""
    rows = {str(row.name): row for row in conn.execute(select(pools))}
    used = _counts(conn, IN_FLIGHT, None)
    waiting = _counts(conn, (TaskState.READY.value,), None)
    names = sorted({*rows, *used, *waiting})
    return [
        PoolUsage(
            name=name,
            slots=int(rows[name].slots) if name in rows else None,
            used=used.get(name, 0),
            waiting=waiting.get(name, 0),
            description=rows[name].description if name in rows else None,
        )
        for name in names
    ]


def get_pool(conn: Connection, name: str) -> PoolUsage:
    """One pool as :func:`list_pools` has it; NotFound if it neither exists nor is named
    by a waiting or running task."""
    for usage in list_pools(conn):
        if usage.name == name:
            return usage
    raise NotFound(f"pool {name!r} not found")


def set_pool(
    conn: Connection, name: str, slots: int, description: str | None, now: datetime
) -> bool:
    """Create the pool or change its slots (and description, when given); True when it
    was created. Fewer slots than are in use takes none back: no new task is admitted
    until enough of them end."""
    insert = dialect_of(conn).insert_ignoring_conflicts(pools, index_elements=["name"])
    created = conn.execute(
        insert.values(
            name=name, slots=slots, description=description, created_at=now, updated_at=now
        ).returning(pools.c.name)
    ).first()
    if created is not None:
        return True
    values: dict[str, object] = {"slots": slots, "updated_at": now}
    if description is not None:
        values["description"] = description
    conn.execute(pools.update().where(pools.c.name == name).values(**values))
    return False


def delete_pool(conn: Connection, name: str) -> bool:
    """Remove the pool; its tasks then wait until a pool of that name is set again.
    False when there was none."""
    return bool(conn.execute(delete(pools).where(pools.c.name == name)).rowcount)


def lock_free_slots(conn: Connection, names: Collection[str]) -> dict[str, int]:
    """The free slots of each of ``names``, with their rows locked until the transaction
    ends (in name order, so that two executors never wait for each other): what the
    caller queues before its commit is all another admission to these pools can miss.
    A name without a pool has none free."""
    if not names:
        return {}
    ordered = sorted(names)
    query = (
        select(pools.c.name, pools.c.slots)
        .where(pools.c.name.in_(ordered))
        .order_by(pools.c.name)
        .with_for_update()
    )
    slots = {str(row.name): int(row.slots) for row in conn.execute(query)}
    used = _counts(conn, IN_FLIGHT, list(slots))
    return {name: max(0, slots.get(name, 0) - used.get(name, 0)) for name in ordered}


def pools_waited_for(conn: Connection, attempt_ids: AttemptSet = None) -> set[str]:
    """The pools that READY tasks (of ``attempt_ids``) wait for."""
    query = (
        select(tasks.c.pool)
        .distinct()
        .where(tasks.c.state == TaskState.READY.value, tasks.c.pool.is_not(None))
    )
    query = restrict(query, tasks.c.attempt_id, attempt_ids)
    return {str(name) for name in conn.execute(query).scalars()}
