"""Refresh the UI's vendored front-end libraries from the npm registry (``make vendor-ui``).

Each library in :data:`LIBRARIES` is pinned to one version. For each, this asks the
registry for that version's tarball and its ``sha512`` integrity, downloads the tarball,
checks it against the integrity, and writes only the files the UI needs into the
library's directory, beside:

- ``VERSION``: the package's name, version, licence, tarball URL and integrity;
- ``LICENSE`` (and ``NOTICE`` or third-party notices where the package ships them);
- ``SHA256SUMS``: every other file's SHA-256, in ``sha256sum -c`` format.

The written files are committed: installing or running tickwork fetches nothing. To move
a library to another version, change its pin here and run ``make vendor-ui``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import sys
import tarfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI_VENDOR = ROOT / "services" / "api" / "ui" / "static" / "vendor"
TEST_VENDOR = ROOT / "tests" / "ui" / "vendor"
REGISTRY = "https://registry.npmjs.org"
TIMEOUT_SECONDS = 60
VERSION_FILE = "VERSION"
SUMS_FILE = "SHA256SUMS"


@dataclass(frozen=True)
class Library:
    """One pinned npm package: which of its files go where.

    ``files`` maps a path inside the package to the name it gets in ``directory``;
    ``notices`` are its licence and notice files, mapped the same way.
    """

    package: str
    version: str
    directory: Path
    files: dict[str, str]
    notices: dict[str, str] = field(default_factory=lambda: {"LICENSE": "LICENSE"})


LIBRARIES = (
    Library(
        "elkjs",
        "0.12.1",
        UI_VENDOR / "elkjs",
        {"lib/elk.bundled.js": "elk.bundled.js"},
        notices={"LICENSE.md": "LICENSE"},
    ),
    Library(
        "swagger-ui-dist",
        "5.35.0",
        UI_VENDOR / "swagger-ui",
        {
            "swagger-ui-bundle.js": "swagger-ui-bundle.js",
            "swagger-ui.css": "swagger-ui.css",
            "favicon-32x32.png": "favicon-32x32.png",
        },
        notices={
            "LICENSE": "LICENSE",
            "NOTICE": "NOTICE",
            "swagger-ui-bundle.js.LICENSE.txt": "swagger-ui-bundle.js.LICENSE.txt",
        },
    ),
    Library(
        "axe-core",
        "4.14.1",
        TEST_VENDOR / "axe-core",
        {"axe.min.js": "axe.min.js"},
        notices={"LICENSE": "LICENSE", "LICENSE-3RD-PARTY.txt": "LICENSE-3RD-PARTY.txt"},
    ),
)
"""The pinned libraries: the UI's under services/api/ui/static/vendor/, the tests' under
tests/ui/vendor/ (axe-core checks accessibility in the browser specs only)."""


def sha256_sums(directory: Path) -> dict[str, str]:
    """The SHA-256 of each file ``SHA256SUMS`` in ``directory`` lists, by name, as it lists them."""
    sums: dict[str, str] = {}
    for line in (directory / SUMS_FILE).read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name.lstrip("*")] = digest
    return sums


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        body: bytes = response.read()
    return body


def _check_integrity(tarball: bytes, integrity: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    if algorithm != "sha512":
        raise SystemExit(f"unexpected integrity algorithm {algorithm!r}")
    actual = base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    if actual != expected:
        raise SystemExit(f"tarball does not match its integrity {integrity}")


def _extract(tarball: bytes, wanted: dict[str, str], directory: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for inner, name in wanted.items():
            member = archive.extractfile(f"package/{inner}")
            if member is None:
                raise SystemExit(f"package/{inner} is not a file in the tarball")
            (directory / name).write_bytes(member.read())


def vendor(library: Library) -> None:
    """Replace ``library``'s directory with its pinned files, licence, VERSION and sums."""
    metadata = json.loads(_get(f"{REGISTRY}/{library.package}/{library.version}"))
    dist = metadata["dist"]
    tarball = _get(dist["tarball"])
    _check_integrity(tarball, dist["integrity"])
    if library.directory.exists():
        shutil.rmtree(library.directory)
    library.directory.mkdir(parents=True)
    _extract(tarball, {**library.files, **library.notices}, library.directory)
    (library.directory / VERSION_FILE).write_text(
        f"name: {library.package}\n"
        f"version: {library.version}\n"
        f"license: {metadata.get('license', 'see LICENSE')}\n"
        f"tarball: {dist['tarball']}\n"
        f"integrity: {dist['integrity']}\n"
    )
    names = sorted(library.files.values())
    sums = "".join(f"{file_sha256(library.directory / name)}  {name}\n" for name in names)
    (library.directory / SUMS_FILE).write_text(sums)
    print(f"{library.package}@{library.version} -> {library.directory.relative_to(ROOT)}")


def main() -> int:
    """Vendor every library in :data:`LIBRARIES`."""
    for library in LIBRARIES:
        vendor(library)
    return 0


if __name__ == "__main__":
    sys.exit(main())
