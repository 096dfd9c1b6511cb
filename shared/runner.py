"""The one loop every service runs: tick, wait, back off on errors, stop when asked.

A service hands :func:`run_until_stopped` its ``tick`` (one pass, returning a report with
``did_work`` and ``more_ready``, or None when this run is over) and its ``wait`` (sleep
at most the seconds given, returning early when woken, e.g. by an agent's event or a
NOTIFY). The runner owns the rest, the same for the scheduler, the executor (distributed,
standalone and ``tickwork run``):

- ``more_ready``: tick again at once; otherwise wait, the idle time growing from
  :attr:`IdleBackoff.min_seconds` to its cap while passes find nothing to do;
- an error of :attr:`Retry.errors` (a store or broker that is down) is logged, makes the
  service not ready, and is retried after an exponentially growing delay; any other
  error propagates;
- every pass beats the service's :class:`~tickwork.shared.health.LoopHealth` (the probes);
- the stop event ends the loop after the current pass, never in the middle of one;
  :func:`stop_on_signals` sets it from SIGTERM and SIGINT.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tickwork.shared.health import LoopHealth

log = logging.getLogger(__name__)


class PassReport(Protocol):
    """What the runner needs to know of a pass."""

    @property
    def did_work(self) -> bool:
        """Whether anything changed: an idle loop waits longer each time nothing did."""

    @property
    def more_ready(self) -> bool:
        """Whether a batch limit was hit: tick again without waiting."""


R = TypeVar("R", bound=PassReport)


@dataclass(frozen=True)
class IdleBackoff:
    """How long the loop waits between passes that found work (``min_seconds``), doubled
    after each idle one up to ``cap_seconds``; the service's wait may end it sooner."""

    min_seconds: float = 0.05
    cap_seconds: float = 1.0

    def next(self, previous: float, did_work: bool) -> float:
        """The idle wait after a pass, given the one before it."""
        if did_work:
            return self.min_seconds
        return min(previous * 2, self.cap_seconds)


def _describe(exc: BaseException) -> str:
    return str(exc)


def _store_down(_description: str) -> str:
    return "the store is unavailable"


@dataclass(frozen=True)
class Retry:
    """Which errors a pass may fail with and be retried, and how.

    The n-th failure in a row waits ``min(first_seconds * 2**(n-1), cap_seconds)`` and is
    logged at ERROR on ``logger`` as ``message % (delay, describe(exc))``; the service is
    not ready meanwhile, for ``reason(describe(exc))``.
    """

    errors: tuple[type[BaseException], ...]
    first_seconds: float
    cap_seconds: float
    message: str
    logger: logging.Logger = log
    describe: Callable[[BaseException], str] = _describe
    reason: Callable[[str], str] = _store_down

    def delay_seconds(self, failures: int) -> float:
        """The wait after ``failures`` failed passes in a row (1 for the first)."""
        exponent = min(max(failures - 1, 0), 32)
        return min(self.cap_seconds, self.first_seconds * 2.0**exponent)


@dataclass
class RunStats:
    """What a run did, for a caller that wants to know (tests, a bench)."""

    passes: int = 0
    failures: int = 0


def run_until_stopped(
    tick: Callable[[], R | None],
    *,
    stop: threading.Event,
    wait: Callable[[float], None] | None = None,
    idle: IdleBackoff | None = None,
    retry: Retry | None = None,
    health: LoopHealth | None = None,
    ready_reason: str = "",
    on_pass: Callable[[R], None] | None = None,
) -> RunStats:
    """Tick until ``stop`` is set or ``tick`` returns None; between passes ``wait``.

    ``wait(seconds)`` (default: ``stop.wait``) sleeps at most the idle backoff's seconds;
    it may return sooner (woken) or shorten it (a timer due earlier). Errors of
    ``retry.errors`` raised by ``tick`` or ``wait`` are retried with back-off; without
    ``retry`` every error propagates. ``on_pass`` sees each report (metrics, a log line).
    """
    idle = idle or IdleBackoff()
    sleep = wait or stop.wait
    errors = retry.errors if retry is not None else ()
    stats = RunStats()
    idle_seconds = idle.min_seconds
    failures = 0
    while not stop.is_set():
        try:
            report = tick()
            stats.passes += 1
            if report is None:
                return stats
            failures = 0
            if health is not None:
                health.beat(reason=ready_reason)
            if on_pass is not None:
                on_pass(report)
            if report.more_ready or stop.is_set():
                continue
            idle_seconds = idle.next(idle_seconds, report.did_work)
            sleep(idle_seconds)
        except errors as exc:
            assert retry is not None
            failures += 1
            stats.failures += 1
            _back_off(retry, exc, failures, stop, health)
    return stats


def _back_off(
    retry: Retry,
    exc: BaseException,
    failures: int,
    stop: threading.Event,
    health: LoopHealth | None,
) -> None:
    delay = retry.delay_seconds(failures)
    description = retry.describe(exc)
    retry.logger.error(retry.message, delay, description)
    if health is not None:
        health.beat(ready=False, reason=retry.reason(description))
    stop.wait(delay)


def stop_on_signals(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM and SIGINT (from the main thread only, as Python allows)."""

    def handler(_signum: int, _frame: object) -> None:
        stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
