"""The client commands a Digdag user types, against a live standalone: a workflow's
definition (``workflows PROJECT WORKFLOW``), a revision's files (``download``), a start of
an older revision or a dry one, a retry of the latest revision under a name (which its
tasks see as ``${retry_attempt_name}``), one session (``sessions ID``) and its attempts
(``attempts --session ID``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._standalone import StandaloneProcess, running_standalone, wait_for_attempt
from tickwork.shared.exits import ExitCode

pytestmark = [pytest.mark.e2e]

WORKFLOW = """\
timezone: UTC
+say:
  sh>: echo "{word} retry=${{retry_attempt_name}}"
"""


def push(server: StandaloneProcess, root: Path, revision: str, word: str) -> None:
    project = root / "greet"
    project.mkdir(exist_ok=True)
    (project / "hello.dig").write_text(WORKFLOW.format(word=word), encoding="utf-8")
    (project / "notes.txt").write_text(f"{word}\n", encoding="utf-8")
    pushed = server.tickwork("push", str(project), "--revision", revision)
    assert pushed.exit_code == 0, pushed.explain()


def log_of(server: StandaloneProcess, attempt_id: str) -> str:
    shown = server.tickwork("log", attempt_id)
    assert shown.exit_code == 0, shown.explain()
    return shown.stdout


def test_the_commands_of_digdag_s_cli_over_a_project_s_revisions(tmp_path: Path) -> None:
    with running_standalone(tmp_path / "state") as server:
        push(server, tmp_path, "r1", "first")
        push(server, tmp_path, "r2", "second")

        shown = server.tickwork("workflows", "greet", "hello", "-r", "r1")
        assert shown.exit_code == 0, shown.explain()
        assert "revision:      r1" in shown.stdout
        assert 'command: echo "first retry=${retry_attempt_name}"' in shown.stdout

        out = tmp_path / "got"
        downloaded = server.tickwork("download", "greet", "-r", "r1", "-o", str(out))
        assert downloaded.exit_code == 0, downloaded.explain()
        assert (out / "notes.txt").read_text() == "first\n"
        again = server.tickwork("download", "greet", "-o", str(out))
        assert again.exit_code == ExitCode.INVALID and "is not empty" in again.stderr

        dry = server.tickwork("start", "greet", "hello", "--session", "2026-01-01", "-d")
        assert dry.exit_code == 0, dry.explain()
        assert "would start greet/hello of revision r2" in dry.stdout
        assert server.get("/api/sessions")["items"] == []

        started = server.tickwork(
            "start", "greet", "hello", "--revision", "r1", "--session", "2026-01-01", "--json"
        )
        assert started.exit_code == 0, started.explain()
        first = started.json()
        wait_for_attempt(server, first["id"])
        assert "first retry=" in log_of(server, first["id"])

        retried = server.tickwork(
            "retry", first["id"], "--all", "--latest-revision", "--name", "again", "--json"
        )
        assert retried.exit_code == 0, retried.explain()
        second = retried.json()
        wait_for_attempt(server, second["id"])
        assert "second retry=again" in log_of(server, second["id"])

        session = server.tickwork("sessions", first["session_id"])
        assert session.exit_code == 0, session.explain()
        assert f"last_attempt: {second['id']}" in session.stdout
        attempts = server.tickwork("attempts", "--session", first["session_id"], "--json")
        ids = [item["id"] for item in attempts.json_lines()]
        assert ids == [second["id"], first["id"]]

        taken = server.tickwork("retry", first["id"], "--all", "--name", "again")
        assert taken.exit_code == ExitCode.CONFLICT
        assert "already has an attempt named 'again'" in taken.stderr
        missing = server.tickwork("retry", first["id"], "--all", "--revision", "r9")
        assert missing.exit_code == ExitCode.INVALID
        assert "--revision" in missing.stderr and "r9" in missing.stderr
