"""Specification of project archives: packing, validating an upload, and unpacking safely."""

from __future__ import annotations

import gzip
import io
import tarfile
import threading
from pathlib import Path

import pytest

from shared.dsl.archive import (
    ArchiveTooLarge,
    archive_digest,
    extract_archive,
    pack_project,
    read_project_archive,
)
from shared.errors import InvalidInput, InvalidWorkflow
from tests.support.files import write_under


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        write_under(root, name, text)
    return root


def tar_gz(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    """A tar.gz of hand-made members (content None for folders and links)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_member(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def link_member(
    name: str, target: str, kind: bytes = tarfile.SYMTYPE
) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


WORKFLOW = b"+step:\n  sh>: ./run.sh\n"


def refusal(content: bytes, **limits: int) -> str:
    """The text of the InvalidInput reading ``content`` raises."""
    with pytest.raises(InvalidInput) as caught:
        read_project_archive(content, **limits)
    return str(caught.value)


class TestPacking:
    def test_a_packed_project_reads_back_with_its_workflows_and_files(self, tmp_path: Path) -> None:
        project = write(
            tmp_path / "p",
            {"etl.dig": "+a:\n  echo>: hi\n", "report.dig": "+b:\n  echo>: b\n", "lib/x.py": ""},
        )

        archive = read_project_archive(pack_project(project))

        assert sorted(archive.workflows) == ["etl", "report"]
        assert archive.files == 3
        assert archive.digest == archive_digest(archive.content)

    def test_the_same_files_give_the_same_bytes_whatever_their_times(self, tmp_path: Path) -> None:
        project = write(tmp_path / "p", {"wf.dig": "+a:\n  echo>: hi\n"})
        first = pack_project(project)
        (project / "wf.dig").touch()  # a new modification time
        assert pack_project(project) == first

    def test_local_state_history_and_caches_are_left_out(self, tmp_path: Path) -> None:
        project = write(
            tmp_path / "p",
            {
                "wf.dig": "+a:\n  echo>: hi\n",
                ".tickwork/state.db": "",
                ".git/HEAD": "",
                "lib/__pycache__/x.pyc": "",
                ".venv/bin/python": "",
                "lib/keep.py": "",
            },
        )
        with tarfile.open(fileobj=io.BytesIO(pack_project(project)), mode="r:gz") as tar:
            names = tar.getnames()
        assert names == ["lib", "lib/keep.py", "wf.dig"]

    def test_an_executable_script_stays_executable_once_unpacked(self, tmp_path: Path) -> None:
        project = write(tmp_path / "p", {"wf.dig": WORKFLOW.decode(), "run.sh": "echo hi\n"})
        (project / "run.sh").chmod(0o755)
        extract_archive(pack_project(project), tmp_path / "out")
        assert (tmp_path / "out" / "run.sh").stat().st_mode & 0o100


class TestValidation:
    def test_every_invalid_file_is_listed_with_its_file_and_line(self, tmp_path: Path) -> None:
        project = write(
            tmp_path / "p",
            {
                "good.dig": "+a:\n  echo>: hi\n",
                "bad_one.dig": "+a:\n  nosuch>: x\n",
                "bad_two.dig": "timezone: Mars/Olympus\n+a:\n  echo>: hi\n",
            },
        )
        with pytest.raises(InvalidWorkflow) as caught:
            read_project_archive(pack_project(project))
        places = {(p.file, p.line) for p in caught.value.problems}
        assert ("bad_one.dig", 2) in places
        assert ("bad_two.dig", 1) in places
        assert {p.file for p in caught.value.problems} == {"bad_one.dig", "bad_two.dig"}

    def test_a_body_that_is_not_gzip_is_refused(self) -> None:
        assert "not a valid tar.gz archive" in refusal(b"PK\x03\x04 this is a zip")

    def test_a_gzip_body_that_is_not_a_tar_is_refused(self) -> None:
        assert "not a valid tar.gz archive" in refusal(gzip.compress(b"hello " * 200))

    def test_an_empty_archive_is_refused(self) -> None:
        assert "the archive is empty" in refusal(tar_gz())

    def test_an_archive_without_a_workflow_file_is_refused(self) -> None:
        message = refusal(tar_gz(file_member("README.md"), file_member("sub/wf.dig", WORKFLOW)))
        assert "no workflow file (*.dig)" in message

    def test_too_many_files_are_refused(self) -> None:
        members = [file_member(f"f{i}.txt") for i in range(6)]
        with pytest.raises(ArchiveTooLarge, match="more than 5 entries"):
            read_project_archive(tar_gz(file_member("wf.dig", WORKFLOW), *members), max_files=5)

    def test_a_body_over_the_size_limit_is_refused_before_it_is_read(self) -> None:
        with pytest.raises(ArchiveTooLarge, match="over the limit of 100"):
            read_project_archive(b"\x1f\x8b" + b"\0" * 200, max_bytes=100)

    def test_content_that_unpacks_past_the_limit_is_refused(self) -> None:
        big = file_member("data.bin", b"\0" * 100_000)
        content = tar_gz(file_member("wf.dig", WORKFLOW), big)
        assert len(content) < 10_000  # zeros compress well: the limit is on what unpacks
        with pytest.raises(ArchiveTooLarge, match="unpacks to more than 50000 bytes"):
            read_project_archive(content, max_unpacked_bytes=50_000)


class TestUnsafeArchives:
    @pytest.mark.parametrize(
        ("member", "reason"),
        [
            (file_member("/etc/evil.txt"), "an absolute path"),
            (file_member("../evil.txt"), "'..'"),
            (file_member("sub/../../evil.txt"), "'..'"),
            (link_member("escape", "/etc/passwd"), "the link points outside"),
            (link_member("sub/escape", "../../evil.txt"), "the link points outside"),
            (link_member("hard", "../evil.txt", tarfile.LNKTYPE), "the link points outside"),
        ],
    )
    def test_a_member_that_would_leave_the_project_is_refused_and_nothing_is_written(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        member: tuple[tarfile.TarInfo, bytes | None],
        reason: str,
    ) -> None:
        monkeypatch.chdir(tmp_path)
        content = tar_gz(file_member("wf.dig", WORKFLOW), member)

        message = refusal(content)
        with pytest.raises(InvalidInput):
            extract_archive(content, tmp_path / "work" / "project")

        assert reason in message and member[0].name in message
        assert not (tmp_path / "evil.txt").exists()
        assert sorted(p.name for p in (tmp_path / "work").iterdir()) == []  # no leftover

    @pytest.mark.parametrize(
        ("members", "reason"),
        [
            (
                [link_member("x/up", ".."), link_member("x/up/out", "..")],
                "x/up/out: refused: a path through a link",
            ),
            (
                [link_member("lib", "."), file_member("lib/evil.txt", b"x")],
                "lib/evil.txt: refused: a path through a link",
            ),
            (
                [link_member("a", "sub"), link_member("b", "a/x")],
                "b: refused: a link through another link",
            ),
        ],
        ids=["link-under-a-link", "file-under-a-link", "link-target-through-a-link"],
    )
    def test_a_member_reached_through_another_link_is_refused(
        self, members: list[tuple[tarfile.TarInfo, bytes | None]], reason: str
    ) -> None:
        # Checked by text, a path through a link could still lead anywhere the link does
        assert reason in refusal(tar_gz(file_member("wf.dig", WORKFLOW), *members))

    def test_a_device_is_refused(self) -> None:
        device = tarfile.TarInfo("dev")
        device.type = tarfile.CHRTYPE
        message = refusal(tar_gz(file_member("wf.dig", WORKFLOW), (device, None)))
        assert "dev: refused: only files, folders and links" in message

    def test_a_link_inside_the_project_is_kept(self, tmp_path: Path) -> None:
        content = tar_gz(
            file_member("wf.dig", WORKFLOW),
            file_member("lib/real.sh", b"echo real\n"),
            link_member("run.sh", "lib/real.sh"),
        )
        extract_archive(content, tmp_path / "out")
        assert (tmp_path / "out" / "run.sh").read_text() == "echo real\n"


class TestExtraction:
    def test_extracting_twice_keeps_the_first_folder(self, tmp_path: Path) -> None:
        project = write(tmp_path / "p", {"wf.dig": WORKFLOW.decode()})
        target = tmp_path / "cache" / "digest"
        extract_archive(pack_project(project), target)
        (target / "marker").write_text("kept")
        extract_archive(pack_project(project), target)
        assert (target / "marker").read_text() == "kept"

    def test_concurrent_extractions_of_one_archive_leave_one_complete_folder(
        self, tmp_path: Path
    ) -> None:
        files = {f"lib/f{i}.txt": str(i) * 1000 for i in range(50)}
        content = pack_project(write(tmp_path / "p", {"wf.dig": WORKFLOW.decode(), **files}))
        target = tmp_path / "cache" / "digest"
        errors: list[BaseException] = []

        def extract() -> None:
            try:
                extract_archive(content, target)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=extract) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

        assert errors == []
        assert len(list((target / "lib").iterdir())) == 50
        assert [p.name for p in target.parent.iterdir()] == ["digest"]  # no temporary left
