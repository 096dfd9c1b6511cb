"""``sla:`` end to end: in ``tickwork run`` and on a cluster of executor and agent processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.e2e._run import Project
from tests.fault._cluster import Cluster, literal
from tickwork.shared.store.tables import alerts

pytestmark = pytest.mark.e2e


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.empty(tmp_path)


def test_a_late_run_runs_its_sla_task_records_an_alert_and_still_succeeds(
    project: Project,
) -> None:
    # Given a workflow whose first task outlasts its two-second SLA
    project.write(
        "late.dig",
        """
        sla:
          duration: 2s
          +notice:
            sh>: echo "late" > notice.txt
        +slow:
          sh>: sleep 4 && echo done > slow.txt
        +after:
          sh>: echo after > after.txt
        """,
    )

    # When it is run
    run = project.run("late.dig")

    # Then the SLA task ran while +slow was running, the alert is stored, and the
    # attempt still ends in success: alert and tasks do not fail it
    assert run.exit_code == 0, run.explain()
    progress = run.progress()
    assert ("+late^sla+notice", "success") in progress
    notice_done = progress.index(("+late^sla+notice", "success"))
    assert notice_done < progress.index(("+late+slow", "success"))
    assert [project.read(n).strip() for n in ("notice.txt", "slow.txt", "after.txt")] == [
        "late",
        "done",
        "after",
    ]
    assert project.count_rows("alerts") == 1


def test_fail_true_stops_a_run_at_its_deadline(project: Project) -> None:
    project.write(
        "stop.dig",
        """
        sla:
          duration: 2s
          fail: true
        +slow:
          sh>: sleep 30
        +after:
          sh>: echo after > after.txt
        """,
    )

    started = time.monotonic()
    run = project.run("stop.dig")

    assert run.exit_code == 1, run.explain()
    assert time.monotonic() - started < 20  # not the 30 seconds +slow would have taken
    assert ("+stop+slow", "canceled") in run.progress()
    assert "failed +stop^sla^fail: SLA missed: workflow stop was not done by" in run.summary
    assert not (project.root / "after.txt").exists()


@pytest.mark.timeout(90)
def test_a_missed_sla_on_the_cluster_stops_the_task_on_its_agent_and_fails_once(
    cluster: Cluster,
) -> None:
    # Given an executor and an agent that can run two tasks at once
    cluster.start_executor()
    cluster.start_agent("agent-a", concurrency=2)
    ledger = cluster.ledger
    (cluster.project_dir / "late.dig").write_text(
        "sla:\n"
        "  duration: 3s\n"
        "  fail: true\n"
        "  +notice:\n"
        f"    sh>: {literal(ledger.task('notice'))}\n"
        "+slow:\n"
        f"  sh>: {literal(ledger.task('slow', sleep_seconds=40))}\n"
        "+after:\n"
        f"  sh>: {literal(ledger.task('after'))}\n"
    )

    # When the run outlasts its SLA
    started = time.monotonic()
    done = cluster.tickwork("run", str(cluster.project_dir / "late.dig"), "--on-executor", "-q")

    # Then the attempt fails at the deadline, the SLA task ran on the agent, the slow
    # task was stopped there, and the executor counted one missed SLA and one alert
    assert done.returncode == 1, f"{done.stdout}\n{done.stderr}\n{cluster.explain()}"
    assert time.monotonic() - started < 30
    assert [e.task for e in ledger.ends()] == ["notice"], ledger.text()
    assert [e.task for e in ledger.starts()] == ["slow", "notice"], ledger.text()
    assert cluster.executor.metric("tickwork_sla_missed_total") == 1
    with cluster.engine.connect() as conn:
        kinds = conn.execute(sa.select(alerts.c.kind)).scalars().all()
    assert kinds == ["sla"]
