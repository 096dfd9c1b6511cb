"""Test files written only where they belong: under the test's own temporary root."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path


def path_under(root: Path, relative: str) -> Path:
    """``root / relative``, refusing a path that would land outside ``root``.

    ``root / "/etc/passwd"`` is ``/etc/passwd`` and ``root / "../x"`` is beside ``root``; a
    test that writes such a path as root would change the machine, so it fails instead."""
    path = (root / relative).resolve()
    assert path.is_relative_to(root.resolve()), f"{relative!r} escapes the test's root {root}"
    return path


def write_under(root: Path, relative: str, text: str) -> Path:
    """Write ``text`` (UTF-8) at ``relative`` under ``root``, creating folders; its path."""
    path = path_under(root, relative)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# Files of the machine that no test may change (tests run as root in CI).
GUARDED_FILES = (
    Path("/etc/passwd"),
    Path("/etc/shadow"),
    Path("/etc/group"),
    Path("/etc/gshadow"),
    Path("/etc/hosts"),
    Path("/etc/hostname"),
    Path("/etc/resolv.conf"),
)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


@dataclass
class MachineFiles:
    """Digests of the guarded files, taken once; ``changed()`` names the ones that differ
    now and puts their saved contents back, so one bad test cannot break the ones after it."""

    saved: dict[Path, bytes | None] = field(default_factory=dict)

    @classmethod
    def snapshot(cls, paths: tuple[Path, ...] = GUARDED_FILES) -> MachineFiles:
        return cls({path: _read(path) for path in paths})

    def changed(self) -> list[Path]:
        differing = []
        for path, before in self.saved.items():
            now = _read(path)
            if _digest(now) == _digest(before):
                continue
            differing.append(path)
            if before is not None:
                path.write_bytes(before)
            elif now is not None:
                path.unlink()  # a test created it
        return differing


def _digest(content: bytes | None) -> str | None:
    return None if content is None else hashlib.sha256(content).hexdigest()
