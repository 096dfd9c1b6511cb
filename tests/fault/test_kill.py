"""``tickwork kill`` of a running attempt: its command's processes stop, the attempt is killed.

The test runs a real cluster (tests/fault/_cluster.py): ``tickwork api`` (which the command
asks) and ``tickwork executor`` on the test's PostgreSQL database and a ``tickwork agent`` on
the test's Redis keyspace, each in its own session with its output in a log file. The
task's shell notes its pid in the ledger file and then becomes ``sleep 300`` (``exec``), so
the test watches that very process through /proc.
Every wait is bounded; on the way out every process the test started is killed.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.fault._cluster import Cluster, command_line, is_running, workflow_text
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow]

TOKEN = "kill-spec-admin-token"
STOP_BOUND_SECONDS = 5.0
"""How long after ``tickwork kill`` was run the task's process may still exist."""


@pytest.mark.timeout(60)
def test_killing_a_running_attempt_ends_its_command_within_5s_and_the_attempt_as_killed(
    cluster: Cluster,
) -> None:
    api = cluster.start_api(f"admin:{TOKEN}", workers=1)
    cluster.start_executor()
    cluster.start_agent("agent-a")
    sleeper = f"{cluster.ledger.note('start', 'sleeper')} && exec sleep 300"
    attempt = cluster.submit("killed_attempt", workflow_text({"sleeper": sleeper}))
    pid = cluster.wait_for_start("sleeper", 20).pid
    wait_until("the task's shell becomes sleep", lambda: command_line(pid)[:1] == ["sleep"], 5)

    killed_at = time.monotonic()
    client = {
        "TICKWORK_ENDPOINT": f"http://127.0.0.1:{api.metrics_port}",
        "TICKWORK_API_TOKEN": TOKEN,
        "TICKWORK_CONFIG": os.devnull,
    }
    result = cluster.tickwork("kill", str(attempt), env=client)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{cluster.explain(attempt)}"

    remaining = STOP_BOUND_SECONDS - (time.monotonic() - killed_at)
    try:
        wait_until(f"sleep (pid {pid}) is gone", lambda: not is_running(pid), max(remaining, 0.0))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.explain(attempt)}") from None
    state = cluster.wait_for_attempt_end(attempt, 15)
    assert state == "killed", cluster.explain(attempt)
