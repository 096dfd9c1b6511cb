"""Hostile tar.gz archives built block by block, for the specs of archive uploads.

tarfile's writer refuses or rewrites much of what an attacker sends (a NUL in a name, a
header announcing 400 MiB that is not there), so these archives are put together from
header blocks (``TarInfo.tobuf``) and raw bytes, and compressed in a stream: a 400 MiB
header of zeros stays a ~0.4 MB body and is never held whole in the test's memory.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Iterable, Mapping

MiB = 1024 * 1024
BLOCK = tarfile.BLOCKSIZE
END = b"\0" * (2 * BLOCK)
"""The two zero blocks that end a tar archive."""
WORKFLOW = b"+step:\n  echo>: hi\n"


def padded(data: bytes) -> bytes:
    """``data`` padded with zeros to whole tar blocks."""
    return data + b"\0" * (-len(data) % BLOCK)


def header(
    name: str,
    kind: bytes = tarfile.REGTYPE,
    size: int = 0,
    *,
    linkname: str = "",
    pax: Mapping[str, str] | None = None,
) -> bytes:
    """The header block(s) of one member: a ustar header, after a PAX header if ``pax``
    (whose records may hold anything: a NUL, ``inf``, a GNU sparse map's keys)."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.linkname = linkname
    if pax is None:
        return info.tobuf(format=tarfile.USTAR_FORMAT)
    info.pax_headers = dict(pax)
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape")


def member(
    name: str,
    data: bytes = b"x",
    *,
    kind: bytes = tarfile.REGTYPE,
    linkname: str = "",
    pax: Mapping[str, str] | None = None,
) -> bytes:
    """One member: its header(s), then ``data`` padded (links and folders: no data)."""
    if kind != tarfile.REGTYPE:
        data = b""
    return header(name, kind, len(data), linkname=linkname, pax=pax) + padded(data)


def workflow_first(*members: bytes) -> bytes:
    """A tar stream (uncompressed): a valid ``wf.dig``, then ``members``, then the end."""
    return member("wf.dig", WORKFLOW) + b"".join(members) + END


def gz(chunks: Iterable[bytes]) -> bytes:
    """The gzip of the concatenated ``chunks``, compressed as they come."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([*(compressor.compress(chunk) for chunk in chunks), compressor.flush()])


def hostile(*members: bytes) -> bytes:
    """A tar.gz built block by block: a valid workflow, then ``members``."""
    return gz([workflow_first(*members)])


def symlink(name: str, target: str) -> bytes:
    """A symbolic link member."""
    return member(name, kind=tarfile.SYMTYPE, linkname=target)


def hard_link(name: str, target: str) -> bytes:
    """A hard link member (``target`` is a name in the archive)."""
    return member(name, kind=tarfile.LNKTYPE, linkname=target)


def corrupted_crc(content: bytes) -> bytes:
    """``content`` with the CRC of its gzip trailer changed (the data left intact)."""
    return content[:-8] + bytes(b ^ 0xFF for b in content[-8:-4]) + content[-4:]


def extended_headers_in_a_row(count: int, kind: bytes = tarfile.XHDTYPE) -> bytes:
    """``count`` extended headers, each for the next: tarfile follows them by recursion."""
    if kind == tarfile.GNUTYPE_LONGNAME:
        return (header("././@LongLink", kind, 2) + padded(b"a\0")) * count
    return header("././@PaxHeader", kind, 0) * count


PADDED = gz([workflow_first(), bytes(64 * 1024)])
"""A tar.gz padded past the end of its tar with zeros, as tar's blocking factor does."""


def huge_pax_header(declared_bytes: int = 400 * MiB) -> bytes:
    """A tar.gz whose second member has a PAX header announcing ``declared_bytes`` (that
    many zeros follow, compressed to about 1/1000 of it), then a valid member."""

    def chunks() -> Iterable[bytes]:
        yield member("wf.dig", WORKFLOW)
        yield header("././@PaxHeader", tarfile.XHDTYPE, declared_bytes)
        zeros = bytes(MiB)
        for _ in range(declared_bytes // MiB):
            yield zeros
        yield bytes(declared_bytes % MiB)
        yield member("b.txt") + END

    return gz(chunks())


def gnu_sparse_map(numbers: int) -> bytes:
    """A tar.gz with a GNU sparse file (format 1.0) whose map announces a billion entries
    and holds ``numbers`` of them: tarfile reads such a map whole, before the member."""
    records = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": "s.bin",
        "GNU.sparse.realsize": "1",
    }
    entries = b"0\n" * numbers
    sparse = header("s.bin", size=len(entries) + 10, pax=records)
    return gz([workflow_first(sparse + padded(b"999999999\n" + entries))])


def raw_pax_header(body: bytes) -> bytes:
    """A PAX extended header whose data is ``body`` as given, well-formed or not."""
    return header("././@PaxHeader", tarfile.XHDTYPE, len(body)) + padded(body)


def symlink_chain(length: int, end: str = "wf.dig") -> list[bytes]:
    """Links ``l0 -> l1 -> ... -> l<length-1> -> end``, ``l0`` stored first."""
    return [symlink(f"l{i}", f"l{i + 1}" if i + 1 < length else end) for i in range(length)]
