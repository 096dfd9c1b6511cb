"""An open-loop HTTP load generator: requests at a fixed rate, latency from the scheduled send.

Request ``i`` of a run is due at ``start + i / rate``, whether or not the ones before it
have been answered (open loop). Its latency runs from that due time to the end of the
answer, so it includes any wait for a free connection. A server that falls behind shows
its queueing in the figures instead of slowing the generator down (no coordinated
omission). Plain ``wrk`` is closed-loop (each connection waits for its answer before
sending again), which is why this runs in Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

REQUEST_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class Request:
    """One request to send: method, path with query string, and an optional JSON body."""

    method: str
    path: str
    json: dict[str, Any] | None = None


@dataclass
class LoadResult:
    """What one fixed-rate run saw: the latency of each good answer, and the failures."""

    target_rps: float
    latencies_s: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # "status 503", "ReadTimeout", ...
    # Requests with no answer when the run was cut off, each with a lower bound of its
    # latency (the cut-off minus its due time).
    unanswered_s: list[float] = field(default_factory=list)
    lateness_max_s: float = 0.0  # how far behind its due time the generator queued a request
    span_s: float = 0.0  # from the first due time to the last answer

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def achieved_rps(self) -> float:
        """Good answers per second over the run's span."""
        return len(self.latencies_s) / self.span_s if self.span_s > 0 else 0.0


def run_fixed_rate(
    base_url: str,
    headers: dict[str, str],
    make_request: Callable[[int], Request],
    *,
    rate: float,
    duration_s: float,
    expected_status: int,
    connections: int = 64,
    grace_s: float = 30.0,
) -> LoadResult:
    """Send ``rate * duration_s`` requests at ``rate`` per second over at most
    ``connections`` connections; wait for the answers until ``grace_s`` after the last
    request was due, then give up on the rest."""
    run = _Run(make_request, expected_status, LoadResult(target_rps=rate))
    count = int(rate * duration_s)
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    client = httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=REQUEST_TIMEOUT_SECONDS
    )
    asyncio.run(run.drive(client, count, rate, connections, grace_s))
    return run.result


@dataclass
class _Run:
    """One run's shared state: a queue of due requests, drained by a fixed set of senders.

    A request waits in the queue while every connection is busy; that wait counts in its
    latency, since latency runs from its due time. Bounding the connections keeps the
    client's own cost flat when the server falls far behind.
    """

    make_request: Callable[[int], Request]
    expected_status: int
    result: LoadResult
    queue: asyncio.Queue[tuple[int, float]] = field(default_factory=asyncio.Queue)
    in_flight: dict[int, float] = field(default_factory=dict)  # index -> due time

    async def drive(
        self, client: httpx.AsyncClient, count: int, rate: float, senders: int, grace_s: float
    ) -> None:
        async with client:
            tasks = [asyncio.create_task(self._sender(client)) for _ in range(senders)]
            started = time.perf_counter()
            for index in range(count):
                due = started + index / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                else:
                    self.result.lateness_max_s = max(self.result.lateness_max_s, -delay)
                self.queue.put_nowait((index, due))
            cutoff = started + count / rate + grace_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.queue.join(), max(0.0, cutoff - time.perf_counter()))
            ended = time.perf_counter()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        waiting = [due for _, due in _drain(self.queue)] + list(self.in_flight.values())
        self.result.unanswered_s = [ended - due for due in waiting]
        self.result.span_s = ended - started

    async def _sender(self, client: httpx.AsyncClient) -> None:
        while True:
            index, due = await self.queue.get()
            self.in_flight[index] = due
            await self._send(client, self.make_request(index), due)
            del self.in_flight[index]
            self.queue.task_done()

    async def _send(self, client: httpx.AsyncClient, request: Request, due: float) -> None:
        result = self.result
        try:
            response = await client.request(request.method, request.path, json=request.json)
        except httpx.HTTPError as exc:
            kind = type(exc).__name__
            result.errors[kind] = result.errors.get(kind, 0) + 1
            return
        if response.status_code != self.expected_status:
            kind = f"status {response.status_code}"
            result.errors[kind] = result.errors.get(kind, 0) + 1
            return
        result.latencies_s.append(time.perf_counter() - due)


def _drain(queue: asyncio.Queue[tuple[int, float]]) -> list[tuple[int, float]]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items
