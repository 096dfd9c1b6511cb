"""Raw-Celery baseline for bench/dispatch.py: no-op tasks with tickwork's Celery settings.

The module is both the Celery app that the baseline's workers load
(``celery -A _raw_celery_app worker``, with ``bench/`` on ``PYTHONPATH``) and, run as a
script, the client that times them. The settings are those of tickwork's agents
(``make_celery``): JSON only, ``task_acks_late``, a prefetch of 1, the Redis
broker with every key under ``TICKWORK_REDIS_PREFIX``, no remote control and no events;
on kombu's own Redis transport, as plain Celery has it.
Results go to a Redis result backend under the same prefix. A worker that is ready to
consume touches a file named after it in ``TICKWORK_BENCH_READY_DIR``, whatever its log
level.

As a script it sends ``--warmup`` tasks and waits for them, then ``--rounds`` times sends
``--tasks`` tasks and waits for every result. The clock runs from the first send to the
last result. With ``--chain N`` it then runs a chain of ``--chain-warmup`` links, and one
of N links (:func:`chain_link`): each link, in the worker, sends the next one when its
no-op has ended, as tickwork's executor sends a chain's next task once it has the result
of the one before; no canvas, nothing precomputed. Each link returns its start and end
(``time.time()`` in the worker's pool process) as its result. It prints one JSON object:
each round's publish and wall seconds, and the chain's times per link and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from celery.result import ResultSet
from celery.signals import worker_ready

from tickwork.shared.dispatch.celery_app import RedisSettings, make_celery

REDIS_URL = os.environ.get("TICKWORK_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("TICKWORK_REDIS_PREFIX", "tickwork_bench_raw:")
QUEUE = "default"

# tickwork's own Celery settings (shared/dispatch/celery_app.py), plus what a plain Celery
# user has and tickwork replaces: results, here in Redis under the same prefix.
app = make_celery(RedisSettings(REDIS_URL, PREFIX), name="tickwork_bench_raw")
app.conf.update(
    # kombu's own Redis transport, as a plain Celery user has it: not tickwork's channel
    # that keeps one client (tickwork.shared.dispatch.kept_client.KeptClientTransport).
    broker_transport=None,
    result_backend=REDIS_URL,
    task_ignore_result=False,
    result_accept_content=["json"],
    result_backend_transport_options={"global_keyprefix": PREFIX},
    result_expires=3600,
)
assert app.conf.task_default_queue == QUEUE


def note_ready(sender: Any, **_kwargs: Any) -> None:
    """Tell bench/dispatch.py that this worker consumes: a file named after it."""
    ready_dir = os.environ.get("TICKWORK_BENCH_READY_DIR")
    if ready_dir:
        (Path(ready_dir) / str(sender.hostname)).touch()


def noop(index: int) -> int:
    """The no-op task: return the argument."""
    return index


def link_id(chain_id: str, index: int) -> str:
    """The task id of a chain's link ``index``: known in advance, to read its result."""
    return f"{chain_id}.{index}"


def chain_link(chain_id: str, index: int, links: int) -> list[float]:
    """A no-op link of a chain of ``links``: send the next link, return [start, end].

    The end is taken when the no-op is done, just before the next link is sent, so that
    one link's end to the next one's covers what tickwork's hop does: sending, the
    broker, a worker taking the message, and the next no-op.
    """
    started = time.time()
    ended = time.time()
    if index + 1 < links:
        chain_link_task.apply_async(
            (chain_id, index + 1, links), task_id=link_id(chain_id, index + 1)
        )
    return [started, ended]


# Registered without decorators, which Celery leaves untyped.
worker_ready.connect(note_ready)
noop_task: Any = app.task(name="bench.noop")(noop)
chain_link_task: Any = app.task(name="bench.chain_link")(chain_link)


def send_and_wait(count: int, timeout_seconds: float) -> tuple[float, float]:
    """Send ``count`` no-op tasks, wait for every result; (publish s, wall s)."""
    started = time.perf_counter()
    results: list[Any] = [noop_task.delay(index) for index in range(count)]
    published = time.perf_counter()
    values = ResultSet(results).join_native(timeout=timeout_seconds, propagate=True)
    ended = time.perf_counter()
    if sorted(values) != list(range(count)):
        raise SystemExit(f"raw Celery: {len(values)} results for {count} tasks, not all of them")
    return published - started, ended - started


def run_chain(links: int, timeout_seconds: float) -> tuple[list[list[float]], float]:
    """Send a chain's first link, wait for its last; (each link's [start, end], wall s)."""
    chain_id = uuid.uuid4().hex
    ids = [link_id(chain_id, index) for index in range(links)]
    started = time.perf_counter()
    chain_link_task.apply_async((chain_id, 0, links), task_id=ids[0])
    app.AsyncResult(ids[-1]).get(timeout=timeout_seconds)
    ended = time.perf_counter()
    results = ResultSet([app.AsyncResult(task_id) for task_id in ids])
    times: list[list[float]] = results.join_native(timeout=timeout_seconds, propagate=True)
    return times, ended - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="fan-out size; 0: none")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--chain", type=int, default=0, help="chain length; 0: no chain")
    parser.add_argument("--chain-warmup", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per batch")
    args = parser.parse_args()
    found: dict[str, Any] = {"tasks": args.tasks, "rounds": []}
    if args.tasks:
        if args.warmup:
            send_and_wait(args.warmup, args.timeout)
        found["rounds"] = [send_and_wait(args.tasks, args.timeout) for _ in range(args.rounds)]
    if args.chain:
        if args.chain_warmup > 1:
            run_chain(args.chain_warmup, args.timeout)
        found["chain_times"], found["chain_wall_seconds"] = run_chain(args.chain, args.timeout)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
