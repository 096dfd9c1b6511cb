"""A Redis Sentinel deployment of real processes for failover specs: a primary, a replica
and three sentinels, each a ``redis-server`` on a free port under one temporary directory.

The sentinels notice a dead primary after :data:`DOWN_AFTER_MS` and promote the replica;
:meth:`SentinelDeployment.kill_primary` kills the primary with SIGKILL and
:meth:`SentinelDeployment.wait_for_failover` waits (bounded) until they name the replica.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.servers import (
    REDIS_START_TIMEOUT_SECONDS,
    RedisAddress,
    RespClient,
    RespError,
    ServerUnavailable,
    ThrowawayRedis,
    find_free_port,
)

MASTER = "tickwork"
DOWN_AFTER_MS = 1000
"""How long the primary must be silent before a sentinel calls it down."""
FAILOVER_TIMEOUT_MS = 5000
QUORUM = 2


@dataclass
class SentinelDeployment:
    """A primary, a replica and three sentinels watching them (see the module docstring)."""

    binary: str
    root: Path
    primary: ThrowawayRedis
    replica: ThrowawayRedis
    sentinels: list[ThrowawayRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The deployment as ``TICKWORK_REDIS_URL`` names it."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"sentinel://{hosts}/{MASTER}/0"

    @classmethod
    def start(cls, binary: str, root: Path) -> SentinelDeployment:
        primary = ThrowawayRedis.start(binary, root=root / "primary")
        deployment = cls(binary, root, primary, primary)
        try:
            deployment.replica = ThrowawayRedis.start(
                binary,
                root=root / "replica",
                extra_args=["--replicaof", "127.0.0.1", str(primary.port)],
            )
            deployment._wait_for_replication()
            for n in range(3):
                deployment.sentinels.append(deployment._start_sentinel(root / f"sentinel-{n}"))
            deployment._wait_until_sentinels_see_the_replica()
        except BaseException:
            deployment.stop()
            raise
        return deployment

    def _start_sentinel(self, directory: Path) -> ThrowawayRedis:
        directory.mkdir(parents=True)
        config = directory / "sentinel.conf"
        config.write_text(
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        return ThrowawayRedis.start(
            self.binary,
            root=directory,
            config_file=config,
            sentinel=True,
        )

    def _wait_for_replication(self) -> None:
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with RespClient(RedisAddress.from_url(self.replica.url)) as client:
                info = client.command("INFO", "replication")
            if isinstance(info, bytes) and b"master_link_status:up" in info:
                return
            time.sleep(0.05)
        raise ServerUnavailable("the replica did not catch up with the primary")

    def _wait_until_sentinels_see_the_replica(self) -> None:
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if all(self._replicas_known(s) and self._peers_known(s) for s in self.sentinels):
                return
            time.sleep(0.1)
        raise ServerUnavailable("the sentinels did not discover the replica and each other")

    def _replicas_known(self, sentinel: ThrowawayRedis) -> bool:
        with RespClient(RedisAddress.from_url(sentinel.url)) as client:
            replicas = client.command("SENTINEL", "REPLICAS", MASTER)
        return isinstance(replicas, list) and len(replicas) >= 1

    def _peers_known(self, sentinel: ThrowawayRedis) -> bool:
        with RespClient(RedisAddress.from_url(sentinel.url)) as client:
            peers = client.command("SENTINEL", "SENTINELS", MASTER)
        return isinstance(peers, list) and len(peers) >= len(self.sentinels) - 1

    def primary_port(self) -> int | None:
        """The port the first sentinel that answers names as the primary's."""
        for sentinel in self.sentinels:
            with contextlib.suppress(OSError, RespError, ConnectionError):
                with RespClient(RedisAddress.from_url(sentinel.url), 1.0) as client:
                    reply = client.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
                if isinstance(reply, list) and len(reply) == 2 and isinstance(reply[1], bytes):
                    return int(reply[1])
        return None

    def kill_primary(self) -> None:
        """SIGKILL the primary; it stays dead."""
        self.primary.process.kill()
        self.primary.process.wait(timeout=10)

    def wait_for_failover(self, timeout_seconds: float) -> float:
        """Wait until the sentinels name the replica as the primary; the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout_seconds
        while time.monotonic() < deadline:
            if self.primary_port() == self.replica.port:
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"the sentinels did not promote the replica in {timeout_seconds}s")

    def stop(self) -> None:
        for server in [*self.sentinels, self.replica, self.primary]:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def start_sentinel_deployment(root: Path) -> SentinelDeployment:
    """A running deployment under ``root``; ServerUnavailable without ``redis-server``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable("needs the redis-server binary (Debian's redis-server package)")
    return SentinelDeployment.start(binary, root)


