"""Task logs on a cluster that shares no path: two API replicas, two executors and two
agents, each process with an empty state directory and an empty working directory of its
own, the project pushed over REST and every log read over the network.

Every run's log (one still running, finished ones, both runs of a retried task, a killed
one, one the agent cut) is read whole and exactly once from either replica, through the
REST API, the ``tickwork log`` client and the web UI's text route. An executor killed
with SIGKILL while a task writes its log loses no byte of it and duplicates none: the
other executor takes the attempt's partition over and re-reads what was not acknowledged.
Afterwards no API and no executor has written anything into its directories.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis import Redis

from tests.e2e._no_shared_path import (
    RUN_SECONDS,
    START_SECONDS,
    Deployment,
    assert_directories_left_empty,
    claimed_events,
    gate,
    partition_holder,
    partitions_held,
    push_project,
    start_attempt,
    start_deployment,
    stop_holding_unacknowledged_events,
    wait_for_end,
)
from tests.e2e._run import tickwork_command
from tests.fault._cluster import COMMAND_TIMEOUT_SECONDS, Cluster, literal
from tests.support.waiting import wait_until
from tickwork.services.agent.log_stream import cut_marker
from tickwork.shared.dispatch.events import stream_key
from tickwork.shared.domain.partitions import DEFAULT_PARTITION_COUNT, partition_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

HEAD_BYTES = TAIL_BYTES = 4096
"""What the agents keep of each log: the cut task writes far more, every other far less."""
GATE_SECONDS = 60
"""How long the running task waits for its gate before it fails on its own."""


# --- what the tasks write ----------------------------------------------------------------


def numbered(label: str, first: int, last: int) -> bytes:
    """Lines ``<label> <n>`` for n from ``first`` to ``last``, n zero-padded to 6 digits,
    as ``seq -f '<label> %06g'`` writes them."""
    return b"".join(f"{label} {n:06d}\n".encode() for n in range(first, last + 1))


def seq(label: str, first: int, last: int) -> str:
    return f"seq -f '{label} %06g' {first} {last}"


CUT_LINES = 10_000
"""``cut 000001``... 13 bytes a line: 130,000 bytes, far more than head and tail."""
KILLED_LINES = 25
STEADY_LINES = 500
"""``steady 000001``... a line each 10 ms or so: the task writes for several seconds."""


def written_by_cut() -> bytes:
    return numbered("cut", 1, CUT_LINES)


def stored_of_cut() -> tuple[bytes, int]:
    """What the store holds of the cut task's log (head, marker, tail) and the bytes cut."""
    written = written_by_cut()
    cut = len(written) - HEAD_BYTES - TAIL_BYTES
    at_line_start = written[HEAD_BYTES - 1 : HEAD_BYTES] == b"\n"
    marker = cut_marker(cut, at_line_start=at_line_start)
    return written[:HEAD_BYTES] + marker + written[-TAIL_BYTES:], cut


def running_command(gate_url: str) -> str:
    """Writes its first lines, waits (bounded) until ``gate_url`` answers 200, writes more."""
    wait = (
        f"i=0; until curl -sf --noproxy '*' -o /dev/null --max-time 2 {gate_url}; do"
        f" i=$((i+1)); [ $i -le {GATE_SECONDS * 10} ] || exit 9; sleep 0.1; done"
    )
    return "; ".join([seq("running", 1, 20), wait, seq("running", 21, 40)])


RETRIED = (
    f'if [ "$TICKWORK_LEASE_TOKEN" = 1 ]; then {seq("failing", 1, 30)}; exit 3; fi; '
    f"{seq('succeeding', 1, 40)}"
)
"""Fails on its first run (lease token 1) and succeeds on the next."""
KILLED = f"{seq('killed', 1, KILLED_LINES)}; sleep 300"
STEADY = (
    f"i=1; while [ $i -le {STEADY_LINES} ]; do"
    " printf 'steady %06d\\n' $i; i=$((i+1)); sleep 0.01; done"
)


def sh_task(name: str, command: str, *directives: str) -> str:
    """A ``+name`` task running ``command`` as written (``$`` doubled: the workflow
    renders ``$$`` back as ``$``)."""
    lines = [f"+{name}:", *(f"  {d}" for d in directives)]
    lines.append(f"  sh>: {json.dumps(literal(command))}")
    return "\n".join(lines) + "\n"


def project_files(gate_url: str) -> dict[str, str]:
    every_kind = "".join(
        [
            sh_task("quiet", "true"),
            sh_task("finished", seq("finished", 1, 60)),
            sh_task("retried", RETRIED, "_retry: 1"),
            sh_task("cut", seq("cut", 1, CUT_LINES)),
            sh_task("running", running_command(gate_url)),
        ]
    )
    return {
        "every_kind.dig": every_kind,
        "killed.dig": sh_task("long", KILLED),
    }


EXPECTED_WHILE_RUNNING = {
    ("quiet", 1): b"",
    ("finished", 1): numbered("finished", 1, 60),
    ("retried", 1): numbered("failing", 1, 30),
    ("retried", 2): numbered("succeeding", 1, 40),
    ("cut", 1): stored_of_cut()[0],
    ("running", 1): numbered("running", 1, 20),
}
"""Each run's stored log by (task, run) while +running waits for its gate."""
EXPECTED_AFTER = {**EXPECTED_WHILE_RUNNING, ("running", 1): numbered("running", 1, 40)}


# --- a cluster of processes that share no directory --------------------------------------


@pytest.fixture
def deployment(cluster: Cluster, tmp_path: Path) -> Deployment:
    """Agents keeping 4 KiB of head and tail of each log."""
    limits = {
        "TICKWORK_AGENT_LOG_HEAD_BYTES": str(HEAD_BYTES),
        "TICKWORK_AGENT_LOG_TAIL_BYTES": str(TAIL_BYTES),
    }
    return start_deployment(cluster, tmp_path / "client", limits)


# --- reading logs every way there is ------------------------------------------------------


def short(task: str) -> str:
    return task.rsplit("+", 1)[-1]


def run_of(item: Mapping[str, Any]) -> tuple[str, int]:
    """A listed log's (task name, run): the key of the expected logs."""
    return short(item["task"]), int(item["run"])


def listed_files(api: httpx.Client, attempt_id: int) -> list[dict[str, Any]]:
    listed = api.get(f"/api/logs/{attempt_id}/files")
    assert listed.status_code == 200, listed.text
    items: list[dict[str, Any]] = listed.json()["items"]
    return items


def read_in_pages(api: httpx.Client, attempt_id: int, item: dict[str, Any]) -> bytes:
    """The file read with ``?offset=&length=`` in 4 KiB pages up to its listed size."""
    size = int(item["size_bytes"])
    parts = []
    for offset in range(0, size, 4096):
        page = api.get(
            f"/api/logs/{attempt_id}/files/{item['id']}",
            params={"offset": offset, "length": 4096},
        )
        assert page.status_code == 200, page.text
        assert page.headers["X-Log-Size"] == str(size)
        parts.append(page.content)
    return b"".join(parts)


def assert_rest_reads(
    api: httpx.Client, attempt_id: int, expected: Mapping[tuple[str, int], bytes]
) -> list[dict[str, Any]]:
    """Every run is listed once with its size and nothing missing, and reads as expected
    whole, in pages and by a Range; the listing."""
    items = listed_files(api, attempt_id)
    runs = [run_of(item) for item in items]
    assert sorted(runs) == sorted(expected), f"{api.base_url}: listed {runs}"
    cuts = {("cut", 1): stored_of_cut()[1]}
    for item, run in zip(items, runs, strict=True):
        wanted = expected[run]
        listed = (item["size_bytes"], item["missing_bytes"], item["truncated_bytes"])
        assert listed == (len(wanted), 0, cuts.get(run, 0)), f"{api.base_url}: {run}: {item}"
        whole = api.get(f"/api/logs/{attempt_id}/files/{item['id']}")
        assert whole.status_code == 200, whole.text
        assert whole.content == wanted, f"{api.base_url}: {run} read whole"
        assert read_in_pages(api, attempt_id, item) == wanted, f"{api.base_url}: {run} in pages"
        if wanted:
            tail = api.get(
                f"/api/logs/{attempt_id}/files/{item['id']}", headers={"Range": "bytes=-100"}
            )
            assert (tail.status_code, tail.content) == (206, wanted[-100:]), run
    return items


def cli_output(items: list[dict[str, Any]], expected: Mapping[tuple[str, int], bytes]) -> str:
    """What ``tickwork log`` prints for the listed files: each under its task's name."""
    parts = []
    for item in items:
        heading = f"--- {item['task']}\n" if len(items) > 1 else ""
        parts.append(heading + expected[run_of(item)].decode())
    return "".join(parts)


def ui_text(runs: list[tuple[int, bytes]]) -> str:
    """What the UI's text route shows for a task's runs (each far below its page)."""
    if len(runs) == 1:
        return runs[0][1].decode()
    return "".join(f"--- run {token} ---\n" + data.decode() for token, data in runs)


def assert_ui_reads(
    api: httpx.Client,
    attempt_id: int,
    items: list[dict[str, Any]],
    expected: Mapping[tuple[str, int], bytes],
) -> None:
    """The UI's text route shows each listed task's runs as expected."""
    runs_by_task: dict[str, list[tuple[int, bytes]]] = {}
    for item in items:
        runs_by_task.setdefault(item["task_id"], []).append((item["run"], expected[run_of(item)]))
    for task_id, runs in runs_by_task.items():
        page = api.get(f"/ui/attempts/{attempt_id}/tasks/{task_id}/log")
        assert page.status_code == 200, page.text
        assert page.text == ui_text(sorted(runs)), f"{api.base_url}: UI log of task {task_id}"


def followed_text(api: httpx.Client, attempt_id: int) -> tuple[dict[str, bytes], str]:
    """The log text of each file a follow stream sent, and the state its ``end`` gave."""
    texts: dict[str, bytes] = {}
    end_state = ""
    with api.stream("GET", f"/api/logs/{attempt_id}/follow", params={"max_seconds": 30}) as sent:
        assert sent.status_code == 200
        event = ""
        for line in sent.iter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                if event == "log":
                    texts[data["file"]] = texts.get(data["file"], b"") + data["text"].encode()
                elif event in ("end", "timeout"):
                    end_state = str(data.get("state", event))
                    break
    return texts, end_state


def assert_read_whole_and_once(
    deployment: Deployment,
    attempt_id: int,
    expected: Mapping[tuple[str, int], bytes],
    *,
    ended: str | None = None,
) -> None:
    """From each replica: REST (list, whole, pages, range), ``tickwork log``, the UI, and
    (once the attempt ended as ``ended``) a follow stream all give each run's expected
    log, once."""
    for endpoint in deployment.endpoints:
        with deployment.client(endpoint) as api:
            items = assert_rest_reads(api, attempt_id, expected)
            assert_ui_reads(api, attempt_id, items, expected)
            if ended is not None:
                texts, state = followed_text(api, attempt_id)
                assert state == ended
                whole = {item["path"]: expected[run_of(item)] for item in items}
                assert texts == {path: data for path, data in whole.items() if data}
        printed = deployment.tickwork(endpoint, "log", str(attempt_id))
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == cli_output(items, expected), f"tickwork log from {endpoint}"
        for item in items:
            if item["truncated_bytes"]:
                cut = f"{item['task']}: {item['truncated_bytes']:,} bytes were cut"
                assert cut in printed.stderr, printed.stderr


# --- specifications ------------------------------------------------------------------------


def test_logs_of_every_kind_of_run_read_whole_and_once_from_either_api_replica(
    deployment: Deployment, tmp_path: Path
) -> None:
    with gate() as (gate_url, opened):
        # Given a cluster sharing no path, and a project pushed to it over REST
        push_project(deployment, project_files(gate_url), tmp_path / "pushed")
        with deployment.client(deployment.endpoints[0]) as api:
            # And an attempt of a task that wrote some lines, killed through the client
            killed = start_attempt(api, "killed")
            wait_until(
                "the long task's lines are stored",
                lambda: (
                    [f["size_bytes"] for f in listed_files(api, killed)]
                    == [len(numbered("killed", 1, KILLED_LINES))]
                ),
                RUN_SECONDS,
                poll=0.2,
            )
            stopped = deployment.tickwork(deployment.endpoints[1], "kill", str(killed))
            assert stopped.returncode == 0, stopped.stderr
            # When an attempt runs a quiet task, a finished one, one failing then
            # succeeding on retry, one writing far more than the agent keeps, and one
            # still running (waiting on its gate)
            attempt = start_attempt(api, "every_kind")
            wait_until(
                "the running task's first lines are stored",
                lambda: any(
                    short(f["task"]) == "running"
                    and f["size_bytes"] == len(numbered("running", 1, 20))
                    for f in listed_files(api, attempt)
                ),
                RUN_SECONDS,
                poll=0.2,
            )
            assert wait_for_end(api, killed, deployment.cluster) == "killed"

        # Then while it runs, each run's log so far reads whole and once from either replica
        assert_read_whole_and_once(deployment, attempt, EXPECTED_WHILE_RUNNING)
        with deployment.client(deployment.endpoints[1]) as api:
            running = [f for f in listed_files(api, attempt) if short(f["task"]) == "running"]
            assert [f["ended_at"] for f in running] == [None]
        # And `tickwork log +TASK` prints both runs of the retried task, each once
        printed = deployment.tickwork(
            deployment.endpoints[1], "log", str(attempt), "+every_kind+retried"
        )
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout == "".join(
            f"--- +every_kind+retried\n{EXPECTED_WHILE_RUNNING[('retried', run)].decode()}"
            for run in (1, 2)
        )

        # When it is let finish
        opened.set()
        with deployment.client(deployment.endpoints[1]) as api:
            assert wait_for_end(api, attempt, deployment.cluster) == "success"

    # Then every run's log reads whole and once from either replica, and so does the
    # killed one's
    assert_read_whole_and_once(deployment, attempt, EXPECTED_AFTER, ended="success")
    killed_log = {("long", 1): numbered("killed", 1, KILLED_LINES)}
    assert_read_whole_and_once(deployment, killed, killed_log, ended="killed")
    # And no process wrote into its directories (an agent's scratch keeps no log)
    assert_directories_left_empty(deployment)


def test_an_executor_killed_mid_log_loses_no_byte_and_duplicates_none(
    deployment: Deployment, tmp_path: Path, redis_client: Redis, redis_prefix: str
) -> None:
    # Given two executors sharing the partitions, and a task writing numbered lines
    # steadily for seconds
    wait_until(
        "each executor holds half of the partitions",
        lambda: [partitions_held(e) for e in deployment.executors] == [8, 8],
        START_SECONDS,
        poll=0.2,
    )
    push_project(deployment, {"steady.dig": sh_task("steady", STEADY)}, tmp_path / "pushed")
    written = numbered("steady", 1, STEADY_LINES)
    with deployment.client(deployment.endpoints[0]) as api:
        attempt = start_attempt(api, "steady")
        follower = subprocess.Popen(
            [*tickwork_command(), "log", str(attempt), "-f", "--endpoint", deployment.endpoints[1]],
            cwd=deployment.client_dir,
            env=deployment.client_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            wait_until(
                "a fifth of the lines are stored",
                lambda: (
                    sum(f["size_bytes"] for f in listed_files(api, attempt)) >= len(written) // 5
                ),
                RUN_SECONDS,
                poll=0.05,
            )

            # When the executor holding the attempt's partition is killed mid-log, at a
            # moment it has read events of the partition and not acknowledged them
            victim = partition_holder(deployment, attempt)
            (survivor,) = [e for e in deployment.executors if e is not victim]
            claimed_before = claimed_events(survivor)
            stream = stream_key(redis_prefix, partition_of(attempt, DEFAULT_PARTITION_COUNT))
            unacknowledged = stop_holding_unacknowledged_events(victim, redis_client, stream)
            victim.service.signal_group(signal.SIGKILL)
            victim.service.wait_exit(10)
            (stored,) = listed_files(api, attempt)
            assert stored["ended_at"] is None and stored["size_bytes"] < len(written), stored

            # Then the other takes its partitions and the attempt succeeds
            wait_until(
                "the survivor holds every partition",
                lambda: partitions_held(survivor) == DEFAULT_PARTITION_COUNT,
                10,
                poll=0.2,
            )
            # And claims the events the killed one read and never acknowledged
            wait_until(
                "the survivor claimed the unacknowledged events",
                lambda: claimed_events(survivor) - claimed_before >= unacknowledged,
                10,
                poll=0.1,
            )
            assert wait_for_end(api, attempt, deployment.cluster) == "success"
            followed, errors = follower.communicate(timeout=COMMAND_TIMEOUT_SECONDS)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait(5)

    # And the log holds every line written, once, read from either replica
    assert_read_whole_and_once(deployment, attempt, {("steady", 1): written}, ended="success")
    # And a client that followed it across the kill printed every line once
    assert follower.returncode == 0, errors
    assert followed == b"--- +steady+steady\n" + written
    # And no process wrote into its directories (an agent's scratch keeps no log)
    assert_directories_left_empty(deployment)
