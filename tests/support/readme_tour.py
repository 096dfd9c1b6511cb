"""Run README.md's "A short CLI tour" against a fresh standalone and write what it printed
back into README.md, between ``<!-- tour:begin -->`` and ``<!-- tour:end -->``.

``make readme-tour`` runs it: ``python -m tests.support.readme_tour [README]``. The
standalone runs as ``make run`` starts it (the examples pushed), in a temporary
directory. The tour is the list ``TOUR`` below; a step may name the attempt it creates,
and later steps use that name (``{hello}``) where the README shows the attempt's id.
A step that does not end with its exit status stops the script, and README.md is left
as it was.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.e2e._run import tickwork_command
from tests.e2e._standalone import StandaloneProcess, client_environment, running_standalone
from tests.support.documented_commands import ATTEMPT_ID, REPO_ROOT

BEGIN = "<!-- tour:begin -->"
END = "<!-- tour:end -->"
COMMENT_COLUMN = 50
STEP_TIMEOUT_SECONDS = 60
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Step:
    """One command of the tour: its words after ``tickwork``, the comment shown beside
    it, its exit status, the name of the attempt it creates, and whether a blank line
    follows its output."""

    command: str
    comment: str = ""
    exit_status: int = 0
    names: str = ""
    gap_after: bool = False


TOUR = (
    Step("push examples --revision v1", "the project is named after the directory"),
    Step("workflows examples", "last session, its state, the next run"),
    Step("start examples hello --session 2026-11-30 --wait", names="hello"),
    Step("start examples hello --session 2026-11-30", "the session exists", exit_status=4),
    Step("start examples sequence", names="sequence"),
    Step("log {sequence} -f", "follows until the attempt ends"),
    Step("sessions --limit 3"),
    Step("attempt {hello}"),
    Step("tasks {hello}", "the task tree: states, times, errors"),
    Step("log {hello} +hello+fetch"),
    Step("log {sequence} +sequence+lod", "a typo", exit_status=3),
    Step(
        "retry {hello} --from +hello+count_rows --wait",
        "or --all, or --resume (the default)",
        gap_after=True,
    ),
    Step(
        "start examples retry_notify --wait",
        "why it failed",
        exit_status=1,
        gap_after=True,
    ),
    Step("start examples poll_until_ready", names="polling"),
    Step("kill {polling}", gap_after=True),
    Step("schedules"),
    Step("schedules pause examples scheduled"),
    Step("schedules resume examples scheduled", "--replay runs what was due meanwhile"),
    Step("schedules skip examples scheduled --count 2"),
    Step('backfill examples scheduled --from "2026-11-30 16:00" --to "2026-11-30 16:02"'),
)


def run_tour(
    standalone: StandaloneProcess, workdir: Path, token: str | None = None
) -> Iterator[str]:
    """Each step's lines for the README: ``$ tickwork …  # comment``, then its output;
    each command sends ``token`` if given."""
    attempts: dict[str, str] = {}
    for step in TOUR:
        command = step.command.format(**attempts)
        words = shlex.split(command)
        done = subprocess.run(
            [*tickwork_command(), *words],
            env=client_environment(standalone.endpoint, token),
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=STEP_TIMEOUT_SECONDS,
            check=False,
        )
        output = ANSI.sub("", done.stdout)
        shown = f"tickwork {command}"
        if done.returncode != step.exit_status:
            raise SystemExit(
                f"`{shown}` exited {done.returncode}, not {step.exit_status}:\n{output}"
            )
        if step.names:
            found = ATTEMPT_ID.search(output)
            if found is None:
                raise SystemExit(f"`{shown}` named no attempt:\n{output}")
            attempts[step.names] = found[1]
        yield command_line(shown, step)
        yield from output.rstrip("\n").splitlines()
        if step.gap_after:
            yield ""


def command_line(shown: str, step: Step) -> str:
    """The README's line for a step: ``$ tickwork …``, its comment aligned after it."""
    comment = step.comment
    if step.exit_status:
        comment = f"exit {step.exit_status}: {comment}" if comment else f"exit {step.exit_status}"
    line = f"$ {shown}"
    if not comment:
        return line
    return f"{line:<{max(COMMENT_COLUMN, len(line) + 4)}}# {comment}"


def rewrite(readme: str, lines: list[str]) -> str:
    """``readme`` with the block between the tour's markers replaced by ``lines``."""
    start = readme.index(BEGIN) + len(BEGIN)
    end = readme.index(END, start)
    block = "\n".join(["", "```console", *lines, "```", ""])
    return readme[:start] + block + readme[end:]


def copy_examples(workdir: Path) -> str:
    """The examples copied into ``workdir/examples``, as the tour pushes them; its path."""
    shutil.copytree(
        REPO_ROOT / "examples", workdir / "examples", ignore=shutil.ignore_patterns(".tickwork")
    )
    return str(workdir / "examples")


def main(readme_path: Path) -> None:
    """Run the tour in a temporary directory and rewrite ``readme_path``'s tour block."""
    with tempfile.TemporaryDirectory(prefix="tickwork-tour-") as tmp:
        workdir = Path(tmp) / "work"
        project = copy_examples(workdir)
        with running_standalone(Path(tmp) / "state", "--project", project) as standalone:
            lines = list(run_tour(standalone, workdir))
    readme_path.write_text(rewrite(readme_path.read_text(encoding="utf-8"), lines))
    print(f"{readme_path}: the tour ran {len(TOUR)} commands; its output is rewritten")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT / "README.md")
