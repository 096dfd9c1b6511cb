"""kombu's Redis transport keeping one client per channel: the only place tickwork relies
on kombu's internals.

kombu offers no option for this, so :class:`KeptClientChannel` overrides three names of
``kombu.transport.redis.Channel`` that are not part of kombu's documented API:

- ``conn_or_acquire(client=None)``, the context manager every command outside the
  consumer's loop goes through (it makes a new client each time);
- ``_create_client()``, which makes a client on the channel's pool;
- ``_disconnect_pools()``, which drops the channel's pools when it closes.

It registers itself in ``kombu.transport.TRANSPORT_ALIASES`` (a public mapping).

Checked against kombu 5.7.0 (pinned in constraints.txt);
tests/test_library_internals.py fails, naming this module, if those names change shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

CHECKED_KOMBU_VERSIONS = ("5.7.0",)
"""The kombu versions the overrides below were read against."""


class KeptClientChannel(kombu_redis.Channel):
    """kombu's Redis channel, but keeping one client for its commands outside the
    consumer's loop. kombu makes a new client for each: a publish batch, the record of an
    unacknowledged message, an acknowledgement; making one costs about what the command's
    own round trip does. A client holds no connection (each command takes one from the
    channel's pool), so one per channel is what kombu's own asynchronous client is too."""

    _kept: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        if self._kept is None:
            self._kept = self._create_client()  # type: ignore[no-untyped-call]
        yield self._kept

    def _disconnect_pools(self) -> None:
        """kombu's, and the kept client goes with the pool it was made on."""
        super()._disconnect_pools()  # type: ignore[no-untyped-call]
        self._kept = None


class KeptClientTransport(kombu_redis.Transport):
    """kombu's Redis transport on :class:`KeptClientChannel`, known to kombu (and shown in
    Celery's messages about the broker) as :data:`KEPT_CLIENT_TRANSPORT`."""

    Channel = KeptClientChannel


KEPT_CLIENT_TRANSPORT = "tickwork-redis"
TRANSPORT_ALIASES.setdefault(KEPT_CLIENT_TRANSPORT, f"{__name__}:KeptClientTransport")
