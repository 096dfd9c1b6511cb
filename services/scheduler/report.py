"""What a tick reports, and what its batches write before their transactions commit."""

from __future__ import annotations

from dataclasses import dataclass, field

from tickwork.shared.domain.catchup import MissedRange, Pass
from tickwork.shared.store.emission import NewSession
from tickwork.shared.store.schedules import ScheduleRow


@dataclass
class TickReport:
    """What one tick did."""

    due: int = 0
    schedules: int = 0
    emitted: int = 0
    duplicates: int = 0
    missed: int = 0
    failures: int = 0
    started_waiting: int = 0
    lags: list[float] = field(default_factory=list)
    more_ready: bool = False  # after a pass ahead: what it left is due now

    @property
    def did_work(self) -> bool:
        """Whether the tick emitted, missed or started anything."""
        return bool(self.emitted or self.missed or self.started_waiting)

    def add(self, other: TickReport) -> None:
        """Count in what another worker of the same tick did."""
        self.schedules += other.schedules
        self.emitted += other.emitted
        self.duplicates += other.duplicates
        self.missed += other.missed
        self.failures += other.failures
        self.lags.extend(other.lags)


@dataclass(frozen=True)
class Written:
    """What a batch wrote, to be counted once its transaction has committed."""

    emissions: list[Emission]
    new: list[NewSession]
    created: int
    started: float  # perf_counter() when the batch began writing


@dataclass
class Emission:
    """One schedule's share of a batch."""

    row: ScheduleRow
    plan: Pass
    new: list[NewSession] = field(default_factory=list)
    missed: list[MissedRange] = field(default_factory=list)
