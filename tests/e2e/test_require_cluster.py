"""``require>`` in the distributed mode: a real executor starts the required workflow, an
agent runs its tasks, and the requiring task waits without an agent slot."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from tests.fault._cluster import Cluster, literal
from tickwork.shared.store.tables import attempts, sessions

pytestmark = [pytest.mark.e2e]


@pytest.mark.timeout(60)
def test_a_required_workflow_runs_first_and_the_waiting_task_holds_no_agent(
    cluster: Cluster,
) -> None:
    # Given one agent with a single slot, and `upstream` that nothing has run yet
    cluster.start_executor()
    cluster.start_agent("agent-a", concurrency=1)
    upstream = literal(cluster.ledger.task("upstream"))
    (cluster.project_dir / "upstream.dig").write_text(f"+u:\n  sh>: {json.dumps(upstream)}\n")
    after = literal(cluster.ledger.task("after"))

    # When a workflow requires it
    attempt = cluster.submit(
        "downstream",
        f"+req:\n  require>: upstream\n+after:\n  sh>: {json.dumps(after)}\n",
    )

    # Then upstream ran (on the only slot: the waiting require> did not hold it), then +after
    assert cluster.wait_for_attempt_end(attempt, 40) == "success", cluster.explain(attempt)
    assert [e.task for e in cluster.ledger.ends()] == ["upstream", "after"]
    with cluster.engine.connect() as conn:
        query = (
            sa.select(sessions.c.workflow_name, sessions.c.session_time, attempts.c.state)
            .join(attempts, attempts.c.session_id == sessions.c.id)
            .order_by(attempts.c.id)
        )
        rows = conn.execute(query).all()
    assert [(r.workflow_name, r.state) for r in rows] == [
        ("downstream", "success"),
        ("upstream", "success"),
    ]
    assert rows[0].session_time == rows[1].session_time
