"""The shared service loop (shared/runner.py): waiting, back-off, health and stopping."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass

import pytest

from tickwork.shared.health import LoopHealth
from tickwork.shared.runner import IdleBackoff, Retry, run_until_stopped, stop_on_signals


@dataclass
class Report:
    did_work: bool = False
    more_ready: bool = False


class RecordingStop(threading.Event):
    """A stop event whose waits (the back-off's) return at once, noting how long they were."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.delays.append(timeout)
        return self.is_set()


class Script:
    """A tick that plays a list of outcomes (a report, None, or an error), then stops."""

    def __init__(self, *outcomes: Report | Exception | None) -> None:
        self.outcomes = list(outcomes)
        self.stop = RecordingStop()
        self.waits: list[float] = []

    def tick(self) -> Report | None:
        outcome = self.outcomes.pop(0)
        if not self.outcomes:
            self.stop.set()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)


class StoreDown(Exception):
    pass


def retry_policy(logger: logging.Logger) -> Retry:
    return Retry(
        errors=(StoreDown,),
        first_seconds=0.5,
        cap_seconds=2.0,
        message="pass failed, retrying in %.1fs: %s",
        logger=logger,
    )


class TestWaiting:
    def test_an_idle_loop_waits_twice_as_long_each_pass_up_to_the_cap(self) -> None:
        script = Script(*[Report() for _ in range(6)], Report(did_work=True), Report())
        run_until_stopped(
            script.tick, stop=script.stop, wait=script.wait, idle=IdleBackoff(0.05, 0.4)
        )
        assert script.waits == [0.1, 0.2, 0.4, 0.4, 0.4, 0.4, 0.05]

    def test_more_ready_ticks_again_without_waiting(self) -> None:
        script = Script(Report(more_ready=True), Report(more_ready=True), Report(), Report())
        stats = run_until_stopped(script.tick, stop=script.stop, wait=script.wait)
        assert stats.passes == 4
        assert len(script.waits) == 1

    def test_a_tick_returning_none_ends_the_run_without_setting_stop(self) -> None:
        script = Script(Report(), None, Report())
        stats = run_until_stopped(script.tick, stop=script.stop, wait=script.wait)
        assert stats.passes == 2
        assert not script.stop.is_set()

    def test_a_stop_during_a_pass_ends_the_loop_before_its_wait(self) -> None:
        script = Script(Report())
        run_until_stopped(script.tick, stop=script.stop, wait=script.wait)
        assert script.waits == []


class TestErrors:
    def test_failures_back_off_exponentially_up_to_the_cap_and_reset_after_a_pass(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        # Given a tick that fails four times, succeeds, then fails again
        errors: list[Report | Exception | None] = [StoreDown(f"down {n}") for n in range(4)]
        script = Script(*errors, Report(), StoreDown("again"), Report())
        health = LoopHealth()
        logger = logging.getLogger("tests.runner")
        # When the runner runs it
        with caplog.at_level(logging.ERROR, logger="tests.runner"):
            stats = run_until_stopped(
                script.tick,
                stop=script.stop,
                wait=script.wait,
                retry=retry_policy(logger),
                health=health,
            )
        # Then each failure waited twice as long as the one before, at most the cap
        assert script.stop.delays == [0.5, 1.0, 2.0, 2.0, 0.5]
        assert stats.failures == 5
        assert caplog.messages[0] == "pass failed, retrying in 0.5s: down 0"
        assert health.status().ready

    def test_a_failed_pass_makes_the_service_not_ready_with_a_reason(self) -> None:
        health = LoopHealth()
        stop = threading.Event()

        def tick() -> Report:
            stop.set()
            raise StoreDown("connection refused")

        run_until_stopped(
            tick, stop=stop, retry=retry_policy(logging.getLogger("x")), health=health
        )
        status = health.status()
        assert status.alive and not status.ready
        assert status.reason == "the store is unavailable"

    def test_an_error_the_policy_does_not_name_propagates(self) -> None:
        script = Script(ValueError("a bug"), Report())
        with pytest.raises(ValueError, match="a bug"):
            run_until_stopped(
                script.tick,
                stop=script.stop,
                wait=script.wait,
                retry=retry_policy(logging.getLogger("x")),
            )

    def test_without_a_policy_every_error_propagates(self) -> None:
        script = Script(StoreDown("down"), Report())
        with pytest.raises(StoreDown):
            run_until_stopped(script.tick, stop=script.stop, wait=script.wait)


class TestHealthAndSignals:
    def test_every_pass_beats_the_health_with_the_ready_reason(self) -> None:
        health = LoopHealth()
        script = Script(Report(), Report())
        run_until_stopped(
            script.tick, stop=script.stop, wait=script.wait, health=health, ready_reason="active"
        )
        status = health.status()
        assert status.ready and status.reason == "active"

    def test_sigterm_calls_the_stop_function(self) -> None:
        stopped = threading.Event()
        previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        try:
            stop_on_signals(stopped.set)
            signal.raise_signal(signal.SIGTERM)
            assert stopped.is_set()
        finally:
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGINT, previous[1])
