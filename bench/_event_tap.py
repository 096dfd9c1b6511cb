"""A read-only tap on the agents' event stream, for bench/dispatch.py.

Agents append ``started`` and ``finished`` events, stamped with their own clock, to the
Redis stream of the attempt's partition, ``<prefix>events:<partition>`` (or the single
``<prefix>events`` of old); the executors read them through a consumer group and
deletes each entry once its pass has committed. This tap reads all of those streams with plain
``XREAD`` (outside any group, so the executor's reading is unaffected) in a thread,
blocking for new entries, so it sees each one as it is appended, well before the executor
deletes it. An entry deleted before the tap read it is simply missing.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import redis

BLOCK_MS = 100
PARTITIONS = 16  # the executors' default (TICKWORK_EXECUTOR_PARTITIONS)


@dataclass(frozen=True)
class AgentTimes:
    """When an agent started and ended one task run (unix seconds, the agent's clock)."""

    started_at: float | None = None
    finished_at: float | None = None


class EventTap:
    """Collects the agents' ``started_at``/``finished_at`` per task id while it is open."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.key = f"{prefix}events"
        self.keys = [self.key, *(f"{prefix}events:{p}" for p in range(PARTITIONS))]
        self.client = redis.Redis.from_url(redis_url, socket_timeout=10)
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.failure: Exception | None = None
        self._last = dict.fromkeys(self.keys, "$")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="event-tap", daemon=True)

    def __enter__(self) -> EventTap:
        # The id of the newest entry, so that nothing appended from now on is missed.
        for key in self.keys:
            newest: Any = self.client.xrevrange(key, count=1)  # redis-py's types are loose
            if newest:
                self._last[key] = _text(newest[0][0])
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        time.sleep(0.05)  # the last events of the attempt
        self._stop.set()
        self._thread.join(2 * BLOCK_MS / 1000 + 5)
        self.client.close()

    def times(self, task_id: int) -> AgentTimes:
        return AgentTimes(self.started.get(task_id), self.finished.get(task_id))

    def _read(self) -> None:
        try:
            while not self._stop.is_set():
                streams: Any = self._last
                reply: Any = self.client.xread(streams, count=1000, block=BLOCK_MS)
                for stream, entries in reply or []:
                    for entry_id, fields in entries:
                        self._last[_text(stream)] = _text(entry_id)
                        self._note(fields.get(b"e"))
        except (redis.RedisError, OSError) as exc:  # reported by the caller, not fatal
            self.failure = exc

    def _note(self, raw: bytes | None) -> None:
        try:
            body = json.loads(raw) if raw is not None else None
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        kind, task_id = body.get("kind"), body.get("task_id")
        if kind == "started" and isinstance(task_id, int):
            self.started.setdefault(task_id, float(body["started_at"]))
        elif kind == "finished" and isinstance(task_id, int):
            self.finished.setdefault(task_id, float(body["finished_at"]))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
