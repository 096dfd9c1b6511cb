"""Specification of project archives in Redis: put by the executor, read by agents."""

from __future__ import annotations

from redis import Redis

from shared.dispatch.archives import ARCHIVE_TTL_SECONDS, RedisArchives, archive_key


def test_an_archive_is_read_from_the_store_once_then_only_its_ttl_refreshed(
    redis_client: Redis, redis_prefix: str
) -> None:
    archives = RedisArchives(redis_client, redis_prefix)
    reads: list[str] = []

    def source(digest: str) -> bytes:
        reads.append(digest)
        return b"archive bytes"

    archives.ensure(["d1"], source)
    redis_client.expire(archive_key(redis_prefix, "d1"), 10)
    archives.ensure(["d1", "d1"], source)

    assert reads == ["d1"]
    assert archives.fetch("d1") == b"archive bytes"
    assert redis_client.ttl(archive_key(redis_prefix, "d1")) > ARCHIVE_TTL_SECONDS - 60


def test_an_archive_redis_lost_is_put_back_on_the_next_publish(
    redis_client: Redis, redis_prefix: str
) -> None:
    archives = RedisArchives(redis_client, redis_prefix)
    archives.ensure(["d1"], lambda digest: b"bytes")
    redis_client.delete(archive_key(redis_prefix, "d1"))
    assert archives.fetch("d1") is None

    archives.ensure(["d1"], lambda digest: b"bytes")

    assert archives.fetch("d1") == b"bytes"


def test_an_archive_the_store_does_not_have_is_reported_missing(
    redis_client: Redis, redis_prefix: str
) -> None:
    archives = RedisArchives(redis_client, redis_prefix)
    assert archives.ensure(["gone"], lambda digest: None) == ["gone"]
    assert archives.fetch("gone") is None
