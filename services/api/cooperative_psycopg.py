"""psycopg waiting for the database through gevent's selector in the API's worker: the only
place tickwork relies on psycopg's internals.

psycopg chooses how to wait when it is imported, and looks for gevent's patches only then
(``psycopg.waiting``, with ``PSYCOPG_WAIT_FUNC`` read at that moment too). gunicorn's
master imports psycopg (to check the schema) before the gevent worker patches anything,
and psycopg offers no public way to choose again. So :func:`use_cooperative_psycopg` sets
two names of the undocumented module ``psycopg.waiting``:

- ``waiting.wait``, the function ``Connection.wait`` calls through the module for every
  query, to ``waiting.wait_selector`` (in place of the C ``wait_c``);
- ``waiting.DefaultSelector``, the selector class ``wait_selector`` and ``wait_conn``
  (connecting) use, bound there at import, to ``selectors.DefaultSelector`` once gevent
  has patched it.

Checked against psycopg 3.3.9 (pinned, with psycopg-binary, in constraints.txt);
tests/test_library_internals.py fails, naming this module, if those names change shape.
"""

from __future__ import annotations

import selectors

from gevent import monkey

CHECKED_PSYCOPG_VERSIONS = ("3.3.9",)
"""The psycopg versions ``psycopg.waiting`` was read against."""


def use_cooperative_psycopg() -> None:
    """Make psycopg wait for the database through gevent's selector.

    Its C wait for queries and its epoll selector for connecting would block every
    greenlet of the worker for as long as the database takes. gevent's selector yields,
    and has no limit on descriptor numbers (``select()`` stops at 1023, which a worker of
    1000 connections passes). Does nothing unless gevent has patched ``select``.
    """
    from psycopg import waiting

    if monkey.is_module_patched("select"):
        waiting.DefaultSelector = selectors.DefaultSelector  # type: ignore[attr-defined]
        waiting.wait = waiting.wait_selector
