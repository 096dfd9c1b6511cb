"""The README's CLI tour, run with a named token against a standalone that takes tokens:
each change it makes leaves one audit row naming that token, the action and its target,
and a change a read token is refused leaves a refused row."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._standalone import running_standalone
from tests.support.readme_tour import TOUR, copy_examples, run_tour
from tickwork.shared.exits import ExitCode

pytestmark = [pytest.mark.e2e]

ADMIN = "an-admin-token-for-the-tour"
ACTIONS = {
    "push": "project.push",
    "start": "attempt.start",
    "retry": "attempt.retry",
    "kill": "attempt.kill",
    "schedules pause": "schedule.pause",
    "schedules resume": "schedule.resume",
    "schedules skip": "schedule.skip",
    "backfill": "schedule.backfill",
}


def expected_actions() -> list[tuple[str, str]]:
    """The action of each step of the tour that changes something, and its outcome (a
    start of a session that has an attempt fails: 409)."""
    found = []
    for step in TOUR:
        for words, action in ACTIONS.items():
            if step.command.startswith(words + " "):
                failed = action == "attempt.start" and step.exit_status == ExitCode.CONFLICT
                found.append((action, "failed" if failed else "ok"))
    return found


def test_each_change_of_the_readme_tour_leaves_one_audit_row_naming_its_token(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "work"
    project = copy_examples(workdir)
    environ = {"TICKWORK_API_TOKENS": f"admin:{ADMIN}"}
    with running_standalone(tmp_path / "state", "--project", project, environ=environ) as server:
        secrets = {}
        for name, role in (("tour", "admin"), ("viewer", "read")):
            made = server.tickwork("tokens", "create", name, "--role", role, token=ADMIN)
            assert made.exit_code == 0, made.explain()
            secrets[name] = made.stdout.strip()
        assert list(run_tour(server, workdir, token=secrets["tour"]))
        refused = server.tickwork(
            "schedules", "pause", "examples", "scheduled", token=secrets["viewer"]
        )
        assert refused.exit_code == ExitCode.UNAUTHORIZED, refused.explain()
        listed = server.tickwork("audit", "--json", "--limit", "500", token=ADMIN)
    events = list(reversed(listed.json_lines()))  # oldest first
    tour = [event for event in events if event["actor"] == "tour"]
    assert [(e["action"], e["outcome"]) for e in tour] == expected_actions()
    assert all(event["project"] == "examples" for event in tour), tour
    targets = {event["action"]: event["target"] for event in tour}
    assert targets["project.push"] == "project examples"
    started = [step.command.split()[2] for step in TOUR if step.command.startswith("start ")]
    assert [e["target"] for e in tour if e["action"] == "attempt.start"] == [
        f"workflow {workflow}" for workflow in started
    ]
    for action in ("attempt.retry", "attempt.kill"):
        assert targets[action].startswith("attempt "), targets
    for action in ("schedule.pause", "schedule.resume", "schedule.skip", "schedule.backfill"):
        assert targets[action].startswith("schedule "), targets
    theirs = [(e["action"], e["outcome"], e["status"]) for e in events if e["actor"] == "viewer"]
    assert theirs == [("schedule.pause", "refused", 403)]
