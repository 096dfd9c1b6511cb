"""A ``TarInfo`` that shows every header block, and the data of each PAX header, to checks
before tarfile acts on them: the only place tickwork relies on tarfile's internals.

tarfile offers no hook between reading a PAX header's data and parsing it: its documented
``TarInfo.frombuf`` sees the 512-byte header blocks only, and the extraction filters of
Python 3.12 (backported to 3.11.4) see members once parsed. So
:class:`HeaderCheckedTarInfo` relies on these internals:

- tarfile decodes every header block, the ones following an extended header included,
  through ``cls.frombuf`` (``TarInfo.fromtarfile`` calls it, and ``_proc_pax`` and
  ``_proc_gnulong`` call ``fromtarfile`` for the next header): overriding ``frombuf``
  sees them all. CPython's main branch has moved the header after an extended one to a
  private ``_frombuf`` that skips ``frombuf``: on such a version this override would no
  longer see those headers;
- the private ``TarInfo._proc_pax(self, tarfile)`` reads a PAX header's data from the
  private ``TarFile.fileobj`` stream, parses it, then reads the next header. The data is
  read first, passed to :meth:`HeaderCheckedTarInfo.check_pax_data`, then replayed to
  tarfile's own parsing.

The PAX check is still needed: CPython 3.11.7's ``_proc_pax`` parses records with regular
expressions that a crafted header can make backtrack for a long time (CVE-2024-6232,
fixed in 3.11.10, 3.12.6 and 3.13 by a new parser that refuses a malformed header as
"invalid header", without naming the member); on every version this check is what
refuses malformed records with a message naming the member.

Checked against the tarfile of CPython 3.11 (3.11.7 run; the project runs 3.11, see
deploy/Dockerfile). tests/test_library_internals.py fails, naming this module, if those
names change shape, if a header or a PAX header's data stops reaching its check, or on a
Python minor version not listed here.
"""

from __future__ import annotations

import tarfile
from typing import Any, Self

CHECKED_PYTHON_VERSIONS = ("3.11",)
"""The CPython minor versions whose tarfile the override below was read against."""


def padded(size: int) -> int:
    """``size`` rounded up to whole tar blocks: what the data of a header takes."""
    return -(-size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


class HeaderCheckedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` passing every header block to :meth:`check_header` as soon as it is
    decoded, and the data of every PAX header to :meth:`check_pax_data` before tarfile
    parses it."""

    @classmethod
    def check_header(cls, header: tarfile.TarInfo) -> None:
        """Raise to refuse ``header`` before tarfile reads what it announces."""

    def check_pax_data(self, data: bytes) -> None:
        """Raise to refuse ``data``, the records of this PAX header (here: accept all)."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Self:
        header = super().frombuf(buf, encoding, errors)
        cls.check_header(header)
        return header

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
