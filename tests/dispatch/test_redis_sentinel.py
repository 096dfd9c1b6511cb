"""``TICKWORK_REDIS_URL`` may name a Sentinel deployment: ``sentinel://HOST:PORT,.../MASTER/DB``
(``sentinels://`` with TLS). Every Redis client of tickwork and the Celery broker read the
same URL; they find the primary through the sentinels, with the data nodes' and the
sentinels' own passwords, and find the promoted replica after a failover.

The deployment is real: ``redis-server`` processes as a primary, a replica and three
sentinels (tests/support/redis_sentinel.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_sentinel import (
    MASTER,
    Protection,
    SentinelDeployment,
    start_sentinel_deployment,
)
from tests.support.servers import ServerUnavailable
from tickwork.shared.config import REDIS_SETTINGS, SettingValues
from tickwork.shared.dispatch.celery_app import RedisSettings, make_celery, redis_client
from tickwork.shared.errors import InvalidConfig
from tickwork.shared.redis_url import parse_redis_url, printable_redis_url
from tickwork.shared.store.urls import printable_url

FAILOVER_TIMEOUT_SECONDS = 30.0


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[SentinelDeployment]:
    """A deployment whose data nodes and sentinels want passwords of their own and TLS."""
    try:
        deployment = start_sentinel_deployment(
            tmp_path / "redis", Protection.make(tmp_path / "tls")
        )
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield deployment
    finally:
        deployment.stop()


def round_trip(url: str, prefix: str) -> object:
    """A message sent and taken back through the Celery app's broker connection."""
    app = make_celery(RedisSettings(url, prefix))
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue(f"probe-{uuid.uuid4().hex}")
        try:
            queue.put({"n": 1})
            message = queue.get(timeout=10)
            message.ack()
            return message.payload
        finally:
            queue.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_clients_and_the_broker_reach_a_protected_primary_by_its_sentinels_after_a_failover_too(
    protected: SentinelDeployment, redis_prefix: str
) -> None:
    # Given the URL of sentinels that want a password and TLS, before a data node that does too
    client = redis_client(protected.url)
    client.set(f"{redis_prefix}probe", "before")
    assert round_trip(protected.url, redis_prefix) == {"n": 1}

    # When the primary dies and the sentinels promote the replica
    protected.kill_primary()
    protected.wait_for_failover(FAILOVER_TIMEOUT_SECONDS)

    # Then the same client and a new broker connection use the promoted replica
    assert client.get(f"{redis_prefix}probe") == b"before"
    client.set(f"{redis_prefix}probe", "after")
    assert client.get(f"{redis_prefix}probe") == b"after"
    assert round_trip(protected.url, redis_prefix) == {"n": 1}
    host, port = client.connection_pool.get_master_address()  # type: ignore[attr-defined]
    assert (host, port) == ("127.0.0.1", protected.replica.port)


def test_the_url_names_sentinels_the_master_and_the_database() -> None:
    deployment = parse_redis_url(
        "sentinels://app:pw@10.0.0.1:26380,10.0.0.2/jobs/3?sentinel_password=s&ssl_cert_reqs=none"
    )
    assert deployment is not None
    assert deployment.sentinels == (("10.0.0.1", 26380), ("10.0.0.2", 26379))
    assert (deployment.master, deployment.db, deployment.username) == ("jobs", 3, "app")
    assert (deployment.password, deployment.sentinel_password, deployment.tls) == ("pw", "s", True)
    assert deployment.kombu_url() == (
        "sentinel://app:pw@10.0.0.1:26380/3;sentinel://10.0.0.2:26379/3"
    )
    assert parse_redis_url("redis://127.0.0.1:6379/0") is None


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("sentinel://a:26379;sentinel://b:26379", "separated by commas"),
        ("sentinel://a:26379", "name the primary the sentinels watch"),
        ("sentinel://a:26379/m/x", "database after the master's name must be a number"),
        ("sentinel://a:26379/m/0/extra", "at most /MASTER/DB"),
        ("sentinel://a:26379/m?master=m", "unknown option 'master'"),
        ("sentinel://a:26379/m?ssl_ca_certs=/ca.pem", "needs TLS: write sentinels://"),
        ("sentinels://a:26379/m?ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of"),
        ("sentinel://a:port/m", "cannot read the sentinel address 'a:port'"),
        ("sentinel://,b/m", "a sentinel's host is empty"),
        ("http://a:6379", "expected a redis://, rediss:// or unix:// URL, or sentinel://"),
    ],
)
def test_a_url_it_cannot_use_is_refused_naming_the_setting(url: str, words: str) -> None:
    with pytest.raises(InvalidConfig, match="TICKWORK_REDIS_URL") as caught:
        SettingValues(REDIS_SETTINGS, {"TICKWORK_REDIS_URL": url}).value("redis_url")
    assert words in str(caught.value)


def test_a_printed_url_masks_both_passwords() -> None:
    url = f"sentinel://app:secret1@a:26379,b:26379/{MASTER}/0?sentinel_password=secret2"
    for printed in (printable_redis_url(url), printable_url(url)):
        assert "secret" not in printed
        assert printed.startswith("sentinel://app:***@a:26379,b:26379/tickwork/0?")
