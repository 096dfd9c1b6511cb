"""Quoted numbers in distributed mode: an executor and an agent as OS processes read
``_retry: "2"``, ``{limit: "2"}``, a loop count rendered as a string and a quoted
``wait>`` poll interval as the numbers they spell."""

from __future__ import annotations

import pytest

from tests.fault._cluster import Cluster

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(90)
def test_quoted_numbers_drive_retries_loops_and_waits_on_a_cluster(cluster: Cluster) -> None:
    cluster.start_executor()
    cluster.start_agent("agent-a")
    runs = cluster.project_dir / "flaky.runs"
    rounds = cluster.project_dir / "rounds.txt"
    text = f"""
        _export:
          times: "3"
        +flaky:
          _retry: "2"
          sh>: n=$$(cat {runs} || echo 0); n=$$((n+1)); echo $$n > {runs}; test $$n -ge 3
        +repeat:
          loop>: ${{times}}
          _parallel: {{limit: "2"}}
          _do:
            sh>: echo ${{i}} >> {rounds}
        +pause:
          wait>: "1"
          poll_interval: "1"
    """
    attempt = cluster.submit("quoted", text)

    assert cluster.wait_for_attempt_end(attempt, 60) == "success", cluster.explain(attempt)
    assert runs.read_text().strip() == "3"
    assert sorted(rounds.read_text().split()) == ["0", "1", "2"]
    assert cluster.task(attempt, "flaky").retry_count == 2
