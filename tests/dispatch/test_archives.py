"""Specification of project archives in Redis: put by the executor, read by agents."""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis

from tickwork.shared.dispatch.archives import (
    ARCHIVE_TTL_SECONDS,
    ArchiveSource,
    RedisArchives,
    archive_key,
)


def ensure(archives: RedisArchives, digests: Sequence[str], source: ArchiveSource) -> list[str]:
    """Refresh ``digests`` in one round trip and put back what Redis lost, as a publish
    does; the digests ``source`` did not have."""
    pipe = archives.client.pipeline(transaction=False)
    ordered = archives.refresh(digests, pipe)
    return archives.put_missing(ordered, pipe.execute(), source)


def test_an_archive_is_read_from_the_store_once_then_only_its_ttl_refreshed(
    redis_client: Redis, redis_prefix: str
) -> None:
    archives = RedisArchives(redis_client, redis_prefix)
    reads: list[str] = []

    def source(digest: str) -> bytes:
        reads.append(digest)
        return b"archive bytes"

    ensure(archives, ["d1"], source)
    redis_client.expire(archive_key(redis_prefix, "d1"), 10)
    ensure(archives, ["d1", "d1"], source)

    assert reads == ["d1"]
    assert archives.fetch("d1") == b"archive bytes"
    assert redis_client.ttl(archive_key(redis_prefix, "d1")) > ARCHIVE_TTL_SECONDS - 60


def test_an_archive_redis_lost_is_put_back_on_the_next_publish(
    redis_client: Redis, redis_prefix: str
) -> None:
    archives = RedisArchives(redis_client, redis_prefix)
    ensure(archives, ["d1"], lambda digest: b"bytes")
    redis_client.delete(archive_key(redis_prefix, "d1"))
    assert archives.fetch("d1") is None

    ensure(archives, ["d1"], lambda digest: b"bytes")

    assert archives.fetch("d1") == b"bytes"


def test_an_archive_the_store_does_not_have_is_reported_missing(
    redis_client: Redis, redis_prefix: str
) -> None:
    archives = RedisArchives(redis_client, redis_prefix)
    assert ensure(archives, ["gone"], lambda digest: None) == ["gone"]
    assert archives.fetch("gone") is None
