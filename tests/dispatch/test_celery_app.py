"""Specifications of the Celery app both sides share: which kombu transport serves which
Redis URL, and the one client a channel keeps for its commands."""

from __future__ import annotations

import pytest
from redis import Redis

from tickwork.shared.dispatch.celery_app import RedisSettings, make_celery
from tickwork.shared.dispatch.kept_client import KEPT_CLIENT_TRANSPORT, KeptClientChannel


class TestTransport:
    def test_a_redis_url_is_served_by_a_channel_keeping_one_client(
        self, redis_url: str, redis_prefix: str, redis_client: Redis
    ) -> None:
        app = make_celery(RedisSettings(redis_url, redis_prefix))
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            assert isinstance(channel, KeptClientChannel)
            with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
                assert first is second
            # shown as what it is, the password hidden
            assert connection.as_uri().startswith(f"{KEPT_CLIENT_TRANSPORT}://")
        # what kombu does with it still works: messages land in their queue's list
        for _ in range(2):
            app.send_task("tickwork.nothing", queue="kept")
        assert redis_client.llen(f"{redis_prefix}kept") == 2

    @pytest.mark.parametrize(
        "url", ["rediss://127.0.0.1:6380/0", "unix:///run/redis.sock", "socket:///run/redis.sock"]
    )
    def test_other_redis_urls_keep_the_transport_kombu_gives_their_scheme(self, url: str) -> None:
        app = make_celery(RedisSettings(url))
        assert app.conf.broker_transport is None

    def test_a_broker_url_from_celerys_own_variables_keeps_the_transport_of_its_scheme(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("CELERY_BROKER_URL", "rediss://127.0.0.1:6380/0")
        app = make_celery(RedisSettings("redis://127.0.0.1:6379/0"))
        assert app.conf.broker_transport is None

    def test_the_kept_client_goes_with_the_pools_kombu_drops(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        app = make_celery(RedisSettings(redis_url, redis_prefix))
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            with channel.conn_or_acquire() as first:
                assert first.ping()
            channel._disconnect_pools()  # as kombu does after a fork
            with channel.conn_or_acquire() as second:
                assert second is not first and second.ping()
