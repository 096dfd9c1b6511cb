"""The ``tickwork`` commands the documentation shows, as written, and what they expect.

A command comes from a shell block of a Markdown file (```sh, ```bash, ```console or a
block with no language) or from inline code in its prose (`` `tickwork …` ``). In a
console block only ``$ `` lines are commands, and the lines after one are what it
printed. A comment ``# … exit N`` on a command says the documented exit status is N.

Most run as written (tests/e2e/test_documented_commands.py); the few a test cannot run
are listed here with the reason, and are parsed against the command tree instead.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

REPO_ROOT = Path(__file__).resolve().parents[2]

# The commands that are not run, each parsed against its command's options instead.
NOT_RUN_SUBCOMMANDS = {
    "api": "a server: it runs until it is stopped",
    "scheduler": "a server: it runs until it is stopped",
    "executor": "a server: it runs until it is stopped",
    "agent": "a server: it runs until it is stopped",
    "standalone": "a server: it runs until it is stopped",
    "dev": "`make cluster`: every service on the local PostgreSQL and Redis until Ctrl-C",
    "db": "migrates or waits for an operator's PostgreSQL database",
    "tokens": "needs a server that takes tokens; the pages' standalone runs without "
    "(tests/e2e/test_tokens_cli.py runs them against one that does)",
}
NOT_RUN_OPTIONS = {
    "--on-executor": "hands the run to running executors and agents on PostgreSQL and Redis",
}

# What the pages' commands assume besides a copy of examples/: the workflow file `wf.dig`
# README's "Running a workflow" runs with its params file `params.yml`, and a secret's
# value in `pw.txt` (docs/language/secrets.md). The project `etl` they name is pushed by
# the test.
WORKFLOW = """\
_export:
  table: events
  db:
    host: db.example.internal

+load:
  echo>: loading ${table} from ${db.host} for ${session_date}
"""

SHELL_LANGUAGES = ("sh", "bash", "console", "")
EXIT_COMMENT = re.compile(r"#[^#]*\bexit (\d+)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
INLINE = re.compile(r"`(tickwork [^`]+)`")
SEPARATORS = ("|", "||", "&&", ";", "&")
ATTEMPT_ID = re.compile(r"\battempt (\d+)")
HELP_OPTIONS = ("-h", "--help")


def documentation_files(root: Path = REPO_ROOT) -> list[Path]:
    """README.md, deploy/README.md and every page under docs/, in that order."""
    pages = sorted((root / "docs").rglob("*.md"))
    return [root / "README.md", root / "deploy" / "README.md", *pages]


def prepare_workdir(workdir: Path) -> None:
    """Fill ``workdir`` with what the documented commands expect to find there."""
    shutil.copytree(
        REPO_ROOT / "examples", workdir / "examples", ignore=shutil.ignore_patterns(".tickwork")
    )
    (workdir / "wf.dig").write_text(WORKFLOW, encoding="utf-8")
    (workdir / "pw.txt").write_text("a database password\n", encoding="utf-8")
    (workdir / "params.yml").write_text("table: users\n", encoding="utf-8")


@dataclass(frozen=True)
class DocumentedCommand:
    """One ``tickwork`` command a page shows, where it shows it, and what it expects."""

    path: Path
    line: int
    text: str
    args: tuple[str, ...]
    environ: dict[str, str] = field(default_factory=dict)
    exit_status: int = 0
    output: str = ""
    inline: bool = False

    @property
    def where(self) -> str:
        """``file:line``, relative to the repository."""
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    @property
    def subcommand(self) -> str:
        """The first word after ``tickwork`` (``--version`` for the bare group's options)."""
        return self.args[0] if self.args else ""

    def not_run_because(self) -> str | None:
        """Why this command is only parsed, not run; None when a test runs it."""
        if self.inline:
            return "prose: a template such as `tickwork log ID`"
        if self.subcommand in NOT_RUN_SUBCOMMANDS:
            return NOT_RUN_SUBCOMMANDS[self.subcommand]
        return next((why for option, why in NOT_RUN_OPTIONS.items() if option in self.args), None)


def every_documented_command() -> list[DocumentedCommand]:
    """The commands of every documentation page, page after page."""
    return [command for path in documentation_files() for command in documented_commands(path)]


def documented_commands(path: Path) -> list[DocumentedCommand]:
    """Every ``tickwork`` command of one page: its shell blocks' and its prose's."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[DocumentedCommand] = []
    language: str | None = None
    console_command: int | None = None
    exported: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            language = stripped[3:].strip() if language is None else None
            console_command = None
            exported = {}
            continue
        if language is None:
            found += _inline_commands(path, number, line)
        elif language == "console":
            if stripped.startswith("$ "):
                command = _block_command(path, number, stripped[2:], exported)
                console_command = len(found) if command else None
                found += [command] if command else []
            elif console_command is not None:
                found[console_command] = _with_output(found[console_command], line)
        elif language in SHELL_LANGUAGES:
            exported.update(_exports(stripped))
            command = _block_command(path, number, stripped, exported)
            found += [command] if command else []
    return found


def _exports(line: str) -> dict[str, str]:
    """The variables an ``export A=1 B=2`` line sets for the lines after it."""
    if not line.startswith("export "):
        return {}
    words = shlex.split(line, comments=True)[1:]
    return dict(word.split("=", 1) for word in words if ASSIGNMENT.match(word))


def _with_output(command: DocumentedCommand, line: str) -> DocumentedCommand:
    return replace(command, output=f"{command.output}{line}\n")


def _block_command(
    path: Path, number: int, text: str, exported: dict[str, str]
) -> DocumentedCommand | None:
    """The ``tickwork`` command of one shell line, without its variables and comment."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    for segment in _segments(words):
        environ, rest = _environment_prefix(segment, exported)
        if rest[:1] == ["tickwork"]:
            expected = EXIT_COMMENT.search(text)
            status = int(expected[1]) if expected else 0
            return DocumentedCommand(path, number, text, tuple(rest[1:]), environ, status)
    return None


def _segments(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a shell line, split at pipes, ``&&``, ``;`` and ``&``."""
    segment: list[str] = []
    for word in words:
        if word in SEPARATORS:
            yield segment
            segment = []
        else:
            segment.append(word)
    yield segment


def _environment_prefix(
    words: list[str], exported: dict[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The variables a command runs with (``exported``, changed by ``NAME=value`` words
    and ``env [-u NAME]`` before it), and the command."""
    environ = dict(exported)
    index = 0
    while index < len(words):
        word = words[index]
        if ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            environ[name] = value
        elif word == "env":
            pass
        elif word == "-u" and index > 0 and index + 1 < len(words):
            environ.pop(words[index + 1], None)
            index += 1
        else:
            break
        index += 1
    return environ, words[index:]


def _inline_commands(path: Path, number: int, line: str) -> list[DocumentedCommand]:
    commands = []
    for match in INLINE.finditer(line.replace("\\|", "|")):
        text = match[1]
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        commands.append(DocumentedCommand(path, number, text, tuple(words[1:]), inline=True))
    return commands


# --- checking a command against the command tree -------------------------------------------


def command_problems(root: click.Group, command: DocumentedCommand) -> list[str]:
    """What makes a documented command unknown to ``tickwork`` (empty if nothing).

    A command from a shell block is parsed as click would parse it (its options, their
    values, its arguments). One from prose is a template (``PROJECT``, ``[--json]``,
    ``pause|resume``): each alternative must name a command, each option must exist, and
    no more arguments may be given than the command takes.
    """
    if not command.inline:
        return _parse_problems(root, list(command.args))
    return [
        problem
        for alternative in _alternatives(_template_words(command.args))
        for problem in _template_problems(root, alternative)
    ]


def _parse_problems(root: click.Group, args: list[str]) -> list[str]:
    command, rest, problems = _resolve(root, args)
    if problems:
        return problems
    if any(word in HELP_OPTIONS for word in rest):
        return []
    try:
        with command.make_context(command.name or "tickwork", rest, resilient_parsing=False):
            pass
    except click.exceptions.Exit:
        return []
    except click.ClickException as exc:
        return [exc.format_message()]
    return []


def _resolve(root: click.Group, args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    """The command the leading words name, the words left for it, and what went wrong."""
    command: click.Command = root
    path = ["tickwork"]
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        found = command.get_command(click.Context(command), args[0])
        if found is None:
            return command, args, [f"`{' '.join(path)}` has no command {args[0]!r}"]
        path.append(args.pop(0))
        command = found
    return command, args, []


def _template_words(args: tuple[str, ...]) -> list[str]:
    """A template's words without brackets and ellipses; ``a | b`` becomes ``a|b``, and a
    ``|`` between two options (``--count N | --to TIME``) is dropped."""
    words = [word.strip("[]") for word in args]
    joined: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        following = words[index + 1] if index + 1 < len(words) else ""
        if word == "|" and following.startswith("-"):
            index += 1
            continue
        if word == "|" and joined and following:
            joined[-1] = f"{joined[-1]}|{following}"
            index += 2
            continue
        if word and word not in ("…", "..."):
            joined.append(word)
        index += 1
    return joined


def _alternatives(words: list[str]) -> list[list[str]]:
    """Every reading of a template: ``pause|resume`` gives one with each word."""
    readings: list[list[str]] = [[]]
    for word in words:
        options = word.split("|") if "|" in word and not word.startswith("-") else [word]
        readings = [[*reading, option] for reading in readings for option in options]
    return readings


def _template_problems(root: click.Group, words: list[str]) -> list[str]:
    command, rest, problems = _resolve(root, list(words))
    if problems:
        return problems
    options = {name: param for param in command.params for name in _names(param)}
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    takes = sum(max(p.nargs, 1) if p.nargs != -1 else 1_000 for p in arguments)
    positional = 0
    index = 0
    while index < len(rest):
        word = rest[index].split("=", 1)[0]
        if word.startswith("-") and len(word) > 1:
            param = options.get(word)
            if param is None and word not in HELP_OPTIONS:
                problems.append(f"`tickwork {command.name}` has no option {word}")
            elif isinstance(param, click.Option) and not param.is_flag and "=" not in rest[index]:
                index += 1
        elif not isinstance(command, click.Group):
            positional += 1
        index += 1
    if positional > takes:
        problems.append(f"`tickwork {command.name}` takes {takes} argument(s), given {positional}")
    return problems


def _names(param: click.Parameter) -> list[str]:
    if isinstance(param, click.Option):
        return [*param.opts, *param.secondary_opts]
    return []


# --- attempt ids -----------------------------------------------------------------------------


@dataclass
class AttemptIds:
    """The attempt ids a page shows, mapped to the ones a real run of its commands got.

    A page's outputs name attempts (``attempt 2 of examples/hello …: created``); a run
    against another server gets other ids. Pairing the ids in a documented output with
    those in the real one, in order, lets later commands (``tickwork log 2``) name the
    attempt the run really made.
    """

    real: dict[str, str] = field(default_factory=dict)

    def learn(self, documented_output: str, real_output: str) -> None:
        """Pair the attempt ids of a documented output with those of the real one."""
        documented = ATTEMPT_ID.findall(documented_output)
        for shown, got in zip(documented, ATTEMPT_ID.findall(real_output), strict=False):
            self.real.setdefault(shown, got)

    def translate(self, args: tuple[str, ...]) -> tuple[str, ...]:
        """``args`` with each documented id that is an argument (not an option's value)
        replaced by the real one."""
        translated = []
        for index, word in enumerate(args):
            previous = args[index - 1] if index else ""
            is_value = previous.startswith("-")
            translated.append(word if is_value else self.real.get(word, word))
        return tuple(translated)
