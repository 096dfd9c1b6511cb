"""Pushed project archives in Redis: how agents, which have no database, get a task's files.

The executor leaves an archive's bytes under ``<prefix>archive:<digest>`` before it
publishes a task that needs it; agents read that key. The key only caches what the
database holds: it expires after :data:`ARCHIVE_TTL_SECONDS` unused, and every publish
that needs it refreshes it, or puts it back when Redis lost it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

from redis import Redis
from redis.client import Pipeline

log = logging.getLogger(__name__)

ARCHIVE_TTL_SECONDS = 24 * 3600
"""How long an archive stays in Redis after the last task that needed it was published."""

ArchiveSource = Callable[[str], bytes | None]
"""Reads an archive's bytes by digest; None when there is no such archive."""


def archive_key(prefix: str, digest: str) -> str:
    """The Redis key of an archive."""
    return f"{prefix}archive:{digest}"


class RedisArchives:
    """The archives in Redis under one prefix: put by the executor, read by agents."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def refresh(self, digests: Collection[str], pipe: Pipeline) -> list[str]:
        """Add to ``pipe`` (first, for the caller to execute: a publish sends it with its
        queued marks) an ``EXPIRE`` of each archive's key, giving it another
        :data:`ARCHIVE_TTL_SECONDS`; the digests in the order of their commands."""
        ordered = sorted(set(digests))
        for digest in ordered:
            pipe.expire(archive_key(self.prefix, digest), ARCHIVE_TTL_SECONDS)
        return ordered

    def put_missing(
        self, ordered: Sequence[str], present: Sequence[Any], source: ArchiveSource
    ) -> list[str]:
        """Put back, from ``source``, the archives whose ``EXPIRE`` (the replies
        ``present``, in the order :meth:`refresh` gave) found no key: only those are read
        from the store. The digests that ``source`` did not have (their tasks fail on the
        agent, saying so)."""
        missing: list[str] = []
        for digest, found in zip(ordered, present, strict=True):
            if found:
                continue
            content = source(digest)
            if content is None:
                log.error("project archive %s is not in the store", digest)
                missing.append(digest)
                continue
            self.client.set(archive_key(self.prefix, digest), content, ex=ARCHIVE_TTL_SECONDS)
            log.info("put project archive %s in Redis (%d bytes)", digest, len(content))
        return missing

    def fetch(self, digest: str) -> bytes | None:
        """The bytes of an archive, or None if Redis does not hold it."""
        content = self.client.get(archive_key(self.prefix, digest))
        return content if isinstance(content, bytes) else None
