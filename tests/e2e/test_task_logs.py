"""Task logs end to end on a cluster of separate processes: agent, executor, API and the
``tickwork log`` client.

A task that writes nothing has an empty log, listed and read as such. A log longer than
the agent's head and tail keeps both with a line for the cut, the API lists how much was
cut, the client prints all the store holds (more than one page of the API) and says it
was cut, and the agent's spool is empty afterwards. A stored file that went missing is
named by the client, which prints the others and exits 3.
"""

from __future__ import annotations

import subprocess
from typing import Any

import httpx
import pytest

from services.agent.log_stream import cut_marker
from services.api.routes.logs import MAX_READ_BYTES
from tests.fault._cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

TOKEN = "logs-admin-token"
MIB = 1024 * 1024
HEAD_BYTES = 10 * MIB
TAIL_BYTES = 7 * MIB
LINES = 2_700_000
"""``seq -f %08.0f 1 LINES`` writes 9 bytes a line: 24.3 MB, more than head and tail."""
WORKFLOW = f"""\
+quiet:
  sh>: "true"
+big:
  sh>: seq -f %08.0f 1 {LINES}
+after:
  echo>: after the others
"""


def written_by_big() -> bytes:
    return b"".join(b"%08d\n" % n for n in range(1, LINES + 1))


def start_services(cluster: Cluster) -> httpx.Client:
    cluster.start_api(f"admin:{TOKEN}")
    cluster.start_executor()
    limits = {
        "TICKWORK_AGENT_LOG_HEAD_BYTES": str(HEAD_BYTES),
        "TICKWORK_AGENT_LOG_TAIL_BYTES": str(TAIL_BYTES),
    }
    cluster.start_agent("agent-1", env=limits)
    return httpx.Client(
        base_url=endpoint(cluster), headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


def endpoint(cluster: Cluster) -> str:
    return f"http://127.0.0.1:{cluster.services['api'].metrics_port}"


def tickwork_log(cluster: Cluster, attempt_id: int) -> subprocess.CompletedProcess[str]:
    return cluster.tickwork(
        "log", str(attempt_id), "--endpoint", endpoint(cluster), env={"TICKWORK_API_TOKEN": TOKEN}
    )


def files_by_task(api: httpx.Client, attempt_id: int) -> dict[str, dict[str, Any]]:
    listed = api.get(f"/api/logs/{attempt_id}/files")
    assert listed.status_code == 200, listed.text
    return {f["task"].rsplit("+", 1)[-1]: f for f in listed.json()["items"]}


def test_an_empty_log_and_a_cut_log_are_read_whole_through_the_api_and_the_cli(
    cluster: Cluster,
) -> None:
    # Given an agent keeping 10 MiB of head and 7 MiB of tail of each log
    api = start_services(cluster)
    # When a workflow runs a task that writes nothing and one that writes 24.3 MB
    attempt = cluster.submit("logs", WORKFLOW)
    assert cluster.wait_for_attempt_end(attempt, 60) == "success", cluster.explain(attempt)

    # Then the quiet task's log is listed and reads as empty
    files = files_by_task(api, attempt)
    assert files["quiet"]["size_bytes"] == 0
    quiet = api.get(f"/api/logs/{attempt}/files/{files['quiet']['id']}")
    assert (quiet.status_code, quiet.content) == (200, b"")
    assert files["quiet"]["truncated_bytes"] == 0
    # And the big one is listed with how much was cut from its middle
    written = written_by_big()
    cut = len(written) - HEAD_BYTES - TAIL_BYTES
    marker = cut_marker(cut, at_line_start=written[HEAD_BYTES - 1 : HEAD_BYTES] == b"\n")
    stored = written[:HEAD_BYTES] + marker + written[-TAIL_BYTES:]
    assert files["big"]["truncated_bytes"] == cut
    assert files["big"]["size_bytes"] == len(stored) > MAX_READ_BYTES

    # When `tickwork log` prints the attempt's logs
    printed = tickwork_log(cluster, attempt)

    # Then it prints every file whole, the big one past one page of the API
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.encode() == (
        b"--- +logs+quiet\n"
        + b"--- +logs+big\n"
        + stored
        + b"--- +logs+after\n"
        + b"after the others\n"
    )
    assert f"[tickwork: {cut:,} bytes cut here]" in printed.stdout
    # And it says that the big one was cut
    assert f"+logs+big: {cut:,} bytes were cut" in printed.stderr
    # And the agent kept no spool of any run
    spool = cluster.root / "state" / "agent-1" / "logs"
    assert [p for p in spool.rglob("*") if p.is_file()] == []


def test_tickwork_log_names_a_missing_file_prints_the_others_and_exits_3(
    cluster: Cluster,
) -> None:
    # Given an attempt of three tasks whose middle log file went missing from the store
    api = start_services(cluster)
    text = "+first:\n  echo>: one\n+second:\n  echo>: two\n+third:\n  echo>: three\n"
    attempt = cluster.submit("three", text)
    assert cluster.wait_for_attempt_end(attempt, 60) == "success", cluster.explain(attempt)
    second = files_by_task(api, attempt)["second"]
    (cluster.root / "state" / "task-logs" / second["path"]).unlink()

    # When `tickwork log` prints the attempt's logs
    printed = tickwork_log(cluster, attempt)

    # Then it prints the others, names the missing one, and exits 3
    assert printed.returncode == 3, printed.stderr
    assert "one\n" in printed.stdout and "three\n" in printed.stdout
    assert "two" not in printed.stdout
    assert f"log file {second['id']} of +three+second ({second['path']}) is missing" in (
        printed.stderr
    )
    assert "Traceback" not in printed.stderr
