"""The ``tickwork`` command starts fast: its client commands import no database, migration
or Celery code (they talk to the API only), and ``tickwork --help`` lists every command
without importing any."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import click

from tickwork.services.cli.schedules import MAX_SKIP
from tickwork.services.compose.commands import COMMANDS, main
from tickwork.shared.store import schedules as schedule_store

CLIENT_MODULES = [
    "tickwork.services.cli",
    "tickwork.services.cli.client",
    "tickwork.services.cli.api_client",
    "tickwork.services.cli.admin_api",
    "tickwork.services.cli.output",
    "tickwork.services.cli.failures",
    "tickwork.services.cli.projects",
    "tickwork.services.cli.sessions",
    "tickwork.services.cli.tasks",
    "tickwork.services.cli.logs",
    "tickwork.services.cli.schedules",
    "tickwork.services.cli.secrets",
    "tickwork.services.cli.tokens",
    "tickwork.services.cli.notifications",
    "tickwork.services.cli.triggers",
    "tickwork.services.cli.pools",
]
SERVER_COMMANDS = {
    "run",
    "check",
    "init",
    "api",
    "scheduler",
    "executor",
    "agent",
    "standalone",
    "db",
    "dev",
}
"""The commands that work on the database or local files (or run in-process) rather than
ask the API."""
CLIENT_CONTRACT = "client commands import no store, migration, Celery or service code"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
HEAVY = [
    "sqlalchemy",
    "alembic",
    "celery",
    "kombu",
    "psycopg",
    "tickwork.shared.store",
    "tickwork.shared.dispatch",
]


def loaded_after(code: str) -> set[str]:
    """The heavy modules loaded in a fresh interpreter after running ``code``."""
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import sys
        import json
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}
                     or any(m == h or m.startswith(h + ".") for h in {HEAVY!r}))))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_client_command_modules_import_no_store_or_celery_code() -> None:
    assert loaded_after("".join(f"import {name}\n" for name in CLIENT_MODULES)) == set()


def test_the_help_of_a_client_command_imports_no_store_or_celery_code() -> None:
    code = """
        from tickwork.services.compose.commands import main
        try:
            main(["sessions", "--help"])
        except SystemExit:
            pass
    """
    assert loaded_after(code) == set()


def test_the_root_help_lists_every_command_without_importing_one() -> None:
    code = """
        from tickwork.services.compose.commands import main
        try:
            main(["--help"])
        except SystemExit:
            pass
        import sys
        kept = ("tickwork.services.cli.errors", "tickwork.services.cli.lazy")
        assert not [m for m in sys.modules if m.startswith("tickwork.services.cli.")
                    and m not in kept], sys.modules
    """
    assert loaded_after(code) == set()


def test_each_short_help_in_the_table_is_the_commands_own() -> None:
    ctx = click.Context(main)
    for name, lazy in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None, name
        first_paragraph = inspect.cleandoc(command.help or "").split("\n\n")[0]
        assert lazy.short_help == " ".join(first_paragraph.split()), name


def test_the_skip_limit_of_the_cli_is_the_stores() -> None:
    assert MAX_SKIP == schedule_store.MAX_SKIP


def client_contract() -> dict[str, Any]:
    """The import-linter contract of the client commands, from pyproject.toml."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == CLIENT_CONTRACT]
    return contract


def test_every_client_command_lives_in_the_client_package_which_its_contract_holds_whole() -> None:
    contract = client_contract()
    assert contract["source_modules"] == ["tickwork.services.cli"]
    assert "ignore_imports" not in contract
    for name, lazy in COMMANDS.items():
        module = lazy.import_path.split(":")[0]
        assert module.startswith("tickwork.services.cli.") == (name not in SERVER_COMMANDS), name


def test_no_module_is_loose_at_the_top_of_services() -> None:
    services = PYPROJECT.parent / "services"
    assert sorted(path.name for path in services.glob("*.py")) == ["__init__.py"]
