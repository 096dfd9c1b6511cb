"""Specification of project archives: packing, validating an upload, and unpacking safely."""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.support.archives import (
    PADDED,
    MiB,
    corrupted_crc,
    extended_headers_in_a_row,
    gnu_sparse_map,
    gz,
    hard_link,
    header,
    hostile,
    huge_pax_header,
    member,
    raw_pax_header,
    symlink,
    symlink_chain,
    workflow_first,
)
from tests.support.files import write_under
from tickwork.shared.dsl.archive import (
    ArchiveTooLarge,
    archive_digest,
    extract_archive,
    pack_project,
    read_project_archive,
)
from tickwork.shared.errors import InvalidInput, InvalidWorkflow


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


@pytest.fixture(scope="module")
def huge_pax() -> bytes:
    """A 0.4 MB tar.gz holding a 400 MiB PAX header (built once: it takes a second)."""
    return huge_pax_header(400 * MiB)


# (id, archive, what the problem says): each used to answer a 500, read past its limits,
# show a temporary path of the server, or be accepted.
HOSTILE = [
    # hard links tarfile cannot resolve: KeyError
    ("hard-link-to-a-missing-member", hostile(hard_link("h", "nosuch")), "h: refused: a hard link"),
    ("hard-link-to-a-later-member", hostile(hard_link("h", "b"), member("b")), "h: refused"),
    # a hard link naming its file through '..': a 422 naming no member
    (
        "hard-link-through-a-missing-folder",
        hostile(hard_link("h", "x/../wf.dig")),
        "h: refused: a hard link must name a file stored before it, without '..' (x/../wf.dig)",
    ),
    (
        "hard-link-through-a-folder",
        hostile(member("d", kind=tarfile.DIRTYPE), hard_link("h", "d/../wf.dig")),
        "h: refused: a hard link must name a file stored before it",
    ),
    (
        "hard-link-to-a-folder",
        hostile(member("d", kind=tarfile.DIRTYPE), hard_link("h", "d")),
        "h:",
    ),
    # names a file system chokes on: RecursionError, ValueError, OSError with a path
    (
        "2500-folders-deep",
        hostile(member("x", pax={"path": "a/" * 2500 + "x"})),
        "refused: the name is more than 64 folders deep",
    ),
    (
        "pax-path-with-a-nul",
        hostile(member("x", pax={"path": "a\0b.dig"})),
        "a\\x00b.dig: refused: the name holds a control character (U+0000)",
    ),
    (
        "pax-link-target-with-a-nul",
        hostile(member("l", kind=tarfile.SYMTYPE, pax={"linkpath": "a\0b"})),
        "l: refused: the link target holds a control character (U+0000)",
    ),
    (
        "name-part-over-255-bytes",
        hostile(member("x", pax={"path": "n" * 300})),
        "refused: the name has a part longer than 255 bytes",
    ),
    (
        "name-over-1024-bytes",
        hostile(member("x", pax={"path": "/".join(["d" * 30] * 40)})),
        "refused: the name is longer than 1024 bytes",
    ),
    (
        "name-not-utf8",
        hostile(member("caf\udce9.dig", WORKFLOW)),
        "caf\ufffd.dig: refused: the name",
    ),
    ("name-with-a-newline", hostile(member("a\nb.dig", WORKFLOW)), "a\\x0ab.dig: refused"),
    # characters the name of a workflow cannot hold either: accepted
    (
        "pax-path-with-a-c1-control",
        hostile(member("x", pax={"path": "a\x85b.dig"})),
        "a\\x85b.dig: refused: the name holds a control character (U+0085)",
    ),
    (
        "pax-path-with-a-format-character",
        hostile(member("x", pax={"path": "a\u202eb.dig"})),
        "a\\u202eb.dig: refused: the name holds a format character (U+202E)",
    ),
    (
        "name-with-a-line-separator",
        hostile(member("a\u2028b.dig")),
        "a\\u2028b.dig: refused: the name holds a line separator (U+2028)",
    ),
    (
        "link-target-with-a-paragraph-separator",
        hostile(symlink("l", "a\u2029b")),
        "l: refused: the link target holds a paragraph separator (U+2029)",
    ),
    ("nameless-file", hostile(member("x", pax={"path": ""})), "(no name): refused: a file"),
    # times os.utime refuses: OverflowError, ValueError
    ("mtime-infinite", hostile(member("a", pax={"mtime": "inf"})), "a: refused: the modification"),
    ("mtime-nan", hostile(member("a", pax={"mtime": "nan"})), "a: refused: the modification"),
    # headers tarfile follows by recursion, or reads whole: RecursionError, ValueError
    (
        "3000-pax-headers-in-a-row",
        hostile(extended_headers_in_a_row(3000), member("b")),
        "refused: more than 8 extended headers in a row, for the member after 'wf.dig'",
    ),
    (
        "3000-gnu-long-names-in-a-row",
        hostile(extended_headers_in_a_row(3000, tarfile.GNUTYPE_LONGNAME), member("b")),
        "refused: more than 8 extended headers in a row",
    ),
    ("gnu-sparse-map-cut-short", gnu_sparse_map(10), "not a valid tar.gz archive (a malformed"),
    # PAX data that is not records: ignored from the first bad one on, or parsed slowly
    (
        "pax-record-length-too-short",
        hostile(raw_pax_header(b"5 path=a.dig\n"), member("b")),
        "././@PaxHeader: refused: the PAX record at byte 0 claims 5 bytes, which do not end",
    ),
    (
        "pax-record-length-past-the-end",
        hostile(raw_pax_header(b"99 path=a.dig\n"), member("b")),
        "refused: the PAX record at byte 0 claims 99 bytes, past the end of the header",
    ),
    (
        "pax-record-without-a-length",
        hostile(raw_pax_header(b"14 path=a.dig\nhello\n"), member("b")),
        "refused: the PAX record at byte 14 does not start with its length",
    ),
    (
        "pax-record-without-an-equals-sign",
        hostile(raw_pax_header(b"12 path a.d\n"), member("b")),
        "refused: the PAX record at byte 0 is not 'keyword=value', for the member after 'wf.dig'",
    ),
    (
        "pax-body-of-digits",
        hostile(raw_pax_header(b"1" * 2000), member("b")),
        "refused: more than 32 digits in a row at byte 0",
    ),
    # links chained past the kernel's limit: RecursionError
    (
        "1000-chained-links",
        hostile(*symlink_chain(1000)),
        "l0: refused: the link goes through more than 40 links",
    ),
    ("link-to-itself", hostile(symlink("l", "l")), "l: refused: the link goes through more than"),
    ("gnu-sparse-file", hostile(header("s", tarfile.GNUTYPE_SPARSE)), "s: refused: a sparse file"),
    # members that collide: an OSError showing the server's path, or silently overwritten
    ("same-file-twice", hostile(member("a"), member("a")), "a: refused: the archive holds this"),
    (
        "file-over-a-folder",
        hostile(member("d", kind=tarfile.DIRTYPE), member("d")),
        "d: refused: the archive holds this path twice",
    ),
    (
        "file-under-a-file",
        hostile(member("a"), member("a/b")),
        "a/b: refused: a path under the file",
    ),
    (
        "file-over-an-implied-folder",
        hostile(member("d/f"), member("d")),
        "d: refused: it cannot be",
    ),
    # a link that a later link turns outside the project: accepted
    (
        "link-turned-outside-by-a-later-link",
        hostile(symlink("a", "b/../escaped"), symlink("b", ".")),
        "a: refused: the link points outside the project through another link",
    ),
    (
        "link-through-a-link-by-dotdot",
        hostile(symlink("x", "."), symlink("y", "x/..")),
        "y: refused",
    ),
    # gzip damage past the tar's end: accepted
    ("gzip-crc-corrupted", corrupted_crc(PADDED), "(CRC check failed"),
    ("gzip-trailer-cut-off", PADDED[:-8], "not a valid tar.gz archive"),
    (
        "2-mib-after-the-end",
        gz([workflow_first(), bytes(2 * MiB)]),
        "follow the end of the archive",
    ),
]


class TestHostileArchives:
    @pytest.mark.parametrize(
        ("content", "expected"), [case[1:] for case in HOSTILE], ids=[case[0] for case in HOSTILE]
    )
    def test_a_hostile_archive_is_refused_naming_the_member_and_no_server_path(
        self, tmp_path: Path, content: bytes, expected: str
    ) -> None:
        with pytest.raises(InvalidInput) as extracting:
            extract_archive(content, tmp_path / "work" / "project")

        for message in (refusal(content), str(extracting.value)):
            assert expected in message
            assert "tickwork-archive-" not in message and tempfile.gettempdir() not in message
            assert str(tmp_path) not in message
        assert sorted(p.name for p in (tmp_path / "work").iterdir()) == []  # no leftover

    def test_a_400_mib_pax_header_is_refused_before_it_is_read(self, huge_pax: bytes) -> None:
        # Given a 0.4 MB upload whose PAX header announces 400 MiB
        assert len(huge_pax) < 500_000
        # When it is read, with every allocation traced
        tracemalloc.start()
        try:
            with pytest.raises(ArchiveTooLarge) as caught:
                read_project_archive(huge_pax)
            peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # Then it is refused naming the header, having held almost nothing
        assert peak_bytes < 4 * MiB
        assert str(caught.value) == (
            "././@PaxHeader: refused: an extended header of 419430400 bytes, over the limit"
            " of 65536, for the member after 'wf.dig'"
        )

    def test_a_gnu_sparse_map_is_not_read_past_its_headers(self) -> None:
        # tarfile reads a sparse map (not announced by any header) whole, into a list
        content = gnu_sparse_map(4 * MiB)
        tracemalloc.start()
        try:
            message = refusal(content)
            peak_bytes = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak_bytes < 4 * MiB
        assert "the headers of the member after 'wf.dig' are malformed" in message

    def test_headers_of_many_members_together_stay_under_a_budget(self) -> None:
        # One 40 KiB PAX header is allowed, but not 3 of them with max_files=5
        padding = {"comment": "c" * 40 * 1024}
        members = [member(f"f{i}", pax=padding) for i in range(3)]
        with pytest.raises(ArchiveTooLarge, match="bytes of tar headers"):
            read_project_archive(hostile(*members), max_files=5)

    def test_headers_a_tool_may_write_are_accepted(self) -> None:
        # A long name, a global header and a 32 KiB PAX record are all within the limits
        long_name = "/".join(["folder"] * 40) + "/file.txt"
        content = hostile(
            header("pax_global_header", tarfile.XGLTYPE, 0),
            member("x", pax={"path": long_name, "comment": "c" * 32 * 1024}),
            member("lib", kind=tarfile.DIRTYPE),
            member("lib", kind=tarfile.DIRTYPE),
        )
        assert read_project_archive(content).files == 2


def pax_record(keyword: str, value: bytes) -> bytes:
    """One well-formed PAX record: its length counts its own digits."""
    rest = b" " + keyword.encode() + b"=" + value + b"\n"
    length = len(rest) + len(str(len(rest)))
    length += len(str(length)) - len(str(len(rest)))
    return str(length).encode() + rest


def cpu_seconds_refusing(content: bytes) -> tuple[float, str]:
    """The CPU time reading ``content`` took, and the text of its refusal."""
    started = time.process_time()
    message = refusal(content)
    return time.process_time() - started, message


class TestBoundedWork:
    """Every upload costs time linear in its size: none of these takes a second."""

    @pytest.mark.parametrize(
        ("pax_data", "expected"),
        [
            # 251 bytes once compressed: took 10 s in tarfile's regular expressions
            (b"1" * 100_000, "refused: an extended header of 100000 bytes, over the limit"),
            (b"1" * 60_000, "refused: more than 32 digits in a row at byte 0"),
            (pax_record("comment", b"1" * 60_000), "refused: more than 32 digits in a row"),
        ],
        ids=["100000-digits", "60000-digits", "a-record-of-60000-digits"],
    )
    def test_a_pax_header_of_digits_is_refused_in_little_time(
        self, pax_data: bytes, expected: str
    ) -> None:
        content = hostile(raw_pax_header(pax_data), member("b"))
        assert len(content) < 1000

        cpu_seconds, message = cpu_seconds_refusing(content)

        assert cpu_seconds < 0.5
        assert message.startswith("././@PaxHeader: ")
        assert expected in message

    def test_well_formed_pax_records_are_read_as_tarfile_reads_them(self) -> None:
        records = pax_record("path", b"docs/notes.txt") + pax_record("mtime", b"1700000000.5")
        content = hostile(raw_pax_header(records), member("b"), member("docs", kind=b"5"))
        assert read_project_archive(content).files == 2

    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_links_to_the_head_of_a_900_link_chain_cost_nothing_more_than_the_chain(
        self,
    ) -> None:
        # Given a 900-link chain, alone, then followed by 500 links to its head
        chain = symlink_chain(900)
        heads = [symlink(f"h{i}", "l0") for i in range(500)]
        # When each is read (creating the 900 links costs what the file system takes)
        chain_seconds, _ = cpu_seconds_refusing(hostile(*chain))
        cpu_seconds, message = cpu_seconds_refusing(hostile(*chain, *heads))
        # Then the first link to the head is refused without following the chain
        assert cpu_seconds - chain_seconds < 0.5
        assert "h0: refused: the link goes through more than 40 links" in message

    def test_a_chain_of_40_links_is_kept_and_one_of_41_refused(self, tmp_path: Path) -> None:
        # Linux follows at most 40 links in one path (ELOOP)
        extract_archive(hostile(*symlink_chain(40)), tmp_path / "ok")
        assert (tmp_path / "ok" / "l0").read_bytes() == b"+step:\n  echo>: hi\n"
        assert "l0: refused: the link goes through more than 40 links" in refusal(
            hostile(*symlink_chain(41))
        )

    def test_checking_links_takes_time_linear_in_their_number(self) -> None:
        from tickwork.shared.dsl.archive_links import link_problem

        # 10,000 links to the head of a 39-link chain, each 40 links deep
        targets = {f"h{i}": "l0" for i in range(10_000)}
        targets |= {f"l{i}": f"l{i + 1}" for i in range(38)} | {"l38": "wf.dig"}
        started = time.process_time()
        assert link_problem(targets) is None
        assert time.process_time() - started < 0.5
        # one more link in the chain, and the first link is refused
        targets |= {"l38": "l39", "l39": "wf.dig"}
        assert link_problem(targets) == ("h0", "the link goes through more than 40 links")

    def test_a_hard_link_to_a_file_by_its_plain_or_dotted_path_is_kept(
        self, tmp_path: Path
    ) -> None:
        content = hostile(hard_link("h1", "wf.dig"), hard_link("h2", "./wf.dig"))
        extract_archive(content, tmp_path / "project")
        assert (tmp_path / "project" / "h2").read_bytes() == b"+step:\n  echo>: hi\n"

    def test_a_pushed_workflow_file_over_1_mib_is_refused_naming_it(self) -> None:
        # 1.3 KB compressed: took 12 s and 400 MB to parse
        big = b"_export:\n  numbers: [" + b",".join([b"1"] * 600_000) + b"]\n"
        content = hostile(member("big.dig", big))
        assert len(content) < 5000

        started = time.process_time()
        with pytest.raises(InvalidWorkflow) as caught:
            read_project_archive(content)

        assert time.process_time() - started < 1.0
        assert str(caught.value) == (
            "big.dig: the file is 1200022 bytes, over the limit of 1048576 for a workflow file"
        )
