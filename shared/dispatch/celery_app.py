"""The Celery application both sides of the distributed seam share, and its Redis settings.

The executor only publishes with it; agents run it as a worker. Settings are fixed here so
that no deployment can weaken them: JSON only (a pickle message would run code on an
agent), late acknowledgement and a prefetch of one (a message an agent holds but has not
finished goes back to the queue if the agent's connection closes), no results in Celery
(results travel through tickwork's own event stream, fenced by lease tokens), no remote
control, gossip or task events (nothing in Redis that tickwork does not need).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from celery import Celery
from redis import Redis

from tickwork.shared.dispatch.kept_client import KEPT_CLIENT_TRANSPORT
from tickwork.shared.dispatch.messages import DEFAULT_QUEUE

TASK_NAME = "tickwork.run_task"


@dataclass(frozen=True)
class RedisSettings:
    """Where the queues, leases and events live: a Redis URL and a key prefix."""

    url: str
    prefix: str = "tickwork:"

    def client(self) -> Redis:
        """A new client (create one per process: connections do not survive a fork)."""
        return Redis.from_url(self.url, socket_timeout=10, health_check_interval=30)


def make_celery(redis: RedisSettings, *, name: str = "tickwork") -> Celery:
    """The Celery app on ``redis``: every key under its prefix, JSON only, acks late.

    A ``redis://`` URL is served by
    :class:`~tickwork.shared.dispatch.kept_client.KeptClientTransport`; others (``rediss://``,
    ``unix://``, sentinels, or any other URL Celery's own variables give the broker) by
    kombu's own transport for their scheme, which reads what the scheme implies (TLS, a
    socket path)."""
    app = Celery(name, broker=redis.url, set_as_current=False)
    # Celery's own variables (CELERY_BROKER_URL and the like) may name other URLs.
    conf = app.conf
    urls = {conf.broker_url, conf.broker_read_url, conf.broker_write_url} - {None}
    if all(urlsplit(str(url)).scheme == "redis" for url in urls):
        conf.broker_transport = KEPT_CLIENT_TRANSPORT
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
        broker_transport_options={
            "global_keyprefix": redis.prefix,
            # An unacknowledged message (its agent died) comes back after this; the lease
            # decides whether it still runs, so the value only bounds a rare duplicate.
            "visibility_timeout": 3600,
        },
    )
    return app
