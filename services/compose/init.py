"""``tickwork init DIR``: a new project to start from, as ``digdag init`` makes one.

The directory gets a workflow named after it (``DIR/DIR.dig``: a task that echoes the
session, one that runs a shell command, a commented-out schedule), a README that says how
to run, check and push it, and a ``.gitignore`` for the state a local run keeps. The files
are written only if none of them exists already: nothing of a project is overwritten.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from tickwork.services.cli.errors import ExitCode

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""What a project (and its first workflow) may be named: as a pushed project's name."""

WORKFLOW = """\
timezone: UTC

# Uncomment to run it every day at 07:00 UTC under `tickwork standalone` or the scheduler:
# schedule:
#   daily>: 07:00:00

+hello:
  echo>: "hello from ${workflow_name} for ${session_date}"

+shell:
  sh>: echo "the session time is ${session_time}"
"""

README = """\
# {name}

A tickwork project. Run its workflow here with `tickwork run {name}.dig`, check it with
`tickwork check {name}.dig`, and send it to a server with `tickwork push`.
"""

GITIGNORE = """\
# What `tickwork run` keeps between runs (its store and task logs).
.tickwork/
"""


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def init_command(directory: Path) -> None:
    """Make a new project in DIRECTORY: a workflow named after it, a README, a .gitignore."""
    name = directory.resolve().name
    if not NAME.fullmatch(name):
        raise click.BadParameter(
            f"{name!r} cannot name a project: 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            param_hint="'DIRECTORY'",
        )
    files = {
        directory / f"{name}.dig": WORKFLOW,
        directory / "README.md": README.format(name=name),
        directory / ".gitignore": GITIGNORE,
    }
    existing = [str(path) for path in files if path.exists()]
    if existing:
        which = "exists" if len(existing) == 1 else "exist"
        click.echo(f"error: {', '.join(existing)} {which} already: nothing was written", err=True)
        raise SystemExit(ExitCode.INVALID)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, text in files.items():
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        click.echo(f"error: cannot write the project in {directory}: {exc}", err=True)
        raise SystemExit(ExitCode.INVALID) from None
    click.echo(f"created project {name} in {directory}:")
    for path in files:
        click.echo(f"  {path}")
    click.echo(f"run it: cd {directory} && tickwork run {name}.dig")
