"""A run's spool log on an agent: in memory while only the agent writes it, a file once a
child process needs one.

Most runs of in-process operators (``echo>``, ``fail>``, ``http>``...) write a few lines:
making, writing, reading back and removing a file for each costs the file system several
times what the run itself does. So a :class:`SpoolLog` keeps what is written in memory,
up to :data:`MEMORY_BYTES`, and becomes a real file at ``path`` when a child process is to
write into it (its :meth:`~SpoolLog.fileno` is asked for) or the log outgrows the memory.
Readers (the log streamer) see the same bytes either way.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import IO, BinaryIO, TextIO

MEMORY_BYTES = 256 * 1024
"""The most of a log kept in memory before it goes to its file."""


class SpoolLog(io.TextIOBase, TextIO):
    """The text log of one run, written by its operator (UTF-8) and read, as bytes, by the
    log streamer while the run goes on and after it ended. Thread-safe."""

    def __init__(self, path: Path, memory_bytes: int = MEMORY_BYTES) -> None:
        super().__init__()
        self.path = path
        self.memory_bytes = memory_bytes
        self._memory: bytearray | None = bytearray()  # None once the log is a file
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    @property
    def on_disk(self) -> bool:
        """The log has become its file (which the caller removes after the run)."""
        return self._memory is None

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        with self._lock:
            if self._memory is not None and len(self._memory) + len(data) <= self.memory_bytes:
                self._memory += data
                return len(text)
            self._to_disk()
            assert self._file is not None
            self._file.write(text)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None and not self._file.closed:
                self._file.flush()

    def fileno(self) -> int:
        """The file's descriptor, for a child process to write into: the log becomes its
        file from now on."""
        with self._lock:
            self._to_disk()
            assert self._file is not None
            return self._file.fileno()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        """Close the file, if there is one; what was written stays readable."""
        with self._lock:
            if self._file is not None:
                self._file.close()
        super().close()

    def size(self) -> int:
        """Bytes written so far."""
        with self._lock:
            if self._memory is not None:
                return len(self._memory)
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def open_bytes(self) -> BinaryIO:
        """A reader of the bytes written so far (and, for a file, of those still coming)."""
        with self._lock:
            if self._memory is not None:
                return io.BytesIO(bytes(self._memory))
        return self.path.open("rb")

    def _to_disk(self) -> None:
        """Make the log its file, with what memory held (under the lock)."""
        if self._memory is None:
            return
        try:
            self._file = self.path.open("w", encoding="utf-8")
        except FileNotFoundError:  # the first file of this pool process's spool
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")
        self._file.buffer.write(bytes(self._memory))
        self._file.flush()
        self._memory = None
