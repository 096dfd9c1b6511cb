"""The vendored front-end libraries (tests/support/vendor_ui.py, ``make vendor-ui``): each
pinned one is committed with its VERSION, LICENSE and the SHA-256 of every file."""

from __future__ import annotations

import pytest

from tests.support.vendor_ui import (
    LIBRARIES,
    SUMS_FILE,
    VERSION_FILE,
    Library,
    file_sha256,
    sha256_sums,
)

RECORDS = {VERSION_FILE, SUMS_FILE}
"""What vendor_ui writes about the files beside them."""


@pytest.fixture(params=LIBRARIES, ids=lambda library: library.package)
def library(request: pytest.FixtureRequest) -> Library:
    """One pinned library."""
    vendored: Library = request.param
    return vendored


def test_a_vendored_library_names_its_pinned_version_and_origin(library: Library) -> None:
    fields = dict(
        line.split(": ", 1) for line in (library.directory / VERSION_FILE).read_text().splitlines()
    )
    assert fields["name"] == library.package
    assert fields["version"] == library.version
    assert fields["tarball"].startswith("https://registry.npmjs.org/")
    assert fields["integrity"].startswith("sha512-")


def test_a_vendored_library_carries_its_licence(library: Library) -> None:
    for name in library.notices.values():
        assert (library.directory / name).stat().st_size > 0, name
    assert "LICENSE" in library.notices.values()


def test_a_vendored_library_holds_exactly_its_files_with_their_recorded_sha256(
    library: Library,
) -> None:
    sums = sha256_sums(library.directory)
    assert sorted(sums) == sorted(library.files.values())
    present = {path.name for path in library.directory.iterdir()}
    assert present == {*sums, *library.notices.values(), *RECORDS}
    for name, digest in sums.items():
        assert file_sha256(library.directory / name) == digest, name
