"""Which attempts a query keeps: the ones an embedded run names, or those of the partitions
an executor holds.

Attempts are spread over a fixed number of partitions, ``attempt_id % partition_count``;
each partition is run by one executor at a time (see :mod:`tickwork.shared.domain.partitions`).
The store's executor queries accept an :data:`AttemptSet` where they accept attempt ids,
and :func:`restrict` adds the matching condition.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Connection, false, select

from tickwork.shared.domain.partitions import DEFAULT_PARTITION_COUNT
from tickwork.shared.store.dialects import fixed
from tickwork.shared.store.tables import tasks


@dataclass(frozen=True)
class AttemptFilter:
    """Attempts in ``ids`` (None: any) whose partition is in ``partitions`` (None: any)."""

    ids: frozenset[int] | None = None
    partitions: frozenset[int] | None = None
    partition_count: int = DEFAULT_PARTITION_COUNT

    @classmethod
    def of_partitions(cls, held: Collection[int], partition_count: int) -> AttemptFilter:
        """The attempts of the ``held`` partitions out of ``partition_count``."""
        return cls(partitions=frozenset(held), partition_count=partition_count)

    @property
    def every_partition(self) -> bool:
        """Whether no partition is left out."""
        return self.partitions is None or len(self.partitions) >= self.partition_count

    def clause(self, column: ColumnElement[Any]) -> ColumnElement[bool] | None:
        """The condition on an attempt id ``column``; None when it keeps every attempt."""
        conditions: list[ColumnElement[bool]] = []
        if self.ids is not None:
            conditions.append(column.in_(sorted(self.ids)))
        if not self.every_partition:
            held = sorted(self.partitions or ())
            if not held:
                return false()
            # The modulus is a literal, so the planner sees the same expression each pass.
            bucket = column.op("%")(fixed(self.partition_count))
            conditions.append(bucket.in_(held))
        if not conditions:
            return None
        return conditions[0] if len(conditions) == 1 else conditions[0] & conditions[1]


AttemptSet = Collection[int] | AttemptFilter | None
"""What executor queries accept to limit themselves: attempt ids, a filter, or None (all)."""

Q = TypeVar("Q")


def as_filter(among: AttemptSet) -> AttemptFilter | None:
    """``among`` as a filter; None for every attempt."""
    if among is None or isinstance(among, AttemptFilter):
        return among
    return AttemptFilter(ids=frozenset(among))


def restrict(query: Q, column: ColumnElement[Any], among: AttemptSet) -> Q:
    """``query`` keeping only rows whose attempt id ``column`` is in ``among``."""
    found = as_filter(among)
    condition = None if found is None else found.clause(column)
    return query if condition is None else query.where(condition)  # type: ignore[attr-defined]


def attempts_of_tasks(conn: Connection, task_ids: Collection[int]) -> dict[int, int]:
    """The attempt of each of ``task_ids`` that exists."""
    if not task_ids:
        return {}
    query = select(tasks.c.id, tasks.c.attempt_id).where(tasks.c.id.in_(sorted(task_ids)))
    return {int(row.id): int(row.attempt_id) for row in conn.execute(query)}
