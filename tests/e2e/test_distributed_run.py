"""``tickwork run --on-executor``: a run handed to a real executor and agent, followed to its end.

The cluster harness of the fault tests (tests/fault/_cluster.py) starts the services as
OS processes; here nothing goes wrong, so this is the by-hand flow of the README.
"""

from __future__ import annotations

import pytest

from tests.fault._cluster import Cluster, session_of, workflow_text

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(60)
def test_a_run_on_the_executor_is_run_by_an_agent_and_followed_to_its_end(
    cluster: Cluster,
) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    text = workflow_text(
        {"first": cluster.ledger.task("first"), "second": cluster.ledger.task("second")}
    )
    (cluster.project_dir / "handed.dig").write_text(text)

    done = cluster.tickwork("run", str(cluster.project_dir / "handed.dig"), "--on-executor", "-q")

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{cluster.explain()}"
    assert ": success" in done.stdout
    assert [e.task for e in cluster.ledger.ends()] == ["first", "second"]
    # The agent's pool worker ran them, not the command: each once, under the first token.
    assert {e.token for e in cluster.ledger.ends()} == {1}
    agent = cluster.agent("agent-a").pid
    assert {session_of(e.ppid) for e in cluster.ledger.ends()} == {agent}


def test_on_executor_refuses_a_store_that_is_not_postgresql(cluster: Cluster) -> None:
    (cluster.project_dir / "wf.dig").write_text("+a:\n  echo>: a\n")
    done = cluster.tickwork(
        "run",
        str(cluster.project_dir / "wf.dig"),
        "--on-executor",
        env={"TICKWORK_DATABASE_URL": ""},
    )
    assert done.returncode == 2
    assert "--on-executor needs TICKWORK_DATABASE_URL" in done.stderr
    assert not (cluster.project_dir / ".tickwork").exists()
