"""``tickwork pools`` against a live standalone that takes tokens: a task of a pool no one
has set waits, listed with its pool's slots missing; an admin sets the pool and the task
runs; a read token may list but not change pools; a pool is deleted once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._standalone import running_standalone, wait_for_attempt
from tests.support.waiting import wait_until
from tickwork.shared.exits import ExitCode

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADMIN = "an-admin-token-for-the-pools"
READER = "a-read-token-for-the-pools"
REPORT = "_pool: reports\n+report:\n  echo>: reporting\n"


def test_a_task_waits_for_its_pool_until_an_admin_sets_it(tmp_path: Path) -> None:
    environ = {"TICKWORK_API_TOKENS": f"admin:{ADMIN},read:{READER}"}
    project = tmp_path / "shop"
    project.mkdir()
    (project / "report.dig").write_text(REPORT, encoding="utf-8")
    with running_standalone(tmp_path / "state", environ=environ) as server:
        assert server.tickwork("push", str(project), token=ADMIN).exit_code == 0
        started = server.tickwork("start", "shop", "report", "--json", token=ADMIN)
        assert started.exit_code == 0, started.explain()
        attempt_id = str(started.json()["id"])

        # Given a task of pool reports, which no one has set: it waits
        def listed() -> list[dict[str, object]]:
            found = server.tickwork("pools", "--json", token=READER)
            assert found.exit_code == 0, found.explain()
            return found.json_lines()

        wait_until("the task waits for pool reports", lambda: bool(listed()), 30)
        assert listed() == [
            {
                "name": "reports",
                "slots": None,
                "used": 0,
                "waiting": 1,
                "free": 0,
                "description": None,
            }
        ]
        table = server.tickwork("pools", token=READER)
        row = next(line for line in table.stdout.splitlines() if "reports" in line)
        assert row.split("│")[1:5] == [" reports ", " missing ", " 0    ", " 1       "], row
        assert server.get(f"/api/attempts/{attempt_id}")["state"] == "running"
        tree = server.tickwork("tasks", attempt_id, token=READER)
        assert "ready (waiting for pool reports)" in tree.stdout, tree.explain()

        # When a read token tries to set it, it is refused
        refused = server.tickwork("pools", "set", "reports", "1", token=READER)
        assert refused.exit_code == ExitCode.UNAUTHORIZED, refused.explain()
        assert "needs an admin token" in refused.stderr

        long = server.tickwork("pools", "set", "reports", "1", "--description", "x" * 501)
        assert long.exit_code == ExitCode.INVALID, long.explain()
        assert "--description: expected at most 500 characters" in long.stderr

        # When an admin sets it, the task runs
        done = server.tickwork(
            "pools", "set", "reports", "1", "--description", "the reporting database",
            token=ADMIN,
        )  # fmt: skip
        assert done.exit_code == 0, done.explain()
        assert "slots:       1" in done.stdout and "the reporting database" in done.stdout
        assert wait_for_attempt(server, attempt_id)["state"] == "success"
        (pool,) = listed()
        assert (pool["slots"], pool["used"], pool["waiting"]) == (1, 0, 0)
        again = server.tickwork("pools", "set", "reports", "3", "--json", token=ADMIN)
        assert again.json()["slots"] == 3
        assert again.json()["description"] == "the reporting database"

        # Then it is deleted once
        deleted = server.tickwork("pools", "delete", "reports", token=ADMIN)
        assert deleted.exit_code == 0 and "pool reports: deleted" in deleted.stdout
        assert listed() == []
        missing = server.tickwork("pools", "delete", "reports", token=ADMIN)
        assert missing.exit_code == ExitCode.NOT_FOUND, missing.explain()
        assert "'reports' does not exist" in missing.stderr
