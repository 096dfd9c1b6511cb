"""A ``TarInfo`` that shows the data of each PAX header before tarfile parses it: the only
place tickwork relies on tarfile's internals.

tarfile offers no hook between reading a PAX header's data and parsing it (its documented
``TarInfo.frombuf`` sees the 512-byte header block only, and the extraction filters of
Python 3.12, backported to 3.11.4, see members once parsed). :class:`PaxCheckedTarInfo`
overrides the private ``TarInfo._proc_pax(self, tarfile)``, which reads the data from the
private ``TarFile.fileobj`` stream, parses it, then reads the next header: the data is
read first, passed to :meth:`PaxCheckedTarInfo.check_pax_data`, then replayed to
tarfile's own parsing.

It is still needed: CPython 3.11.7's ``_proc_pax`` parses records with regular
expressions that a crafted header can make backtrack for a long time (CVE-2024-6232,
fixed in 3.11.10, 3.12.6 and 3.13 by a new parser keeping the same
``_proc_pax(self, tarfile)``), and on every version it is what refuses malformed records
with a message naming the member.

Checked against CPython 3.11.7 (the version the project runs); read its tarfile again
before another. tests/test_library_internals.py fails, naming this module, if the names
change shape or the Python version is not one listed here.
"""

from __future__ import annotations

import tarfile
from typing import Any

CHECKED_PYTHON_VERSIONS = ("3.11.7",)
"""The CPython versions whose tarfile the override below was read against."""


def padded(size: int) -> int:
    """``size`` rounded up to whole tar blocks: what the data of a header takes."""
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


class PaxCheckedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` passing the data of every PAX header to :meth:`check_pax_data` before
    tarfile parses it."""

    def check_pax_data(self, data: bytes) -> None:
        """Raise to refuse ``data``, the records of this PAX header (here: accept all)."""

    def _proc_pax(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        stream = tarfile.fileobj
        data = stream.read(padded(self.size))
        self.check_pax_data(data[: self.size])
        tarfile.fileobj = _Replay(data, stream)  # type: ignore[assignment]
        try:
            return super()._proc_pax(tarfile)  # type: ignore[misc,no-any-return]
        finally:
            tarfile.fileobj = stream


class _Replay:
    """A stream that gives ``data`` back first, then reads on from ``stream``: what tarfile
    reads of a PAX header after it was checked."""

    def __init__(self, data: bytes, stream: Any) -> None:
        self.data = data
        self.stream = stream

    def read(self, size: int) -> bytes:
        head, self.data = self.data[:size], self.data[size:]
        return head + (self.stream.read(size - len(head)) if size > len(head) else b"")

    def tell(self) -> int:
        return int(self.stream.tell()) - len(self.data)
