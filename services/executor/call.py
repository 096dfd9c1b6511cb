"""``call>`` with an expression (``call>: ${child}.dig``): the file it names is found and
parsed when the task runs, in the files of the attempt's revision.

A literal target is parsed with the file that calls it; an expression's is known only from
the task's params, so each run of the task (a retry, a resumed attempt) resolves it again
from its own params. A target that is missing, outside the project or invalid fails the
task, naming the file (and the line of a parse error).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import Connection

from tickwork.services.executor.messages import AttemptContext
from tickwork.shared.dispatch.messages import TaskMessage
from tickwork.shared.domain.control import BadControl
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.dsl.archive import extract_archive
from tickwork.shared.dsl.parser import parse_called_file
from tickwork.shared.errors import InvalidInput, InvalidWorkflow, NotFound
from tickwork.shared.store.projects import get_project_archive


def resolve_call(conn: Connection, context: AttemptContext, message: TaskMessage) -> TaskSpec:
    """The workflow a ``call>`` task's rendered command names, as a ``^sub`` group.

    The target is found from the task's working directory (``_workdir``: the calling
    file's folder unless set otherwise), as Digdag does. Raises BadControl for a target
    that cannot be called."""
    target = message.command
    if not isinstance(target, str) or not target.strip():
        raise BadControl(f"'call>' needs a workflow file name, got {target!r}")
    if context.archive_digest is None:
        return _parse_target(Path(context.project_dir).resolve(), message.workdir, target)
    with tempfile.TemporaryDirectory(prefix="tickwork-call-") as temporary:
        root = Path(temporary) / "project"
        try:
            extract_archive(get_project_archive(conn, context.archive_digest), root)
        except (InvalidInput, NotFound, OSError) as exc:
            raise BadControl(f"'call>' cannot read the project's files: {exc}") from None
        return _parse_target(root.resolve(), message.workdir, target)


def _parse_target(root: Path, workdir: str, target: str) -> TaskSpec:
    file_name = target if target.endswith(".dig") else f"{target}.dig"
    path = (root / workdir / file_name).resolve()
    if not path.is_relative_to(root):
        raise BadControl(f"'call>' target '{target}' is outside the project")
    shown = path.relative_to(root).as_posix()
    if not path.is_file():
        raise BadControl(f"'call>' target '{target}' does not exist ({shown})")
    try:
        return parse_called_file(path, root)
    except InvalidWorkflow as exc:
        raise BadControl(f"'call>' target '{target}' is not a valid workflow: {exc}") from None
