"""Peak memory of an agent's pool process while it streams one large task log to Redis.

One :class:`AgentRuntime` runs in this process, as in a Celery pool process, and runs a
``sh>`` task that writes ``--mib`` MiB (default 64) to its log as fast as it can. The
figure is how much the process's peak resident set grew during the run (``ru_maxrss``;
the command's own process is a child and does not count). The Redis keys of the run are
deleted afterwards. Needs Redis (``TICKWORK_BENCH_REDIS_URL``, default the local server).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench._services import redis_prefix
from tickwork.services.agent.config import AgentSettings
from tickwork.services.agent.metrics import AgentMetrics
from tickwork.services.agent.worker import AgentRuntime
from tickwork.shared.dispatch.celery_app import RedisSettings
from tickwork.shared.dispatch.messages import TaskMessage

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
MIB = 1024 * 1024


def peak_rss_mib() -> float:
    """The process's peak resident set so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stream_one_log(redis_url: str, prefix: str, mib: int, work_dir: Path) -> dict[str, float]:
    """Run one task writing ``mib`` MiB under a fresh runtime; the figures."""
    settings = AgentSettings(
        redis=RedisSettings(redis_url, prefix),
        queues=("default",),
        concurrency=1,
        grace_seconds=5,
        lease_ttl_seconds=30,
        heartbeat_seconds=5,
        work_dir=work_dir,
    )
    runtime = AgentRuntime(settings, AgentMetrics())
    # One line of 1 KiB repeated: a text log, written faster than it can be streamed.
    command = f"yes \"$(head -c 1023 /dev/zero | tr '\\0' x)\" | head -c {mib * MIB}"
    message = TaskMessage(
        task_id=1,
        attempt_id=1,
        lease_token=1,
        full_name="+bench+log",
        operator="sh",
        command=command,
        params={},
        project_dir=str(work_dir),
        timeout_seconds=600,
    )
    try:
        before = peak_rss_mib()
        started = time.monotonic()
        runtime.run(message.to_json())
        seconds = time.monotonic() - started
        after = peak_rss_mib()
    finally:
        runtime.close()
    return {
        "log_mib": mib,
        "run_seconds": round(seconds, 2),
        "peak_rss_before_mib": round(before, 1),
        "peak_rss_mib": round(after, 1),
        "peak_rss_growth_mib": round(after - before, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="size of the log, in MiB")
    args = parser.parse_args()
    redis_url = os.environ.get("TICKWORK_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    with (
        tempfile.TemporaryDirectory(prefix="tickwork-bench-") as work,
        redis_prefix(redis_url) as prefix,
    ):
        figures = stream_one_log(redis_url, prefix, args.mib, Path(work))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
