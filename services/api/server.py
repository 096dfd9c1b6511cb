"""Serving the API with gunicorn, configured in code (no gunicorn.conf.py).

The workers are gevent workers (:mod:`tickwork.services.api.worker`): a connection costs a
greenlet, not a thread, so idle and slow clients and log follow streams cannot take every
worker; the waits for a header block and for a body are bounded (docs/rest-api.md,
"Serving model").

``preload_app`` stays off: every worker builds its application, and so its engine and
connection pool, after the fork (a pool shared across a fork hands one socket to two
processes). gunicorn's own lines and its access lines go through the root logger, so they
look like every other record of the process (shared/logging.py: JSON lines, or text).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornLogger
from prometheus_client import multiprocess

from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.services.api.framing import check_bodies
from tickwork.services.api.metrics import MULTIPROC_ENV
from tickwork.services.api.worker import ApiWorker
from tickwork.shared.logging import FIELDS_ATTRIBUTE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    """How gunicorn serves the app."""

    bind: str = "127.0.0.1:8765"
    workers: int = 2
    graceful_timeout_seconds: int = 30
    timeout_seconds: int = 120
    # Connections one worker holds at once; past them it stops accepting (the kernel's
    # backlog queues the rest).
    connections_per_worker: int = 1000
    # A header block (the first too) must arrive within this; it is gunicorn's keep-alive.
    header_timeout_seconds: int = 5
    # Any other wait on a client: for the next part of a body, or for it to take a stream.
    body_timeout_seconds: int = 10


class RootLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's logger, sending its lines (``gunicorn.error``) and one record per request
    (``gunicorn.access``, with its fields for JSON lines) through the root logger."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in list(log.handlers):
                log.removeHandler(handler)
            log.propagate = True

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = str(resp.status).split(None, 1)[0]
        fields = {
            "remote": environ.get("REMOTE_ADDR", "-"),
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "query": environ.get("QUERY_STRING") or None,
            "status": int(status) if status.isdigit() else status,
            "bytes": getattr(resp, "sent", None),
            "duration_ms": round(request_time.total_seconds() * 1000, 3),
            "user_agent": environ.get("HTTP_USER_AGENT"),
            "pid": os.getpid(),
        }
        target = fields["path"] + (f"?{fields['query']}" if fields["query"] else "")
        self.access_log.info(
            "%s %s %s %sms",
            fields["method"],
            target,
            status,
            fields["duration_ms"],
            extra={FIELDS_ATTRIBUTE: fields},
        )


def _child_exit(_server: Any, worker: Any) -> None:
    # A dead worker's live gauges must not be summed any more (multiprocess mode).
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def _post_fork(_server: Any, worker: Any) -> None:
    logger.info("api worker started pid=%s", worker.pid)


class ApiServer(BaseApplication):  # type: ignore[misc]
    """gunicorn running ``create_app(config)`` in each worker."""

    def __init__(self, config: ApiConfig, options: ServerOptions) -> None:
        self.api_config = config
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        settings: dict[str, Any] = {
            "bind": [self.options.bind],
            "workers": self.options.workers,
            "worker_class": ApiWorker.configured(
                body_timeout_seconds=self.options.body_timeout_seconds
            ),
            "worker_connections": self.options.connections_per_worker,
            "keepalive": self.options.header_timeout_seconds,
            "graceful_timeout": self.options.graceful_timeout_seconds,
            "timeout": self.options.timeout_seconds,
            "preload_app": False,
            "accesslog": "-",
            "errorlog": "-",
            "logger_class": RootLogger,
            "loglevel": logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower(),
            "proc_name": "tickwork-api",
            "post_fork": _post_fork,
            "child_exit": _child_exit,
            # No control socket: it would go under $HOME, read-only in a container, and
            # every API process of one user would share its path.
            "control_socket_disable": True,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        app = create_app(self.api_config)
        app.wsgi_app = check_bodies(app.wsgi_app)  # type: ignore[method-assign,assignment]
        return app


def prepare_metrics_directory(workers: int) -> None:
    """Share metrics between workers in a private directory, unless one is configured."""
    if workers > 1 and not os.environ.get(MULTIPROC_ENV):
        directory = tempfile.mkdtemp(prefix="tickwork-api-metrics-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        os.environ[MULTIPROC_ENV] = directory


def run_server(config: ApiConfig, options: ServerOptions) -> None:
    """Serve until SIGTERM or SIGINT (gunicorn stops gracefully, then returns)."""
    prepare_metrics_directory(options.workers)
    ApiServer(config, options).run()
