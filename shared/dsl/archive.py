"""Project archives: packing a project directory as a tar.gz, and reading one back safely.

``tickwork push`` packs a directory with :func:`pack_project`; the API validates the upload
with :func:`read_project_archive` (every workflow parsed, every problem listed); agents and
the in-process runner unpack it with :func:`extract_archive`. Unpacking refuses absolute
paths, ``..``, links leaving the project, devices, and checks its limits while it reads (see
:mod:`tickwork.shared.dsl.archive_members`), so a hostile archive can neither write outside its
directory nor fill the disk or memory, and every problem is an :class:`InvalidInput`
naming the member.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tickwork.shared.domain.notifications import NotificationRule
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.dsl.archive_links import link_problem
from tickwork.shared.dsl.archive_members import (
    ARCHIVE,
    MAX_HEADER_BYTES,
    ArchiveTooLarge,
    MemberChecks,
    MiB,
    refused,
    too_large,
)
from tickwork.shared.dsl.notifications import project_rules
from tickwork.shared.dsl.parser import load_project
from tickwork.shared.errors import InvalidInput, Problem

MAX_ARCHIVE_BYTES = 64 * MiB
MAX_ARCHIVE_FILES = 10_000
MAX_UNPACKED_BYTES = 512 * MiB
SKIPPED_NAMES = frozenset({".tickwork", ".git", "__pycache__", ".venv"})
"""Folders ``tickwork push`` leaves out at any depth: local state, history, caches."""
_HEADER_ALLOWANCE_BYTES = 4096
"""Bytes of headers (tar, PAX) allowed per member on average, in the budget of the whole
archive: with the content's limit, this bounds how much a small gzip body unpacks to."""
_MAX_TRAILING_BYTES = 1 * MiB
"""Most bytes (a tar tool's zero padding) that may follow the end of the archive."""
_READ_AHEAD_BYTES = 2 * tarfile.RECORDSIZE
"""How far tarfile's stream reader may read ahead of what it was asked for."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may hold at most."""

    max_bytes: int = MAX_ARCHIVE_BYTES
    max_files: int = MAX_ARCHIVE_FILES
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES


@dataclass(frozen=True)
class ProjectArchive:
    """A validated project archive: its bytes, their SHA-256 and the workflows inside."""

    digest: str
    content: bytes
    workflows: dict[str, WorkflowDefinition]
    files: int
    notification_rules: tuple[NotificationRule, ...] = ()  # its notifications.yml


def archive_digest(content: bytes) -> str:
    """The SHA-256 (hex) of an archive's bytes: the name it is stored and cached under."""
    return hashlib.sha256(content).hexdigest()


# -- packing ---------------------------------------------------------------------------


def pack_project(directory: Path) -> bytes:
    """The tar.gz of a project directory: regular files and folders, in name order.

    Owners, times and modes are normalised (0644, or 0755 for executables and folders),
    so the same files always give the same bytes and so the same digest.
    """
    root = directory.resolve()
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path, name in _project_entries(root, ""):
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            executable = path.stat().st_mode & stat.S_IXUSR
            info.mode = 0o755 if executable else 0o644
            info.size = path.stat().st_size
            with path.open("rb") as source:
                tar.addfile(info, source)
    return buffer.getvalue()


def _project_entries(directory: Path, prefix: str) -> Iterator[tuple[Path, str]]:
    """Every regular file and folder under ``directory``, folders before their content."""
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.name in SKIPPED_NAMES or path.is_symlink():
            continue
        name = f"{prefix}{path.name}"
        if path.is_dir():
            yield path, name
            yield from _project_entries(path, f"{name}/")
        elif path.is_file():
            yield path, name


# -- reading ---------------------------------------------------------------------------


def read_project_archive(
    content: bytes,
    *,
    max_bytes: int = MAX_ARCHIVE_BYTES,
    max_files: int = MAX_ARCHIVE_FILES,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
) -> ProjectArchive:
    """Unpack an uploaded archive into a temporary folder and parse every top-level ``*.dig``
    and the rules of its ``notifications.yml``, if any.

    Raises :class:`ArchiveTooLarge` over a limit, :class:`InvalidInput` for a body that is
    not a safe tar.gz or holds no workflow, and ``InvalidWorkflow`` listing the problems
    of every invalid file (``file`` is the path inside the archive).
    """
    limits = ArchiveLimits(max_bytes, max_files, max_unpacked_bytes)
    with tempfile.TemporaryDirectory(prefix="tickwork-archive-") as temporary:
        directory = Path(temporary)
        files = _unpack(content, directory, limits)
        if not any(path.is_file() for path in directory.glob("*.dig")):
            raise InvalidInput(
                [Problem(ARCHIVE, None, "the archive holds no workflow file (*.dig) at its top")]
            )
        workflows = load_project(directory)
        rules = tuple(project_rules(directory, workflows))
    return ProjectArchive(archive_digest(content), content, workflows, files, rules)


def extract_archive(content: bytes, target: Path, limits: ArchiveLimits | None = None) -> None:
    """Unpack an archive into ``target`` as a whole: into a temporary folder beside it,
    renamed into place. Extracting the same archive concurrently is safe: the first rename
    wins, the others are dropped. Does nothing if ``target`` already exists."""
    if target.is_dir():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _unpack(content, partial, limits or ArchiveLimits())
        try:
            partial.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)


def _unpack(content: bytes, directory: Path, limits: ArchiveLimits) -> int:
    """Extract the archive's members into ``directory``, checking each before writing it;
    the number of regular files extracted."""
    if len(content) > limits.max_bytes:
        raise too_large(
            f"the archive is {len(content)} bytes, over the limit of {limits.max_bytes}"
        )
    header_budget = (limits.max_files + 1) * _HEADER_ALLOWANCE_BYTES + MAX_HEADER_BYTES
    checks = MemberChecks(limits.max_files, limits.max_unpacked_bytes, header_budget)
    stream = _MeteredReader(gzip.GzipFile(fileobj=io.BytesIO(content), mode="rb"), checks)
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=checks.tarinfo_class()) as tar:
            for member in tar:
                checks.admit(member)
                _extract(tar, member, directory)
        stream.drain()
    except _ReadPastHeaders:
        raise InvalidInput(
            [Problem(ARCHIVE, None, f"the headers of {checks.next_member()} are malformed")]
        ) from None
    except _MALFORMED as exc:
        raise InvalidInput(
            [Problem(ARCHIVE, None, f"the body is not a valid tar.gz archive ({_reason(exc)})")]
        ) from None
    if checks.members == 0:
        raise InvalidInput([Problem(ARCHIVE, None, "the archive is empty")])
    _check_symlinks(checks)
    return checks.files


_MALFORMED = (tarfile.TarError, OSError, EOFError, zlib.error, ValueError)
"""What reading a body that is not a tar.gz raises: tarfile's errors, gzip's, zlib's, and a
ValueError for a malformed header tarfile decodes without checking (a GNU sparse map)."""


def _reason(error: BaseException) -> str:
    """What is wrong with the body, in words: never a file name of the server."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    if isinstance(error, ValueError):
        return "a malformed header"
    return str(error) or type(error).__name__


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, directory: Path) -> None:
    """Write one admitted member; what the file system refuses is that member's problem."""
    try:
        tar.extract(member, directory, filter="data")
    except tarfile.FilterError as exc:  # a last guard: admit() refuses all these first
        links = (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError)
        where = "the link points" if isinstance(exc, links) else "it would be unpacked"
        raise refused(member, f"{where} outside the project") from None
    except OSError as exc:
        if exc.errno is None:  # the body, not the file system (gzip's CRC check)
            raise
        raise refused(member, f"it cannot be unpacked ({exc.strerror})") from None


def _check_symlinks(checks: MemberChecks) -> None:
    """Refuse a symbolic link that leads outside the project, or through too many links,
    once every member is admitted: a link may go through another stored after it."""
    found = link_problem(checks.link_targets)
    if found is not None:
        path, reason = found
        raise refused(checks.link_names[path], reason)


class _ReadPastHeaders(Exception):
    """tarfile read further than the headers and the members admitted account for."""


class _MeteredReader(io.RawIOBase):
    """The decompressed archive as tarfile reads it, failing once tarfile reads further
    than the headers seen and the members admitted account for (and its read-ahead): what
    a header does not declare, such as a GNU sparse map, is not read past a few blocks."""

    def __init__(self, source: gzip.GzipFile, checks: MemberChecks) -> None:
        self.source = source
        self.checks = checks
        self.read_bytes = 0
        self.slack_bytes = _READ_AHEAD_BYTES

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data = self.source.read(-1 if size is None else size)
        self.read_bytes += len(data)
        if self.read_bytes > self.checks.expected_bytes + self.slack_bytes:
            raise _ReadPastHeaders
        return data

    def drain(self) -> None:
        """Read what follows the end of the archive (padding, up to _MAX_TRAILING_BYTES):
        gzip checks its CRC and length only at the end of the stream."""
        self.slack_bytes += _MAX_TRAILING_BYTES
        try:
            while self.read(64 * 1024):
                pass
        except _ReadPastHeaders:
            raise too_large(
                f"over {_MAX_TRAILING_BYTES} bytes follow the end of the archive"
            ) from None


def is_digest(text: str) -> bool:
    """Whether ``text`` is the lowercase hex SHA-256 an archive is named by."""
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


__all__ = [
    "ArchiveLimits",
    "ArchiveTooLarge",
    "ProjectArchive",
    "archive_digest",
    "extract_archive",
    "is_digest",
    "pack_project",
    "read_project_archive",
]
