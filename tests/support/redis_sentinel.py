"""A Redis Sentinel deployment of real processes for failover specs: a primary, a replica
and three sentinels, each a ``redis-server`` on a free port under one temporary directory.

The sentinels notice a dead primary after :data:`DOWN_AFTER_MS` and promote the replica;
:meth:`SentinelDeployment.kill_primary` kills the primary with SIGKILL and
:meth:`SentinelDeployment.wait_for_failover` waits (bounded) until they name the replica.

With :class:`Protection`, the data nodes and the sentinels require passwords of their own
and speak TLS only, with a certificate made for the run.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from tests.support.servers import (
    REDIS_START_TIMEOUT_SECONDS,
    RespError,
    ServerUnavailable,
    ThrowawayRedis,
)
from tests.support.smtp import self_signed_certificate

MASTER = "tickwork"
DOWN_AFTER_MS = 1000
"""How long the primary must be silent before a sentinel calls it down."""
FAILOVER_TIMEOUT_MS = 5000
QUORUM = 2


@dataclass(frozen=True)
class Protection:
    """Passwords for the data nodes and for the sentinels, and TLS everywhere."""

    password: str
    sentinel_password: str
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> Protection:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = self_signed_certificate(directory)
        return cls("data-pass", "sentinel-pass", cert, key)

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))

    def server_args(self) -> list[str]:
        """TLS on the server's port, for clients and for replication."""
        return [
            "--tls-cert-file",
            str(self.cert),
            "--tls-key-file",
            str(self.key),
            "--tls-ca-cert-file",
            str(self.cert),
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "yes",
        ]


@dataclass
class SentinelDeployment:
    """A primary, a replica and three sentinels watching them (see the module docstring)."""

    binary: str
    root: Path
    primary: ThrowawayRedis
    replica: ThrowawayRedis
    protection: Protection | None = None
    sentinels: list[ThrowawayRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The deployment as ``TICKWORK_REDIS_URL`` names it."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        p = self.protection
        if p is None:
            return f"sentinel://{hosts}/{MASTER}/0"
        query = f"sentinel_password={quote(p.sentinel_password)}&ssl_ca_certs={quote(str(p.cert))}"
        return f"sentinels://:{quote(p.password)}@{hosts}/{MASTER}/0?{query}"

    @classmethod
    def start(
        cls, binary: str, root: Path, protection: Protection | None = None
    ) -> SentinelDeployment:
        primary = cls._start_node(binary, root / "primary", protection, [])
        deployment = cls(binary, root, primary, primary, protection)
        try:
            upstream = ["--replicaof", "127.0.0.1", str(primary.port)]
            deployment.replica = cls._start_node(binary, root / "replica", protection, upstream)
            deployment._wait_for_replication()
            for n in range(3):
                deployment.sentinels.append(deployment._start_sentinel(root / f"sentinel-{n}"))
            deployment._wait_until_sentinels_see_each_other()
        except BaseException:
            deployment.stop()
            raise
        return deployment

    @staticmethod
    def _start_node(
        binary: str, root: Path, protection: Protection | None, extra: list[str]
    ) -> ThrowawayRedis:
        if protection is None:
            return ThrowawayRedis.start(binary, root=root, extra_args=extra)
        secured = [
            *protection.server_args(),
            "--requirepass",
            protection.password,
            "--masterauth",
            protection.password,
        ]
        return ThrowawayRedis.start(
            binary,
            root=root,
            extra_args=[*secured, *extra],
            password=protection.password,
            tls=protection.client_context(),
        )

    def _start_sentinel(self, directory: Path) -> ThrowawayRedis:
        directory.mkdir(parents=True)
        config = directory / "sentinel.conf"
        lines = [
            f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} {QUORUM}",
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {MASTER} 1",
        ]
        p = self.protection
        if p is not None:
            lines += [
                f"sentinel auth-pass {MASTER} {p.password}",
                f"requirepass {p.sentinel_password}",
                f"sentinel sentinel-pass {p.sentinel_password}",
            ]
        config.write_text("\n".join(lines) + "\n")
        return ThrowawayRedis.start(
            self.binary,
            root=directory,
            config_file=config,
            sentinel=True,
            extra_args=p.server_args() if p else [],
            password=p.sentinel_password if p else None,
            tls=p.client_context() if p else None,
        )

    def _wait_for_replication(self) -> None:
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with self.replica.client() as client:
                info = client.command("INFO", "replication")
            if isinstance(info, bytes) and b"master_link_status:up" in info:
                return
            time.sleep(0.05)
        raise ServerUnavailable("the replica did not catch up with the primary")

    def _wait_until_sentinels_see_each_other(self) -> None:
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if all(self._knows_everyone(s) for s in self.sentinels):
                return
            time.sleep(0.1)
        raise ServerUnavailable("the sentinels did not discover the replica and each other")

    def _knows_everyone(self, sentinel: ThrowawayRedis) -> bool:
        with sentinel.client() as client:
            replicas = client.command("SENTINEL", "REPLICAS", MASTER)
            peers = client.command("SENTINEL", "SENTINELS", MASTER)
        return (
            isinstance(replicas, list)
            and len(replicas) >= 1
            and isinstance(peers, list)
            and len(peers) >= len(self.sentinels) - 1
        )

    def primary_port(self) -> int | None:
        """The port the first sentinel that answers names as the primary's."""
        for sentinel in self.sentinels:
            with contextlib.suppress(OSError, RespError, ConnectionError):
                with sentinel.client(1.0) as client:
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


def start_sentinel_deployment(
    root: Path, protection: Protection | None = None
) -> SentinelDeployment:
    """A running deployment under ``root``; ServerUnavailable without ``redis-server``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable("needs the redis-server binary (Debian's redis-server package)")
    return SentinelDeployment.start(binary, root, protection)
