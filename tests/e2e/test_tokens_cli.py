"""``tickwork tokens``, ``whoami`` and ``audit`` against a live standalone that takes tokens:
an admin makes a named operate token, its holder is named by ``whoami`` and may start work
but not manage tokens, a token limited to projects lists its globs, the audit log names
them both, and a revoked token is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._standalone import running_standalone
from tickwork.shared.exits import ExitCode

pytestmark = [pytest.mark.e2e]

ADMIN = "an-admin-token-for-the-cli"


def test_an_admin_makes_names_audits_and_revokes_a_token(tmp_path: Path) -> None:
    environ = {"TICKWORK_API_TOKENS": f"admin:{ADMIN}"}
    with running_standalone(tmp_path / "state", environ=environ) as server:
        created = server.tickwork("tokens", "create", "oncall", "--role", "operate", token=ADMIN)
        assert created.exit_code == 0, created.explain()
        secret = created.stdout.strip()
        assert secret.startswith("tw_") and "shown only now" in created.stderr

        who = server.tickwork("whoami", "--json", token=secret)
        assert who.json() == {
            "name": "oncall",
            "role": "operate",
            "projects": [],
            "source": "store",
            "expires_at": None,
        }
        refused = server.tickwork("tokens", "revoke", "oncall", token=secret)
        assert refused.exit_code == ExitCode.UNAUTHORIZED, refused.explain()
        assert "needs an admin token" in refused.stderr

        scoped = server.tickwork(
            "tokens", "create", "data-ci", "--role", "read", "--project", "data-*",
            "--project", "etl", token=ADMIN,
        )  # fmt: skip
        assert scoped.exit_code == 0, scoped.explain()
        assert "projects data-* etl" in scoped.stderr
        who = server.tickwork("whoami", token=scoped.stdout.strip())
        assert "projects:   data-* etl" in who.stdout, who.explain()
        table = server.tickwork("tokens", "list", token=ADMIN)
        assert "data-* etl" in table.stdout, table.explain()
        listed = server.tickwork("tokens", "list", "--json", token=ADMIN)
        assert [(item["name"], item["projects"]) for item in listed.json_lines()] == [
            ("data-ci", ["data-*", "etl"]),
            ("oncall", []),
        ]
        bad = server.tickwork(
            "tokens", "create", "bad", "--role", "read", "--project", "a/b", token=ADMIN
        )
        assert bad.exit_code == ExitCode.INVALID, bad.explain()
        assert "/projects/0" in bad.stderr and "Traceback" not in bad.stderr
        audit = server.tickwork("audit", "--json", "--actor", "env:admin", token=ADMIN)
        assert ("token.create", "token oncall") in {
            (item["action"], item["target"]) for item in audit.json_lines()
        }
        theirs = server.tickwork("audit", "--json", "--actor", "oncall", token=ADMIN)
        assert [(i["action"], i["outcome"]) for i in theirs.json_lines()] == [
            ("token.revoke", "refused")
        ]

        revoked = server.tickwork("tokens", "revoke", "oncall", token=ADMIN)
        assert revoked.exit_code == 0, revoked.explain()
        after = server.tickwork("whoami", token=secret)
        assert after.exit_code == ExitCode.UNAUTHORIZED, after.explain()
