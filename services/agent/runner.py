"""Running one task message on an agent: log file, operator, and the events it reports."""

from __future__ import annotations

import dataclasses
import io
import logging
import time
import traceback
from pathlib import Path
from typing import IO, BinaryIO

from tickwork.services.agent.archives import ArchiveCache, ArchiveUnavailable
from tickwork.services.agent.operators import OPERATORS
from tickwork.services.agent.operators.base import (
    OperatorContext,
    OperatorFailed,
    ResourceLimits,
    RunControl,
)
from tickwork.services.agent.spool import SpoolLog
from tickwork.shared.dispatch.messages import (
    Outcome,
    TaskFinished,
    TaskMessage,
    TaskStarted,
    run_log_path,
)
from tickwork.shared.dispatch.seam import EventSink
from tickwork.shared.secrets import Masker, SecretBox, SecretKeyError, fill_secrets

log = logging.getLogger(__name__)

OUTPUT_HEAD_LINES = 20
OUTPUT_LINE_CHARS = 500
SKIP_CHARS = 64 * 1024


class TaskRunner:
    """Runs task messages, writing logs under ``log_root``; thread-safe.

    A message with an ``archive_digest`` runs in that archive's files, which ``archives``
    unpacks; without ``archives`` such a task fails, saying its files are not available.
    """

    def __init__(
        self,
        log_root: Path,
        limits: ResourceLimits | None = None,
        archives: ArchiveCache | None = None,
    ) -> None:
        self.log_root = log_root.resolve()
        self.limits = limits or ResourceLimits()
        self.archives = archives

    def resolve_project_dir(self, message: TaskMessage) -> TaskMessage:
        """``message`` with ``project_dir`` naming its archive's unpacked folder, if it has
        an archive; raises OperatorFailed when that archive cannot be had."""
        digest = message.archive_digest
        if not digest:
            return message
        if self.archives is None:
            raise OperatorFailed(f"project archive {digest} is not available on this agent")
        try:
            directory = self.archives.directory_of(digest)
        except ArchiveUnavailable as exc:
            raise OperatorFailed(str(exc)) from None
        return dataclasses.replace(message, project_dir=str(directory))

    def log_file_of(self, message: TaskMessage) -> tuple[Path, Path]:
        """``(relative, absolute)`` path of the log file a run of ``message`` writes."""
        relative = Path(run_log_path(message))
        return relative, self.log_root / relative

    def __call__(
        self,
        message: TaskMessage,
        report: EventSink,
        control: RunControl | None = None,
        *,
        spool: SpoolLog | None = None,
    ) -> None:
        """Run ``message``, reporting its start and its end; its log goes to ``spool``
        (an agent's), or else to its own file under the log root."""
        report(TaskStarted(message.task_id, message.lease_token, time.time()))
        relative, path = self.log_file_of(message)
        path = path if spool is None else spool.path
        store: dict[str, object] = {}
        error: str | None = None
        control = control or RunControl()
        with _create_log(path) if spool is None else spool as log_file:
            context = OperatorContext(message, log_file, path, self.limits, control)
            try:
                context.message, context.secrets = open_secrets(self.resolve_project_dir(message))
                context.masker = Masker(context.secrets.values())
                operator = OPERATORS.get(message.operator)
                if operator is None:
                    raise OperatorFailed(f"this agent has no operator {message.operator!r}")
                store = context.masker.mask_value(operator(context))
            except OperatorFailed as exc:
                error = context.masker.mask(str(exc))
            except Exception as exc:  # an operator bug must still end the task
                # The agent's log gets the traceback masked too: its text may hold a secret.
                trace = context.masker.mask("".join(traceback.format_exception(exc)))
                log.error("operator crashed task=%s\n%s", message.full_name, trace)
                error = context.masker.mask(f"{type(exc).__name__}: {exc}")
            finally:
                control.finish()
        report(
            TaskFinished(
                task_id=message.task_id,
                lease_token=message.lease_token,
                outcome=Outcome.SUCCESS if error is None else Outcome.ERROR,
                finished_at=time.time(),
                store=dict(store),
                error_message=error,
                log_path=str(relative),
                log_size_bytes=path.stat().st_size if spool is None else spool.size(),
                output_lines=(
                    _head(path.open("rb") if spool is None else spool.open_bytes())
                    if context.child_wrote
                    else _lines(context.written)
                ),
                # Masked like the store: a task with secrets in its env may export them.
                export=context.masker.mask_value(dict(context.export)) if error is None else {},
                subtasks=context.masker.mask_value(context.subtasks) if error is None else None,
            )
        )


def _create_log(path: Path) -> IO[str]:
    """``path`` opened for writing, its folder made first if it has none yet."""
    try:
        return path.open("w", encoding="utf-8")
    except FileNotFoundError:  # the first log in its folder (the common case needs no mkdir)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("w", encoding="utf-8")


def open_secrets(message: TaskMessage) -> tuple[TaskMessage, dict[str, str]]:
    """``message`` with its secrets decrypted into its command, env and params, and their
    values by name; OperatorFailed when they cannot be decrypted here."""
    if not message.secrets:
        return message, {}
    try:
        box = SecretBox.from_environment()
        values = {name: box.decrypt(text, name) for name, text in message.secrets.items()}
    except SecretKeyError as exc:
        raise OperatorFailed(str(exc)) from None
    marker = message.secret_marker
    opened = dataclasses.replace(
        message,
        command=fill_secrets(message.command, marker, values),
        env=fill_secrets(message.env, marker, values),
        params=fill_secrets(message.params, marker, values),
        secrets={},
        secret_marker="",
    )
    return opened, values


def _head(log: BinaryIO) -> list[str]:
    """The first lines of a log that a child process wrote (read from ``log``, which is
    closed), each cut to :data:`OUTPUT_LINE_CHARS`; a long line is skipped a piece at a
    time, never held whole."""
    lines: list[str] = []
    with io.TextIOWrapper(log, encoding="utf-8", errors="replace") as log_file:
        while len(lines) < OUTPUT_HEAD_LINES:
            line = log_file.readline(OUTPUT_LINE_CHARS + 1)
            if not line:
                break
            lines.append(line.rstrip("\n")[:OUTPUT_LINE_CHARS])
            while line and not line.endswith("\n"):
                line = log_file.readline(SKIP_CHARS)
    return lines


def _lines(written: list[str]) -> list[str]:
    """The first lines of what the operator itself wrote (no need to read the file back)."""
    lines = "".join(written).splitlines()[:OUTPUT_HEAD_LINES]
    return [line[:OUTPUT_LINE_CHARS] for line in lines]
