"""The Celery application both sides of the distributed seam share, and its Redis settings.

The executor only publishes with it; agents run it as a worker. Settings are fixed here so
that no deployment can weaken them: JSON only (a pickle message would run code on an
agent), late acknowledgement and a prefetch of one (a message an agent holds but has not
finished goes back to the queue if the agent's connection closes), no results in Celery
(results travel through tickwork's own event stream, fenced by lease tokens), no remote
control, gossip or task events (nothing in Redis that tickwork does not need).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from tickwork.shared.dispatch.kept_client import KEPT_CLIENT_TRANSPORT
from tickwork.shared.dispatch.messages import DEFAULT_QUEUE
from tickwork.shared.redis_url import SentinelDeployment, sentinel_deployment

TASK_NAME = "tickwork.run_task"
SOCKET_TIMEOUT_SECONDS = 10.0
RETRIES = 3
"""How many more times a command that met a connection error is sent (with backoff)."""
CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


@dataclass(frozen=True)
class RedisSettings:
    """Where the queues, leases and events live: a Redis URL and a key prefix."""

    url: str
    prefix: str = "tickwork:"

    def client(self) -> Redis:
        """A new client (create one per process: connections do not survive a fork)."""
        return redis_client(self.url)


def redis_client(url: str, *, socket_timeout: float = SOCKET_TIMEOUT_SECONDS) -> Redis:
    """A client of the Redis ``url`` names (see :mod:`tickwork.shared.redis_url`).

    For a Sentinel deployment it is a client of the primary: each new connection asks the
    sentinels where the primary is, and a connection that meets a demoted primary
    (``READONLY``) is dropped, so after a failover the next command reaches the promoted
    replica. Commands that meet a connection error are tried again with backoff."""
    deployment = sentinel_deployment(url)
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES)
    common: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "health_check_interval": 30,
        "retry": retry,
    }
    if deployment is None:
        return Redis.from_url(url, **common)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(deployment.sentinels),
        sentinel_kwargs=deployment.sentinel_kwargs(socket_timeout),
    )
    node: dict[str, Any] = {"db": deployment.db, **common}
    if deployment.username:
        node["username"] = deployment.username
    if deployment.password is not None:
        node["password"] = deployment.password
    if deployment.tls:
        node.update(ssl=True, **deployment.tls_options)
    primary: Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        deployment.master, redis_class=Redis, **node
    )
    return primary


def make_celery(redis: RedisSettings, *, name: str = "tickwork") -> Celery:
    """The Celery app on ``redis``: every key under its prefix, JSON only, acks late.

    A ``redis://`` URL is served by
    :class:`~tickwork.shared.dispatch.kept_client.KeptClientTransport`; others (``rediss://``,
    ``unix://``, sentinels, or any other URL Celery's own variables give the broker) by
    kombu's own transport for their scheme, which reads what the scheme implies (TLS, a
    socket path)."""
    deployment = sentinel_deployment(redis.url)
    broker = redis.url if deployment is None else deployment.kombu_url()
    app = Celery(name, broker=broker, set_as_current=False)
    # Celery's own variables (CELERY_BROKER_URL and the like) may name other URLs.
    conf = app.conf
    urls = {conf.broker_url, conf.broker_read_url, conf.broker_write_url} - {None}
    if all(urlsplit(str(url)).scheme == "redis" for url in urls):
        conf.broker_transport = KEPT_CLIENT_TRANSPORT
    transport_options: dict[str, Any] = {
        "global_keyprefix": redis.prefix,
        # An unacknowledged message (its agent died) comes back after this; the lease
        # decides whether it still runs, so the value only bounds a rare duplicate.
        "visibility_timeout": 3600,
    }
    if deployment is not None:
        transport_options.update(_sentinel_transport_options(deployment))
        if deployment.tls:
            conf.broker_use_ssl = _kombu_tls(deployment)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        event_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        # A task whose worker process died is not redelivered by Celery: the lease reaper
        # requeues it under a new token and counts the loss (a poison task must end).
        task_reject_on_worker_lost=False,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_default_queue=DEFAULT_QUEUE,
        task_create_missing_queues=True,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options=transport_options,
    )
    return app


def _sentinel_transport_options(deployment: SentinelDeployment) -> dict[str, Any]:
    """kombu's options for a Sentinel broker: the master's name, the sentinels' own
    credentials and TLS."""
    return {
        "master_name": deployment.master,
        "sentinel_kwargs": deployment.sentinel_kwargs(SOCKET_TIMEOUT_SECONDS),
    }


def _kombu_tls(deployment: SentinelDeployment) -> dict[str, Any]:
    """``broker_use_ssl`` for TLS to the data nodes: the URL's ssl_* options."""
    options: dict[str, Any] = dict(deployment.tls_options)
    options["ssl_cert_reqs"] = CERT_REQS[options.get("ssl_cert_reqs", "required")]
    return options
