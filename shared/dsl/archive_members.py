"""Checks on the members of an uploaded tar archive, made before tarfile reads or writes them.

Three moments matter. :meth:`MemberChecks.check_header` sees every 512-byte header block as
tarfile decodes it, before tarfile reads what the header announces: an extended header
(PAX, GNU long name) declaring over 64 KiB, a chain of such headers (which tarfile follows
by recursion) or a sparse file is refused there, so a small upload cannot make the reader
hold a huge header in memory. :meth:`MemberChecks.check_pax` sees the data of a PAX header
before tarfile parses it, and refuses anything but well-formed records
(:mod:`tickwork.shared.dsl.archive_pax`), whose parsing is then linear in their size.
:meth:`MemberChecks.admit` sees each decoded member before it is extracted: its name (text,
length, depth, place), its kind, its link target (a symbolic link is followed through the
links stored before it, at most 40, as :mod:`tickwork.shared.dsl.archive_links` does), its size and
time, so that extraction can neither fail half-way on the server's file system, nor write
outside the project, nor make tarfile's filter follow a long chain of links.

Problems name the member as the archive does (made printable and short), never a path of
the server.
"""

from __future__ import annotations

import tarfile
from pathlib import PurePosixPath

from tickwork.shared.dsl.archive_links import LinkResolver
from tickwork.shared.dsl.archive_pax import pax_problem
from tickwork.shared.dsl.names import first_unshowable
from tickwork.shared.dsl.names import shown as shown_text
from tickwork.shared.dsl.tar_headers import HeaderCheckedTarInfo, padded
from tickwork.shared.errors import InvalidInput, Problem

MiB = 1024 * 1024
ARCHIVE = "(archive)"
"""The ``file`` of a problem with the archive as a whole."""
MAX_HEADER_BYTES = 64 * 1024
"""Most bytes one extended header (PAX, GNU long name) may hold: tar tools write a few KiB
at most (a long path, a link target, times, owners, extended attributes)."""
MAX_EXTENDED_HEADERS = 8
"""Most extended headers (PAX, global PAX, GNU long name or link) one member may have."""
MAX_PATH_BYTES = 1024
"""Longest member name or link target, in UTF-8 bytes."""
MAX_NAME_PART_BYTES = 255
"""Longest part of a name between two ``/``, in UTF-8 bytes (a file system's limit)."""
MAX_PATH_DEPTH = 64
"""Most folders a member may be under."""
MAX_MTIME_SECONDS = 253_402_300_799
"""Latest (and, negated, earliest) modification time: the end of the year 9999."""
_SHOWN_CHARACTERS = 200
_EXTENDED_TYPES = frozenset(
    {
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
    }
)

FOLDER, FILE, LINK = "folder", "file", "link"


class ArchiveTooLarge(InvalidInput):
    """Raised when an archive, its unpacked content, its number of files or a member's
    headers are over a limit."""


class MemberChecks:
    """Checks one archive's headers and members in the order tarfile meets them; keeps
    what was admitted (paths and their kinds, symbolic links, totals)."""

    def __init__(self, max_files: int, max_unpacked_bytes: int, max_header_bytes: int) -> None:
        self.max_files = max_files
        self.max_unpacked_bytes = max_unpacked_bytes
        self.max_header_bytes = max_header_bytes
        self.header_bytes = 0
        """Bytes of the tar stream that headers took so far, as they declare."""
        self.expected_bytes = 0
        """Bytes of the tar stream the headers and the members admitted so far account
        for: what tarfile may have read (but for its read-ahead) before the next header."""
        self.members = 0
        self.files = 0
        self.unpacked_bytes = 0
        self.kinds: dict[str, str] = {}
        """Kind of every path admitted, by its normal form (``a/./b`` -> ``a/b``)."""
        self.link_targets: dict[str, str] = {}
        """Target of every symbolic link admitted, by its normal path, in archive order."""
        self.link_names: dict[str, str] = {}
        """Name in the archive of every symbolic link admitted, by its normal path."""
        self.last_name: str | None = None
        self._extended_in_a_row = 0

    def tarinfo_class(self) -> type[tarfile.TarInfo]:
        """A ``TarInfo`` class for ``tarfile.open(tarinfo=...)`` that passes every header
        block to :meth:`check_header` as soon as it is decoded."""
        checks = self

        class CheckedTarInfo(HeaderCheckedTarInfo):
            @classmethod
            def check_header(cls, header: tarfile.TarInfo) -> None:
                checks.check_header(header)

            def check_pax_data(self, data: bytes) -> None:
                checks.check_pax(self, data)

        return CheckedTarInfo

    def check_header(self, header: tarfile.TarInfo) -> None:
        """Refuse a header block before tarfile reads the data it announces."""
        if header.size < 0:
            raise refused(header, "a negative size is not allowed")
        if header.type == tarfile.GNUTYPE_SPARSE:
            raise refused(header, "a sparse file is not allowed")
        extended = header.type in _EXTENDED_TYPES
        if extended and header.size > MAX_HEADER_BYTES:
            raise ArchiveTooLarge(
                [
                    Problem(
                        shown(header.name),
                        None,
                        f"refused: an extended header of {header.size} bytes, over the limit"
                        f" of {MAX_HEADER_BYTES}, for {self.next_member()}",
                    )
                ]
            )
        self._count_header(tarfile.BLOCKSIZE + (padded(header.size) if extended else 0))
        self._extended_in_a_row = self._extended_in_a_row + 1 if extended else 0
        if self._extended_in_a_row > MAX_EXTENDED_HEADERS:
            raise refused(
                header,
                f"more than {MAX_EXTENDED_HEADERS} extended headers in a row,"
                f" for {self.next_member()}",
            )

    def check_pax(self, header: tarfile.TarInfo, data: bytes) -> None:
        """Refuse the data of a PAX header that is not well-formed records."""
        if problem := pax_problem(data):
            raise refused(header, f"{problem}, for {self.next_member()}")

    def _count_header(self, size: int) -> None:
        self.header_bytes += size
        self.expected_bytes += size
        if self.header_bytes > self.max_header_bytes:
            raise too_large(f"the archive holds over {self.max_header_bytes} bytes of tar headers")

    def next_member(self) -> str:
        """Which member comes next, in words: the one after the last admitted."""
        if self.last_name is None:
            return "the first member"
        return f"the member after {shown(self.last_name)!r}"

    def admit(self, member: tarfile.TarInfo) -> None:
        """Refuse a member that could not be extracted safely, or that is over a limit."""
        path = _checked_path(member, member.name)
        if member.sparse is not None:
            raise refused(member, "a sparse file is not allowed")
        if member.size < 0:
            raise refused(member, "a negative size is not allowed")
        if not (-MAX_MTIME_SECONDS <= member.mtime <= MAX_MTIME_SECONDS):
            raise refused(member, f"the modification time {member.mtime} is out of range")
        kind = _kind(member)
        self._check_place(member, path, kind)
        if member.issym() or member.islnk():
            self._check_link(member)
        self._count(member)
        self.expected_bytes += padded(member.size)
        if str(path) not in self.kinds:
            self.kinds[str(path)] = kind
        if member.issym():
            self._admit_symlink(member, str(path))
        self.last_name = member.name

    def _check_place(self, member: tarfile.TarInfo, path: PurePosixPath, kind: str) -> None:
        """Refuse a second member at one path (but a folder twice), a nameless file, and a
        path under a file or a link of the archive."""
        if path == PurePosixPath() and kind != FOLDER:
            raise refused(member, "a file or link needs a name")
        earlier = self.kinds.get(str(path))
        if earlier is not None and not (earlier == kind == FOLDER):
            raise refused(member, "the archive holds this path twice")
        for folder in path.parents:
            above = self.kinds.get(str(folder))
            # Paths are checked by their text: one that goes through a link of the archive
            # could lead anywhere the link does, so no member is written through a link.
            if above == LINK:
                raise refused(member, "a path through a link is not allowed")
            if above == FILE:
                raise refused(member, f"a path under the file {shown(str(folder))!r}")

    def _check_link(self, member: tarfile.TarInfo) -> None:
        """Refuse a link leaving the project or going through another link; a hard link
        must point to a file the archive held before it."""
        target = _checked_path(member, member.linkname, of_link=True)
        base = PurePosixPath(member.name).parent if member.issym() else PurePosixPath()
        parts: list[str] = []
        for part in (*base.parts, *target.parts):
            if self.kinds.get("/".join(parts)) == LINK:
                raise refused(member, "a link through another link is not allowed")
            if part == "..":
                if not parts:
                    raise refused(
                        member, f"the link points outside the project ({shown(member.linkname)})"
                    )
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        # tarfile finds a hard link's file by its path on disk, or else by reading the
        # archive again, which a stream cannot: the path must be that of a file as stored.
        if member.islnk() and (".." in target.parts or self.kinds.get(str(target)) != FILE):
            raise refused(
                member,
                "a hard link must name a file stored before it, without '..'"
                f" ({shown(member.linkname)})",
            )

    def _admit_symlink(self, member: tarfile.TarInfo, path: str) -> None:
        """Refuse a symbolic link leading through too many of the links stored so far, as
        tarfile's filter would follow them all (by recursion) to check where it leads."""
        self.link_targets[path] = member.linkname
        self.link_names[path] = member.name
        if reason := LinkResolver(self.link_targets).problem(path):
            raise refused(member, reason)

    def _count(self, member: tarfile.TarInfo) -> None:
        self.members += 1
        self.files += member.isfile()
        self.unpacked_bytes += member.size
        if self.members > self.max_files:
            raise too_large(f"the archive holds more than {self.max_files} entries")
        if self.unpacked_bytes > self.max_unpacked_bytes:
            raise too_large(f"the archive unpacks to more than {self.max_unpacked_bytes} bytes")


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return FOLDER
    if member.issym():
        return LINK
    if member.isfile() or member.islnk():
        return FILE
    raise refused(member, "only files, folders and links inside the project are allowed")


def _checked_path(member: tarfile.TarInfo, text: str, *, of_link: bool = False) -> PurePosixPath:
    """``text`` (the member's name or link target) as a relative path without ``.`` parts,
    refusing text a file system would choke on or that leaves the project."""
    what = "the link target" if of_link else "the name"
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise refused(member, f"{what} is not UTF-8 text") from None
    if found := first_unshowable(text):
        character, unshown = found
        raise refused(member, f"{what} holds {unshown} (U+{ord(character):04X})")
    path = PurePosixPath(text)
    if text.startswith("/") or path.is_absolute():
        if of_link:
            raise refused(member, f"the link points outside the project ({shown(text)})")
        raise refused(member, "an absolute path is not allowed")
    if not of_link and ".." in path.parts:
        raise refused(member, "a path with '..' is not allowed")
    if len(path.parts) > MAX_PATH_DEPTH:
        raise refused(member, f"{what} is more than {MAX_PATH_DEPTH} folders deep")
    if any(len(part.encode()) > MAX_NAME_PART_BYTES for part in path.parts):
        raise refused(member, f"{what} has a part longer than {MAX_NAME_PART_BYTES} bytes")
    if len(encoded) > MAX_PATH_BYTES:
        raise refused(member, f"{what} is longer than {MAX_PATH_BYTES} bytes")
    return normal(path)


def normal(path: PurePosixPath) -> PurePosixPath:
    """``path`` without its ``.`` parts (``a/./b`` -> ``a/b``), as tar names may hold them."""
    return PurePosixPath(*[part for part in path.parts if part not in ("", ".")])


def shown(name: str) -> str:
    """A member's name as a problem shows it (:func:`tickwork.shared.dsl.names.shown`), at most
    200 characters."""
    return shown_text(name, max_chars=_SHOWN_CHARACTERS) if name else "(no name)"


def refused(member: tarfile.TarInfo | str, reason: str) -> InvalidInput:
    """The error refusing ``member`` (or the member of that name) for ``reason``."""
    name = member if isinstance(member, str) else member.name
    return InvalidInput([Problem(shown(name), None, f"refused: {reason}")])


def too_large(message: str) -> ArchiveTooLarge:
    """The error refusing the archive as a whole for being over a limit."""
    return ArchiveTooLarge([Problem(ARCHIVE, None, message)])
