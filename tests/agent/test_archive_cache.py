"""Specification of the agent's archive cache and how a task finds its pushed files."""

from __future__ import annotations

from pathlib import Path

from tickwork.services.agent.archives import ArchiveCache
from tickwork.services.agent.runner import TaskRunner
from tickwork.shared.dispatch.messages import Outcome, TaskEvent, TaskFinished, TaskMessage
from tickwork.shared.dsl.archive import archive_digest, pack_project


def project_archive(tmp_path: Path) -> bytes:
    source = tmp_path / "source"
    source.mkdir()
    (source / "wf.dig").write_text("+a:\n  sh>: cat data.txt\n")
    (source / "data.txt").write_text("shipped data\n")
    return pack_project(source)


def message(digest: str | None) -> TaskMessage:
    return TaskMessage(
        task_id=1,
        attempt_id=1,
        lease_token=1,
        full_name="+wf+a",
        operator="sh",
        command="cat data.txt",
        params={},
        project_dir=".",
        archive_digest=digest,
    )


def run(runner: TaskRunner, task: TaskMessage) -> TaskFinished:
    events: list[TaskEvent] = []
    runner(task, events.append)
    finished = events[-1]
    assert isinstance(finished, TaskFinished)
    return finished


def test_an_archive_is_fetched_once_and_its_folder_reused(tmp_path: Path) -> None:
    content = project_archive(tmp_path)
    fetched: list[str] = []

    def fetch(digest: str) -> bytes:
        fetched.append(digest)
        return content

    cache = ArchiveCache(tmp_path / "projects", fetch)
    digest = archive_digest(content)
    first = cache.directory_of(digest)
    again = cache.directory_of(digest)

    assert first == again == (tmp_path / "projects" / digest).resolve()
    assert (first / "data.txt").read_text() == "shipped data\n"
    assert fetched == [digest]


def test_a_task_runs_in_the_folder_of_its_archive(tmp_path: Path) -> None:
    content = project_archive(tmp_path)
    runner = TaskRunner(tmp_path / "logs", archives=ArchiveCache(tmp_path / "p", lambda d: content))
    finished = run(runner, message(archive_digest(content)))
    assert finished.outcome is Outcome.SUCCESS, finished.error_message
    assert finished.output_lines == ["shipped data"]


def test_a_task_whose_archive_is_not_available_fails_saying_so(tmp_path: Path) -> None:
    runner = TaskRunner(tmp_path / "logs", archives=ArchiveCache(tmp_path / "p", lambda d: None))
    finished = run(runner, message("a" * 64))
    assert finished.outcome is Outcome.ERROR
    assert finished.error_message == f"project archive {'a' * 64} is not available"


def test_an_archive_whose_bytes_do_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    content = project_archive(tmp_path)
    runner = TaskRunner(tmp_path / "logs", archives=ArchiveCache(tmp_path / "p", lambda d: content))
    finished = run(runner, message("b" * 64))
    assert finished.outcome is Outcome.ERROR
    assert finished.error_message == f"project archive {'b' * 64} does not match its digest"
    assert not (tmp_path / "p" / ("b" * 64)).exists()


def test_a_digest_that_is_not_one_never_names_a_folder(tmp_path: Path) -> None:
    runner = TaskRunner(tmp_path / "logs", archives=ArchiveCache(tmp_path / "p", lambda d: b""))
    finished = run(runner, message("../../etc"))
    assert finished.outcome is Outcome.ERROR
    assert "is not an archive digest" in (finished.error_message or "")


def test_a_task_without_an_archive_runs_in_its_project_dir_as_before(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("local data\n")
    runner = TaskRunner(tmp_path / "logs")
    task = message(None)
    finished = run(runner, TaskMessage(**{**task.to_json(), "project_dir": str(tmp_path)}))
    assert finished.output_lines == ["local data"]
