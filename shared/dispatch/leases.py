"""Task leases in Redis: who runs a task under which fencing token, and for how long.

A lease is one key per task, ``<prefix>lease:<task id>``, holding ``<token>:<holder>`` with
a time to live. The holder is an agent's run id while a task runs, or one of three marks
the executor and agents leave between runs:

- ``queued``: the executor published the message for this token (its outbox mark). A
  queued task with no key at all lost its message (Redis restarted empty, or the executor
  died between commit and publish) and is published again.
- ``done``: the agent finished and its result is on the way; duplicates of the message
  are refused while the mark lasts. The agent keeps the result until the mark says
  ``applied`` (or a newer token holds the key); should the mark vanish (Redis restarted
  empty), the agent puts it back and sends the result again (see
  :mod:`tickwork.services.agent.outbox`).
- ``applied``: the executor committed (or refused) the result of this token; the agent
  forgets it, and duplicates of the message are refused.
- ``canceled``: the task was killed; its message is refused when it arrives.

An agent takes the lease before it runs a task message and extends it while the task runs
(every TTL/3); an agent that cannot extend its lease has lost the task and must stop
running it. Every change is a Lua script, so check and change are one step:

- *take* succeeds when no lease exists, when the existing one is for an older token (the
  executor has requeued the task since: the newer message wins), or when it is the
  ``queued`` mark of the same token. A message for an older token than the lease's, or
  for the same token held, finished or canceled by anyone else, is refused.
- *extend*, *finish* and *release* act only for the lease's current holder and token.

Losing Redis loses the leases: running agents then fail their next extension and stop,
and the executor requeues their tasks when it sees them silent. No result is lost: results
are fenced by the token in the store, not here, and a finished run's result waits in its
agent until the executor marks it ``applied``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError, RedisError

QUEUED = "queued"
DONE = "done"
APPLIED = "applied"
CANCELED = "canceled"

_TAKE = """
local current = redis.call('GET', KEYS[1])
if current then
  local held = tonumber(string.match(current, '^(%d+):'))
  if held and held >= tonumber(ARGV[1]) then
    if current ~= ARGV[2] and current ~= ARGV[1] .. ':queued' then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
return 1
"""

# Leave a mark for a token unless a newer token (or the same one, when ARGV[4] is 0)
# is already there: an agent may have taken the lease before the executor marks it queued.
_MARK = """
local current = redis.call('GET', KEYS[1])
if current then
  local held = tonumber(string.match(current, '^(%d+):'))
  if held and (held > tonumber(ARGV[1]) or (held == tonumber(ARGV[1]) and ARGV[4] == '0')) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2], 'PX', ARGV[3])
return 1
"""

_FINISH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""

# An agent holding the result of ARGV[1]: 0 when the key says it is settled (applied,
# canceled, or a newer token there), 1 while its done mark is in place, 2 when the mark
# was gone (Redis lost it) and is put back: the caller sends the result again. A run of the
# same token by someone else (its message was published again) is stopped by the mark.
_RESTORE = """
local current = redis.call('GET', KEYS[1])
if current then
  local held = tonumber(string.match(current, '^(%d+):'))
  if held and held > tonumber(ARGV[1]) then
    return 0
  end
  if current == ARGV[1] .. ':applied' or current == ARGV[1] .. ':canceled' then
    return 0
  end
  if current == ARGV[1] .. ':done' then
    return 1
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':done', 'PX', ARGV[2])
return 2
"""

# Keep a mark longer, but only if it is still there: a mark that Redis lost meanwhile
# (it restarted empty) must stay lost, or the reaper would trust a message that is gone.
_CONFIRM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0
"""

TAKEN_TTL_FACTOR = 10
"""The note that an agent took a token outlives the lease by this factor: long enough for
the reaper to see that the agent died before it said it started."""


class ResultMark(IntEnum):
    """What a finished run's lease key says of its result (:meth:`LeaseStore.restore_done`)."""

    SETTLED = 0  # applied or refused by the executor, canceled, or a newer token issued
    ON_THE_WAY = 1  # the ``done`` mark is there: the executor has not applied it yet
    RESTORED = 2  # the mark was gone (Redis lost it) and is back: send the result again


@dataclass(frozen=True)
class LeaseState:
    """What Redis knows of a task: its lease or mark, and the newest token an agent took
    (0 if none) that has not finished; an agent that took a token and then vanished
    leaves ``taken`` behind its expired lease."""

    current: Lease | None
    taken: int
    unconfirmed: bool = False
    """The current value is a ``queued`` mark its publisher never confirmed: the message
    may never have been sent (the publisher died between marking and sending)."""


@dataclass(frozen=True)
class Lease:
    """Who holds a task: its fencing token and the agent's owner id."""

    task_id: int
    token: int
    owner: str

    @property
    def value(self) -> str:
        """What the lease key holds."""
        return f"{self.token}:{self.owner}"

    @classmethod
    def parse(cls, task_id: int, raw: bytes | str | None) -> Lease | None:
        """The lease a key's value describes; None for no (or an unreadable) value."""
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        token, _, owner = text.partition(":")
        try:
            return cls(task_id, int(token), owner)
        except ValueError:
            return None


class LeaseStore:
    """Takes, extends and releases task leases in one Redis, under a key prefix."""

    def __init__(self, client: Redis, prefix: str = "tickwork:") -> None:
        self.client = client
        self.prefix = prefix
        self._take = client.register_script(_TAKE)
        self._extend = client.register_script(_EXTEND)
        self._release = client.register_script(_RELEASE)
        self._mark = client.register_script(_MARK)
        self._finish = client.register_script(_FINISH)
        self._confirm = client.register_script(_CONFIRM)
        self._restore = client.register_script(_RESTORE)

    def key(self, task_id: int) -> str:
        """The Redis key of a task's lease."""
        return f"{self.prefix}lease:{task_id}"

    def taken_key(self, task_id: int) -> str:
        """The Redis key of the newest token an agent took for a task and did not finish."""
        return f"{self.prefix}taken:{task_id}"

    def take(self, lease: Lease, ttl_ms: int) -> bool:
        """Take the lease for ``lease.token``; False if a newer or another owner's holds it.

        Taking one's own lease again only renews it, so a redelivered message is harmless.
        """
        if ttl_ms <= 0:
            raise ValueError("a lease needs a positive time to live")
        keys = [self.key(lease.task_id), self.taken_key(lease.task_id)]
        args: list[str | int] = [lease.token, lease.value, ttl_ms, ttl_ms * TAKEN_TTL_FACTOR]
        return bool(self._take(keys=keys, args=args))

    def extend(self, lease: Lease, ttl_ms: int) -> bool:
        """Renew the lease for another ``ttl_ms``; False if it is no longer ours."""
        return bool(self._extend(keys=[self.key(lease.task_id)], args=[lease.value, ttl_ms]))

    def release(self, lease: Lease) -> bool:
        """Give the lease up (another agent may take the task at once); False if not ours."""
        keys = [self.key(lease.task_id), self.taken_key(lease.task_id)]
        return bool(self._release(keys=keys, args=[lease.value]))

    def finish(self, lease: Lease, ttl_ms: int, *, pipe: Pipeline | None = None) -> bool:
        """Turn our lease into the ``done`` mark for ``ttl_ms``: duplicates of the message
        are refused while the result travels to the executor. Given ``pipe``, the command
        joins it (and True is returned before it ran)."""
        done = f"{lease.token}:{DONE}"
        args: list[str | int] = [lease.value, done, ttl_ms]
        keys = [self.key(lease.task_id), self.taken_key(lease.task_id)]
        if pipe is not None:
            self._finish(keys=keys, args=args, client=pipe)
            return True
        return bool(self._finish(keys=keys, args=args))

    def mark(
        self,
        tasks: Sequence[tuple[int, int]],
        mark: str,
        ttl_ms: int,
        *,
        replace: bool = False,
        pipe: Pipeline | None = None,
    ) -> None:
        """Leave ``mark`` on each ``(task id, token)`` unless a newer token holds the key;
        ``replace`` also overwrites the same token (a kill takes the lease from its agent).
        Given ``pipe``, the commands join it and the caller executes it."""
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if pipe is None else pipe
        for task_id, token in tasks:
            args: list[str | int] = [token, mark, ttl_ms, 1 if replace else 0]
            self._mark(keys=[self.key(task_id)], args=args, client=pipe)
        if own:
            self.execute(pipe)

    def execute(self, pipe: Pipeline) -> list[Any]:
        """Execute ``pipe``, its scripts called by digest in the same round trip (redis-py
        would first ask Redis whether it has them, a round trip of its own). Should Redis
        have lost them (it restarted), they are loaded and the script calls alone sent
        again, by the digests Redis gave; the first other error is then raised, as
        :meth:`Pipeline.execute` would."""
        scripts, stack = list(pipe.scripts), list(pipe.command_stack)
        pipe.scripts.clear()
        replies = pipe.execute(raise_on_error=False)
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:
            by_digest = {script.sha: script for script in scripts}
            for script in by_digest.values():
                script.sha = self.client.script_load(script.script)
            again = self.client.pipeline(transaction=False)
            for n in lost:
                args, options = stack[n]
                called = by_digest.get(args[1])
                if called is not None:  # EVALSHA <digest> ...: by the digest Redis has now
                    args = (args[0], called.sha, *args[2:])
                again.execute_command(*args, **options)  # type: ignore[no-untyped-call]
            for n, reply in zip(lost, again.execute(raise_on_error=False), strict=True):
                replies[n] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def restore_done(self, tasks: Sequence[tuple[int, int]], ttl_ms: int) -> list[ResultMark]:
        """For each finished ``(task id, token)`` whose result an agent holds: what its
        lease key says of it, in one round trip; a lost ``done`` mark is put back for
        ``ttl_ms`` (see :class:`ResultMark`)."""
        if not tasks:
            return []
        pipe = self.client.pipeline(transaction=False)
        for task_id, token in tasks:
            self._restore(keys=[self.key(task_id)], args=[token, ttl_ms], client=pipe)
        return [ResultMark(int(code)) for code in self.execute(pipe)]

    def holder(self, task_id: int) -> Lease | None:
        """The current lease of a task, if any."""
        return Lease.parse(task_id, self.client.get(self.key(task_id)))

    def confirm(
        self, tasks: Sequence[tuple[int, int]], mark: str, ttl_ms: int, pipe: Pipeline
    ) -> None:
        """Give each ``(task id, token)``'s ``mark`` ``ttl_ms`` more, where it is still there."""
        for task_id, token in tasks:
            args: list[str | int] = [f"{token}:{mark}", ttl_ms]
            self._confirm(keys=[self.key(task_id)], args=args, client=pipe)

    def states(self, task_ids: Sequence[int]) -> dict[int, LeaseState]:
        """What Redis knows of each task (see :class:`LeaseState`), in one round trip."""
        if not task_ids:
            return {}
        keys = [self.key(i) for i in task_ids] + [self.taken_key(i) for i in task_ids]
        raw = self.client.mget(keys)
        states: dict[int, LeaseState] = {}
        for n, task_id in enumerate(task_ids):
            taken = raw[len(task_ids) + n]
            states[task_id] = LeaseState(
                Lease.parse(task_id, raw[n]), int(taken) if taken and taken.isdigit() else 0
            )
        return states

    def remaining_ms(self, task_id: int) -> int | None:
        """Milliseconds left on a task's lease; None when there is no lease."""
        left = int(self.client.pttl(self.key(task_id)))
        return None if left < 0 else left


class Heartbeat:
    """Extends the leases an agent holds every ``interval_ms`` (``ttl_ms / 3`` unless told),
    in a background thread.

    When an extension fails (the lease expired, or a newer token took it over), the lease
    is dropped from the set and ``on_lost`` is called with it: the caller must stop the
    task's process and report nothing. A Redis error counts as a failed extension once the
    lease's own time is up, not before: a short network blip does not kill tasks.
    """

    def __init__(
        self,
        leases: LeaseStore,
        ttl_ms: int,
        on_lost: Callable[[Lease], None],
        interval_ms: int | None = None,
    ) -> None:
        self.leases = leases
        self.ttl_ms = ttl_ms
        self.interval_ms = interval_ms or ttl_ms // 3
        self.on_lost = on_lost
        self._held: dict[int, tuple[Lease, float]] = {}  # task id -> (lease, valid until)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def start(self) -> None:
        """Start beating."""
        self._thread.start()

    def hold(self, lease: Lease) -> None:
        """Keep ``lease`` alive from now on (it has just been taken)."""
        with self._lock:
            self._held[lease.task_id] = (lease, time.monotonic() + self.ttl_ms / 1000)

    def drop(self, lease: Lease) -> None:
        """Stop extending ``lease`` (its task ended)."""
        with self._lock:
            current = self._held.get(lease.task_id)
            if current is not None and current[0] == lease:
                del self._held[lease.task_id]

    def held(self) -> list[Lease]:
        """The leases being kept alive."""
        with self._lock:
            return [lease for lease, _ in self._held.values()]

    def beat(self) -> None:
        """Extend every held lease once; call ``on_lost`` for those that are gone."""
        for lease in self.held():
            try:
                extended = self.leases.extend(lease, self.ttl_ms)
            except RedisError:
                with self._lock:
                    entry = self._held.get(lease.task_id)
                extended = entry is not None and time.monotonic() < entry[1]
                if extended:
                    continue
            if extended:
                with self._lock:
                    if lease.task_id in self._held:
                        self._held[lease.task_id] = (lease, time.monotonic() + self.ttl_ms / 1000)
                continue
            self.drop(lease)
            self.on_lost(lease)

    def wake(self) -> None:
        """Beat now rather than at the next interval (a kill may have taken a lease)."""
        self._wake.set()

    def _run(self) -> None:
        interval = self.interval_ms / 1000
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if not self._stop.is_set():
                self.beat()

    def stop(self) -> None:
        """Stop beating (held leases then expire unless released)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.ttl_ms / 1000)
