"""Whether Redis lost its keys a moment ago: the reaper then waits before trusting leases.

The reaper requeues a task whose lease key holds nothing for its token: its agent is gone.
When Redis restarts with nothing on disk every key is gone at once, also the ``done``
marks of results that agents hold and are about to send again (see
:mod:`tickwork.services.agent.outbox`, which puts them back within half a second of Redis coming
back). A task requeued meanwhile would refuse its own result and run twice.

So the executor keeps a marker key that nothing else writes. Finding it missing means
Redis lost its keys (or this keyspace is new): the marker is put back and a second key,
living :data:`SETTLE_MS`, says the keyspace is settling; while it lives the reaper leaves
every task alone. Both steps are one Lua script, so executors that overlap agree on one
settling time.
"""

from __future__ import annotations

import logging

from redis import Redis

log = logging.getLogger(__name__)

SETTLE_MS = 5000
"""How long after Redis lost its keys missing leases are not trusted: ten times what an
agent takes to put back the marks of the results it holds."""

# KEYS: the marker, the settling key. Returns {1 if the marker was missing, ms to settle}.
_CHECK = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[2])}
end
redis.call('SET', KEYS[1], '1')
if tonumber(ARGV[1]) > 0 then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
end
return {1, tonumber(ARGV[1])}
"""


class KeyspaceWatch:
    """Notices that Redis lost the keys under ``prefix``, and for how long to wait then
    (``settle_ms``; 0 never waits)."""

    def __init__(self, client: Redis, prefix: str, settle_ms: int = SETTLE_MS) -> None:
        self.marker_key = f"{prefix}keyspace-marker"
        self.settling_key = f"{prefix}keyspace-settling"
        self.settle_ms = settle_ms
        self._check = client.register_script(_CHECK)

    def settling_ms(self) -> int:
        """Milliseconds before a missing lease means a lost agent again; 0 when it does.

        The first call after Redis lost its keys starts the wait (and says so in the log).
        """
        lost, left = self._check(keys=[self.marker_key, self.settling_key], args=[self.settle_ms])
        if lost and self.settle_ms > 0:
            log.info(
                "no keyspace marker in Redis (it restarted empty, or the keyspace is new): "
                "the reaper waits %.1fs for agents to restore the marks of their results",
                self.settle_ms / 1000,
            )
        return max(0, int(left))
