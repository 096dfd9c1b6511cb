"""Specs for the test suite's own guard against writes outside a test's temporary root."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.files import MachineFiles, path_under, write_under


class TestPathUnder:
    @pytest.mark.parametrize("relative", ["/etc/passwd", "../outside.log", "a/../../x"])
    def test_a_path_that_escapes_its_root_is_refused_before_anything_is_written(
        self, tmp_path: Path, relative: str
    ) -> None:
        root = tmp_path / "root"
        root.mkdir()
        with pytest.raises(AssertionError, match="escapes the test's root"):
            write_under(root, relative, "x")
        assert list(tmp_path.iterdir()) == [root]

    def test_a_nested_path_is_written_under_its_root(self, tmp_path: Path) -> None:
        assert write_under(tmp_path, "a/b.dig", "+x:\n").read_text() == "+x:\n"
        assert path_under(tmp_path, "a/./b.dig") == (tmp_path / "a" / "b.dig").resolve()


class TestMachineFiles:
    def test_a_changed_file_is_named_and_its_content_put_back(self, tmp_path: Path) -> None:
        guarded, untouched = tmp_path / "passwd", tmp_path / "hosts"
        guarded.write_bytes(b"root:x:0:0\n")
        untouched.write_bytes(b"127.0.0.1 localhost\n")
        files = MachineFiles.snapshot((guarded, untouched))
        guarded.write_bytes(b"")
        assert files.changed() == [guarded]
        assert guarded.read_bytes() == b"root:x:0:0\n"
        assert files.changed() == []

    def test_unchanged_files_pass(self, tmp_path: Path) -> None:
        (tmp_path / "group").write_bytes(b"root:x:0:\n")
        assert MachineFiles.snapshot((tmp_path / "group", tmp_path / "absent")).changed() == []

    def test_a_guarded_file_a_test_created_is_named_and_removed(self, tmp_path: Path) -> None:
        absent = tmp_path / "shadow"
        files = MachineFiles.snapshot((absent,))
        absent.write_bytes(b"root:!:1::::::\n")
        assert files.changed() == [absent]
        assert not absent.exists()
        assert files.changed() == []
