"""Serving the API with gunicorn, configured in code (no gunicorn.conf.py).

``preload_app`` stays off: every worker builds its application, and so its engine and
connection pool, after the fork (a pool shared across a fork hands one socket to two
processes). Access lines are JSON when stderr is not a terminal.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger as GunicornLogger
from prometheus_client import multiprocess

from services.api.app import create_app
from services.api.config import ApiConfig
from services.api.metrics import MULTIPROC_ENV

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    """How gunicorn serves the app."""

    bind: str = "127.0.0.1:8765"
    workers: int = 2
    graceful_timeout_seconds: int = 30
    timeout_seconds: int = 120
    json_access_log: bool = True


class JsonAccessLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's logger, with one JSON object per access line."""

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = str(resp.status).split(None, 1)[0]
        record = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
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
        self.access_log.info(json.dumps(record))


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
            "worker_class": "gthread",
            "threads": 4,
            "graceful_timeout": self.options.graceful_timeout_seconds,
            "timeout": self.options.timeout_seconds,
            "preload_app": False,
            "accesslog": "-",
            "errorlog": "-",
            "proc_name": "tickwork-api",
            "post_fork": _post_fork,
            "child_exit": _child_exit,
            # No control socket: it would go under $HOME, read-only in a container, and
            # every API process of one user would share its path.
            "control_socket_disable": True,
        }
        if self.options.json_access_log:
            settings["logger_class"] = JsonAccessLogger
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return create_app(self.api_config)


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


def stderr_is_terminal() -> bool:
    """Whether a person is watching the output (plain access lines) or a collector (JSON)."""
    return sys.stderr.isatty()
