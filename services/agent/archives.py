"""The agent's cache of pushed project archives: each digest unpacked once, reused after.

A task of a pushed project runs in ``<root>/<digest>``: the archive is fetched (from Redis
on an agent, from the database in-process), checked against its digest, and unpacked once;
later tasks of the same revision reuse the folder. Folders unused for a while are removed
once the cache grows past its size limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tickwork.shared.dsl.archive import archive_digest, extract_archive, is_digest
from tickwork.shared.errors import InvalidInput, TaskFailed

log = logging.getLogger(__name__)

MAX_CACHE_BYTES = 4 * 1024**3
"""Unpacked archives kept at most before the least recently used are removed."""
KEEP_RECENT_SECONDS = 3600.0
"""A folder used this recently is never removed (a running task may be in it)."""


class ArchiveUnavailable(TaskFailed):
    """Raised when an archive cannot be had, or its bytes do not match its digest."""


class ArchiveCache:
    """Maps an archive digest to its unpacked folder under ``root``; thread-safe."""

    def __init__(
        self,
        root: Path,
        fetch: Callable[[str], bytes | None],
        *,
        max_bytes: int = MAX_CACHE_BYTES,
    ) -> None:
        self.root = root.resolve()
        self.fetch = fetch
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def directory_of(self, digest: str) -> Path:
        """The folder holding the files of archive ``digest``, unpacking it if needed.

        Raises :class:`ArchiveUnavailable` when it cannot be fetched or is not what its
        digest says.
        """
        if not is_digest(digest):
            raise ArchiveUnavailable(f"{digest[:80]!r} is not an archive digest")
        target = self.root / digest
        if target.is_dir():
            _touch(target)
            return target
        with self._lock:  # one fetch per digest in this process
            if not target.is_dir():
                self._unpack(digest, target)
        return target

    def _unpack(self, digest: str, target: Path) -> None:
        try:
            content = self.fetch(digest)
        except Exception as exc:  # whatever the source (Redis, a database) failed with
            raise ArchiveUnavailable(f"project archive {digest} is not available: {exc}") from exc
        if content is None:
            raise ArchiveUnavailable(f"project archive {digest} is not available")
        if archive_digest(content) != digest:
            raise ArchiveUnavailable(f"project archive {digest} does not match its digest")
        try:
            extract_archive(content, target)
        except InvalidInput as exc:
            raise ArchiveUnavailable(f"project archive {digest} cannot be unpacked: {exc}") from exc
        _touch(target)
        log.info("unpacked project archive %s (%d bytes)", digest, len(content))
        self._evict(keep=target)

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used folders while the cache is over its limit."""
        folders = [p for p in self.root.iterdir() if p.is_dir() and is_digest(p.name)]
        sizes = {folder: _size_of(folder) for folder in folders}
        total = sum(sizes.values())
        cutoff = time.time() - KEEP_RECENT_SECONDS
        for folder in sorted(folders, key=_used_at):
            if total <= self.max_bytes:
                return
            if folder == keep or _used_at(folder) > cutoff:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            total -= sizes[folder]
            log.info("removed unpacked archive %s from the cache", folder.name)


def _touch(folder: Path) -> None:
    """Mark a folder as just used (its modification time orders the eviction)."""
    with contextlib.suppress(OSError):
        os.utime(folder)


def _used_at(folder: Path) -> float:
    try:
        return folder.stat().st_mtime
    except OSError:
        return 0.0


def _size_of(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total
