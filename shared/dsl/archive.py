"""Project archives: packing a project directory as a tar.gz, and reading one back safely.

``tickwork push`` packs a directory with :func:`pack_project`; the API validates the upload
with :func:`read_project_archive` (every workflow parsed, every problem listed); agents and
the in-process runner unpack it with :func:`extract_archive`. Unpacking refuses absolute
paths, ``..``, links leaving the project, devices, and checks its limits while it reads, so
a hostile archive can neither write outside its directory nor fill the disk or memory.
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
from pathlib import Path, PurePosixPath

from shared.domain.workflow import WorkflowDefinition
from shared.dsl.parser import load_project
from shared.errors import InvalidInput, Problem

MiB = 1024 * 1024
MAX_ARCHIVE_BYTES = 64 * MiB
MAX_ARCHIVE_FILES = 10_000
MAX_UNPACKED_BYTES = 512 * MiB
SKIPPED_NAMES = frozenset({".tickwork", ".git", "__pycache__", ".venv"})
"""Folders ``tickwork push`` leaves out at any depth: local state, history, caches."""
ARCHIVE = "(archive)"
"""The ``file`` of a problem with the archive as a whole."""
_HEADER_ALLOWANCE_BYTES = 4096
"""Decompressed bytes allowed per member beyond its content (tar and PAX headers)."""


class ArchiveTooLarge(InvalidInput):
    """Raised when an archive, its unpacked content or its number of files is over a limit."""


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
    """Unpack an uploaded archive into a temporary folder and parse every top-level ``*.dig``.

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
    return ProjectArchive(archive_digest(content), content, workflows, files)


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
        raise _too_large(
            f"the archive is {len(content)} bytes, over the limit of {limits.max_bytes}"
        )
    budget = limits.max_unpacked_bytes + (limits.max_files + 1) * _HEADER_ALLOWANCE_BYTES
    stream = _BoundedReader(gzip.GzipFile(fileobj=io.BytesIO(content), mode="rb"), budget)
    counter = _Counter(limits)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                counter.admit(member)
                tar.extract(member, directory, filter="data")
    except tarfile.FilterError as exc:
        raise _refused(getattr(exc, "tarinfo", None), str(exc)) from None
    except _OverBudget:
        raise _too_large(
            f"the archive unpacks to more than {limits.max_unpacked_bytes} bytes"
        ) from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise InvalidInput(
            [Problem(ARCHIVE, None, f"the body is not a valid tar.gz archive ({exc})")]
        ) from None
    if counter.members == 0:
        raise InvalidInput([Problem(ARCHIVE, None, "the archive is empty")])
    return counter.files


class _Counter:
    """Checks each member's name, kind and size before it is extracted; keeps the totals."""

    def __init__(self, limits: ArchiveLimits) -> None:
        self.limits = limits
        self.members = 0
        self.files = 0
        self.unpacked_bytes = 0
        self.links: set[PurePosixPath] = set()

    def admit(self, member: tarfile.TarInfo) -> None:
        path = PurePosixPath(member.name)
        if member.name.startswith("/") or path.is_absolute():
            raise _refused(member, "an absolute path is not allowed")
        if ".." in path.parts:
            raise _refused(member, "a path with '..' is not allowed")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise _refused(member, "only files, folders and links inside the project are allowed")
        # Paths are checked by their text: one that goes through a link of the archive
        # could lead anywhere the link does, so no member is written through a link.
        if self._through_link(path):
            raise _refused(member, "a path through a link is not allowed")
        if member.issym() or member.islnk():
            if self._through_link(_check_link(member)):
                raise _refused(member, "a link through another link is not allowed")
            if member.issym():
                self.links.add(_normal(path))
        self.members += 1
        self.files += member.isfile()
        self.unpacked_bytes += max(member.size, 0)
        if self.members > self.limits.max_files:
            raise _too_large(f"the archive holds more than {self.limits.max_files} entries")
        if self.unpacked_bytes > self.limits.max_unpacked_bytes:
            raise _too_large(
                f"the archive unpacks to more than {self.limits.max_unpacked_bytes} bytes"
            )

    def _through_link(self, path: PurePosixPath) -> bool:
        """Whether a folder on ``path`` (relative to the project) is a link seen before."""
        return any(folder in self.links for folder in _normal(path).parents)


def _normal(path: PurePosixPath) -> PurePosixPath:
    """``path`` without its ``.`` parts (``a/./b`` -> ``a/b``), as tar names may hold them."""
    return PurePosixPath(*[part for part in path.parts if part not in ("", ".")])


def _check_link(member: tarfile.TarInfo) -> PurePosixPath:
    """Refuse a link whose target is absolute or leaves the project; the target, relative
    to the project with its ``..`` resolved by text."""
    target = PurePosixPath(member.linkname)
    if target.is_absolute():
        raise _refused(member, f"the link points outside the project ({member.linkname})")
    base = PurePosixPath(member.name).parent if member.issym() else PurePosixPath()
    parts: list[str] = []
    for part in (*base.parts, *target.parts):
        if part == "..":
            if not parts:
                raise _refused(member, f"the link points outside the project ({member.linkname})")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return PurePosixPath(*parts)


class _OverBudget(Exception):
    """The decompressed stream grew past what the limits allow."""


class _BoundedReader(io.RawIOBase):
    """A read-only stream that fails once more than ``budget`` bytes were read from it: a
    small gzip body cannot make the reader hold or scan gigabytes of headers."""

    def __init__(self, source: gzip.GzipFile, budget: int) -> None:
        self.source = source
        self.remaining = budget

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.remaining -= len(data)
        if self.remaining < 0:
            raise _OverBudget
        return data


def _refused(member: tarfile.TarInfo | None, reason: str) -> InvalidInput:
    name = member.name if member is not None else ARCHIVE
    return InvalidInput([Problem(name, None, f"refused: {reason}")])


def _too_large(message: str) -> ArchiveTooLarge:
    return ArchiveTooLarge([Problem(ARCHIVE, None, message)])


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
