"""A pass's listing of due schedules: handed out in batches, with the counts it took."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

from sqlalchemy import Connection

from tickwork.shared.store import emission as emission_store
from tickwork.shared.store.schedules import ScheduleRow

PASS_BATCHES = 100
"""Batches one pass lists at most; what is due beyond them waits for the next pass."""

LEAD_FRACTION = 4
"""A pass's first batch on each worker holds this fraction of the batch size, so that the
first sessions of a busy minute commit sooner."""


class DueList:
    """What one pass handles: the due schedules it listed, in batches handed out to its
    workers, with the checkpoints they had and the attempts running or waiting then."""

    def __init__(
        self,
        due: Sequence[emission_store.DueSchedule],
        counts: Future[dict[int, tuple[int, int]]],
        batch_size: int,
        workers: int = 1,
        *,
        small_first: bool = True,
    ) -> None:
        self.checkpoints = {item.schedule_id: item.checkpoint for item in due}
        self._counts = counts
        ids = [item.schedule_id for item in due]
        # Each worker's first batch is a quarter of the others when there are more
        # schedules than workers would claim in one round: its sessions commit sooner
        # (unless ``small_first`` is off: a pass ahead commits them all at once).
        busy = small_first and len(ids) > batch_size * workers
        lead = max(batch_size // LEAD_FRACTION, 1) if busy else 0
        cut = lead * workers
        self._batches = [ids[i : i + lead] for i in range(0, cut, lead)] if lead else []
        self._batches += [ids[i : i + batch_size] for i in range(cut, len(ids), batch_size)]
        self._lock = threading.Lock()

    @property
    def counts(self) -> dict[int, tuple[int, int]]:
        """(active, waiting) attempts of each schedule when the pass began (waits for
        the count under way)."""
        return self._counts.result()

    def next_batch(self) -> list[int]:
        """The next batch's schedule ids; empty once every batch is handed out."""
        with self._lock:
            return self._batches.pop(0) if self._batches else []


def counts_to_apply(
    conn: Connection, rows: Sequence[ScheduleRow], listing: DueList | None
) -> dict[int, tuple[int, int]]:
    """(active, waiting) attempts of each schedule about to emit.

    Counting a batch's schedules alone still reads every running attempt (attempts do
    not name their schedule), so a pass counts them once, for all. A schedule whose
    checkpoint moved since (another batch or replica emitted for it) is counted again.
    """
    if listing is None:
        return emission_store.active_counts(conn, [row.id for row in rows])
    counts = {row.id: listing.counts.get(row.id, (0, 0)) for row in rows}
    moved = [row.id for row in rows if listing.checkpoints.get(row.id) != row.last_session_time]
    if moved:
        fresh = emission_store.active_counts(conn, moved)
        counts.update({schedule_id: fresh.get(schedule_id, (0, 0)) for schedule_id in moved})
    return counts
