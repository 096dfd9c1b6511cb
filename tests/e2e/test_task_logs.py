"""Task logs end to end, on a cluster of separate processes (agent, executor, API) and on
``tickwork standalone``, read through the API and the ``tickwork log`` client.

Every run of a task has a listed, readable log from its first line: while it runs, after
a kill, a timeout or the loss of its agent, as well as after it ended. A task that writes
nothing has an empty log, listed and read as such. A log longer than the agent's head and
tail keeps both with a line for the cut, the API lists how much was cut, the client prints
all the store holds (more than one page of the API) and says it was cut, and the agent's
spool is empty afterwards. A stored file that went missing is named by the client, which
prints the others and exits 3. Followed logs say which task each line is of, and a task
the attempt does not have is an error that suggests the closest one.
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e._standalone import StandaloneProcess, running_standalone, wait_for_attempt
from tests.fault._cluster import Cluster
from tests.support.files import write_under
from tests.support.stored_logs import prune_log_text
from tests.support.waiting import wait_until
from tickwork.services.agent.log_stream import cut_marker
from tickwork.services.api.routes.logs import MAX_READ_BYTES

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


def test_tickwork_log_names_a_pruned_log_prints_the_others_and_exits_3(
    cluster: Cluster,
) -> None:
    # Given an attempt of three tasks whose middle log the log retention removed
    api = start_services(cluster)
    text = "+first:\n  echo>: one\n+second:\n  echo>: two\n+third:\n  echo>: three\n"
    attempt = cluster.submit("three", text)
    assert cluster.wait_for_attempt_end(attempt, 60) == "success", cluster.explain(attempt)
    second = files_by_task(api, attempt)["second"]
    prune_log_text(cluster.database_url, int(second["id"]))

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


NAP = "+nap:\n  sh>: echo started; sleep 300\n"


def logs_by_run(api: httpx.Client, attempt_id: int) -> dict[int, tuple[str, int, bytes]]:
    """Each listed log file of the attempt by run: its task, listed size and content."""
    listed = api.get(f"/api/logs/{attempt_id}/files")
    assert listed.status_code == 200, listed.text
    runs: dict[int, tuple[str, int, bytes]] = {}
    for item in listed.json()["items"]:
        content = api.get(f"/api/logs/{attempt_id}/files/{item['id']}")
        assert content.status_code == 200, content.text
        runs[item["run"]] = (item["task"], item["size_bytes"], content.content)
    return runs


def test_every_run_s_log_is_listed_and_read_while_it_runs_after_its_agent_is_lost_and_killed(
    cluster: Cluster,
) -> None:
    # Given a cluster whose one agent runs a task that writes a line, then sleeps
    api = start_services(cluster)
    attempt = cluster.submit("nap", NAP)
    first = ("+nap+nap", len(b"started\n"), b"started\n")

    # Then while it runs its log is listed with what it wrote so far, and read
    wait_until(
        "the running task's log is listed with its first line",
        lambda: list(logs_by_run(api, attempt).values()) == [first],
        20,
        poll=0.2,
    )
    # And `tickwork log` without -f prints it
    printed = tickwork_log(cluster, attempt)
    assert (printed.returncode, printed.stdout) == (0, "started\n"), printed.stderr

    # When its agent is lost and another agent runs the task again
    cluster.kill_agent("agent-1")
    wait_until(
        "the task is requeued", lambda: cluster.task(attempt, "nap").lease_token > 1, 20, 0.2
    )
    cluster.start_agent("agent-2")
    wait_until(
        "the second run wrote its first line",
        lambda: (
            len(logs_by_run(api, attempt)) == 2
            and [*logs_by_run(api, attempt).values()][1] == first
        ),
        20,
        poll=0.2,
    )
    # And the attempt is killed
    assert api.post(f"/api/attempts/{attempt}/kill", json={}).status_code < 300
    assert cluster.wait_for_attempt_end(attempt, 20) == "killed"

    # Then the lost run's log and the killed run's log are both listed and read whole
    assert list(logs_by_run(api, attempt).values()) == [first, first]
    printed = tickwork_log(cluster, attempt)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == "--- +nap+nap\nstarted\n" * 2


PROJECT = {
    "nap.dig": NAP,
    "late.dig": """\
        +late:
          _timeout: 1
          sh>: echo started; sleep 30
    """,
    "both.dig": """\
        _parallel: true
        +a:
          sh>: for i in 1 2 3 4; do echo a$i; sleep 0.3; done
        +b:
          sh>: for i in 1 2 3 4; do echo b$i; sleep 0.3; done
    """,
    "hello.dig": """\
        +world:
          echo>: hello
    """,
}


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One standalone with project ``logs`` pushed through the client."""
    root = tmp_path_factory.mktemp("logs")
    for name, text in PROJECT.items():
        write_under(root / "logs", name, textwrap.dedent(text))
    with running_standalone(root / "state") as started:
        pushed = started.tickwork("push", str(root / "logs"), "--project", "logs")
        assert pushed.exit_code == 0, pushed.explain()
        yield started


def start(standalone: StandaloneProcess, workflow: str) -> str:
    started = standalone.tickwork("start", "logs", workflow, "--json")
    assert started.exit_code == 0, started.explain()
    return str(started.json()["id"])


class TestStandalone:
    def test_a_running_task_s_log_is_printed_so_far_and_after_it_is_killed(
        self, standalone: StandaloneProcess
    ) -> None:
        # Given a task that wrote a line and sleeps
        attempt = start(standalone, "nap")

        def printed_so_far() -> bool:
            return standalone.tickwork("log", attempt).stdout == "started\n"

        # Then `tickwork log` prints that line while it runs
        wait_until("the running task's line is printed", printed_so_far, 20, poll=0.2)
        # When it is killed
        assert standalone.tickwork("kill", attempt).exit_code == 0
        assert wait_for_attempt(standalone, attempt, 20)["state"] == "killed"
        # Then its log is still listed with that line, and printed
        (listed,) = standalone.get(f"/api/logs/{attempt}/files")["items"]
        assert (listed["task"], listed["size_bytes"], listed["ended_at"]) == (
            "+nap+nap",
            len("started\n"),
            None,
        )
        printed = standalone.tickwork("log", attempt)
        assert (printed.exit_code, printed.stdout) == (0, "started\n"), printed.explain()

    def test_a_task_that_timed_out_has_its_log(self, standalone: StandaloneProcess) -> None:
        attempt = start(standalone, "late")
        assert wait_for_attempt(standalone, attempt, 20)["state"] == "error"
        printed = standalone.tickwork("log", attempt)
        assert printed.exit_code == 0, printed.explain()
        assert printed.stdout.startswith("started\n"), printed.explain()

    def test_followed_lines_of_tasks_running_at_once_are_headed_by_their_task(
        self, standalone: StandaloneProcess
    ) -> None:
        # When two tasks that run at once are followed
        attempt = start(standalone, "both")
        followed = standalone.tickwork("log", attempt, "-f")
        assert followed.exit_code == 0, followed.explain()
        # Then each task's lines come under a line naming it
        task = ""
        seen: dict[str, list[str]] = {"+both+a": [], "+both+b": []}
        for line in followed.stdout.splitlines():
            if line.startswith("--- "):
                task = line.removeprefix("--- ")
            else:
                seen[task].append(line)
        assert seen == {"+both+a": ["a1", "a2", "a3", "a4"], "+both+b": ["b1", "b2", "b3", "b4"]}

    def test_a_task_the_attempt_does_not_have_is_not_found_with_the_closest_name(
        self, standalone: StandaloneProcess
    ) -> None:
        attempt = start(standalone, "hello")
        wait_for_attempt(standalone, attempt)
        for args in ((), ("-f",)):
            printed = standalone.tickwork("log", attempt, "+hello+nosuch", *args)
            assert printed.exit_code == 3, printed.explain()
            assert "did you mean +hello+world?" in printed.stderr, printed.explain()
            assert printed.stdout == ""
