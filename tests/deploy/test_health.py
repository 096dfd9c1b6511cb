"""The probes of the services without a web server of their own: ``/healthz`` says the
loop turns, ``/readyz`` that the last pass succeeded; both beside ``/metrics``."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from tests.fault._cluster import Cluster, workflow_text
from tests.support.servers import find_free_port
from tests.support.waiting import wait_until
from tickwork.services.agent.worker import BEAT_SECONDS
from tickwork.services.scheduler.loop import Scheduler
from tickwork.services.scheduler.main import run as run_scheduler
from tickwork.shared.health import LoopHealth, serve_health
from tickwork.shared.store.engine import create_store_engine

PROBE_TIMEOUT_SECONDS = 30.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _get(port: int, path: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    if path in ("/healthz", "/readyz", "/livez"):
        return status, json.loads(body)
    return status, body


class TestLoopHealth:
    def test_a_starting_service_is_alive_but_not_ready(self) -> None:
        status = LoopHealth(clock=FakeClock()).status()
        assert status.alive and not status.ready
        assert status.reason == "starting"

    def test_a_loop_that_beats_is_alive_and_ready(self) -> None:
        clock = FakeClock()
        health = LoopHealth(stale_after=60, clock=clock)
        health.beat()
        clock.now += 59
        assert health.status().alive and health.status().ready

    def test_a_loop_that_stopped_beating_is_not_alive(self) -> None:
        clock = FakeClock()
        health = LoopHealth(stale_after=60, clock=clock)
        health.beat()
        clock.now += 61
        status = health.status()
        assert not status.alive and not status.ready
        assert status.reason == "no pass for 61s"

    def test_a_failed_pass_keeps_the_service_alive_but_not_ready(self) -> None:
        health = LoopHealth(clock=FakeClock())
        health.beat(ready=False, reason="the store is unavailable")
        status = health.status()
        assert status.alive and not status.ready
        assert status.reason == "the store is unavailable"

    def test_a_service_whose_beat_is_late_for_readiness_is_not_ready_but_still_alive(
        self,
    ) -> None:
        clock = FakeClock()
        health = LoopHealth(stale_after=900, clock=clock, ready_within=30)
        health.beat()
        clock.now += 31
        status = health.status()
        assert status.alive and not status.ready
        assert status.reason == "no pass for 31s"
        health.beat()
        assert health.status().ready

    def test_a_draining_service_stays_alive_however_long_it_drains(self) -> None:
        clock = FakeClock()
        health = LoopHealth(stale_after=60, clock=clock)
        health.beat()
        health.drain("draining: SIGTERM received")
        clock.now += 3600
        status = health.status()
        assert status.alive and not status.ready
        assert status.reason == "draining: SIGTERM received"


class TestSchedulerHealth:
    def test_a_scheduler_whose_store_is_down_stays_alive_but_not_ready(self) -> None:
        engine = create_store_engine("postgresql://postgres@127.0.0.1:1/unreachable")
        scheduler = Scheduler(engine)
        thread = threading.Thread(target=run_scheduler, args=(scheduler,), daemon=True)
        thread.start()
        try:
            wait_until(
                "the scheduler notes the store is down",
                lambda: scheduler.health.status().reason == "the store is unavailable",
                PROBE_TIMEOUT_SECONDS,
            )
            status = scheduler.health.status()
            assert status.alive and not status.ready
        finally:
            scheduler.stop()
            thread.join(timeout=PROBE_TIMEOUT_SECONDS)
            engine.dispose()
        assert not thread.is_alive()


class TestHealthServer:
    def test_the_port_serves_probes_as_json_and_metrics_on_every_other_path(self) -> None:
        registry = CollectorRegistry()
        Counter("tickwork_test_things", "Things.", registry=registry).inc()
        clock = FakeClock()
        health = LoopHealth(stale_after=60, clock=clock)
        port = find_free_port()
        server = serve_health(port, registry, health, "127.0.0.1")
        try:
            assert _get(port, "/healthz") == (
                200,
                {
                    "status": "ok",
                    "ready": False,
                    "seconds_since_last_pass": None,
                    "reason": "starting",
                },
            )
            assert _get(port, "/readyz")[0] == 503
            health.beat()
            assert _get(port, "/readyz")[0] == 200
            clock.now += 120
            status, body = _get(port, "/healthz")
            assert status == 503
            assert isinstance(body, dict) and body["status"] == "stale"
            status, text = _get(port, "/metrics")
            assert status == 200 and "tickwork_test_things_total 1.0" in str(text)
        finally:
            server.shutdown()
            server.server_close()


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(120)
class TestServiceProbes:
    def test_scheduler_executor_and_agent_answer_their_probes(self, cluster: Cluster) -> None:
        services = [cluster.start_scheduler(), cluster.start_executor(), cluster.start_agent("a")]
        for service in services:
            wait_until(
                f"{service.name} is ready",
                lambda s=service: _get(s.metrics_port, "/readyz")[0] == 200,
                PROBE_TIMEOUT_SECONDS,
            )
            assert _get(service.metrics_port, "/healthz")[0] == 200

    def test_an_idle_agent_keeps_beating_from_its_event_loop(self, cluster: Cluster) -> None:
        agent = cluster.start_agent("a")
        ages: list[float] = []

        def beat_again() -> bool:
            status, body = _get(agent.metrics_port, "/healthz")
            assert status == 200 and isinstance(body, dict), body
            age = body["seconds_since_last_pass"]
            ages.append(-1.0 if age is None else float(age))
            return len(ages) > 1 and 0 <= ages[-1] < ages[-2]

        wait_until("the agent beats again", beat_again, BEAT_SECONDS + PROBE_TIMEOUT_SECONDS, 0.5)

    def test_an_agent_given_sigterm_is_alive_but_not_ready_while_it_drains(
        self, cluster: Cluster
    ) -> None:
        cluster.start_executor()
        agent = cluster.start_agent("a", grace_seconds=30)
        work = cluster.ledger.task("work", sleep_seconds=4)
        attempt = cluster.submit("drain", workflow_text({"work": work}))
        cluster.wait_for_start("work", PROBE_TIMEOUT_SECONDS)

        cluster.stop_agent("a")
        wait_until(
            "the agent is not ready",
            lambda: _get(agent.metrics_port, "/readyz")[0] == 503,
            PROBE_TIMEOUT_SECONDS,
        )
        status, body = _get(agent.metrics_port, "/healthz")
        assert status == 200 and isinstance(body, dict)
        assert body["reason"] == "draining: SIGTERM received"
        assert agent.wait_exit(60) == 0
        assert cluster.wait_for_attempt_end(attempt, 40) == "success"
