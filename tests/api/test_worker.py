"""The API's gevent worker: psycopg, imported before the worker was patched (as the master
imports it), still waits cooperatively, on descriptors past select()'s limit too."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tickwork.shared.store.engine import libpq_url

SCRIPT = textwrap.dedent(
    """
    import sys
    import psycopg  # imported unpatched, as gunicorn's master does
    from gevent import monkey

    monkey.patch_all()
    import gevent, socket
    from tickwork.services.api.cooperative_psycopg import use_cooperative_psycopg

    use_cooperative_psycopg()
    held = [socket.socket() for _ in range(1100)]  # descriptors past 1023
    ticks = []

    def tick():
        for _ in range(8):
            gevent.sleep(0.05)
            ticks.append(1)

    ticker = gevent.spawn(tick)
    with psycopg.connect(sys.argv[1], connect_timeout=10) as conn:
        assert conn.fileno() > 1023, conn.fileno()
        conn.execute("SELECT pg_sleep(0.6)")
    print(len(ticks))
    """
)


@pytest.mark.slow  # seconds of work: left out of make test-fast
def test_queries_and_connecting_yield_to_other_greenlets_past_descriptor_1023(
    postgres_url: str,
) -> None:
    # Given psycopg imported before the patch, and a connection on a descriptor past 1023
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, libpq_url(postgres_url)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # When a query sleeps 0.6 s, then other greenlets run meanwhile
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) >= 8
