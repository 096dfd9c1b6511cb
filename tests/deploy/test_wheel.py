"""The distribution installs one import name of its own: the wheel built from this tree holds
``tickwork/services`` and ``tickwork/shared`` (every file of the two folders, the UI's
templates and vendored files among them) and nothing else at its top, and installed
without ``-e`` it serves ``tickwork standalone``, pages and all, from its own files."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.e2e._standalone import running_standalone

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_SECONDS = 300


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel`` builds from this tree (with the build backend pyproject names)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("tickwork-*.whl")
    return built


def tracked_files(*folders: str) -> set[str]:
    done = subprocess.run(
        ["git", "ls-files", "-z", *folders],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {name for name in done.stdout.split("\0") if name}


def test_the_wheel_has_one_top_level_name_besides_its_metadata(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"tickwork", f"{wheel_stem(wheel)}.dist-info"}
    assert "tickwork/__init__.py" not in names  # a namespace: the import name is all it claims


def test_the_wheel_holds_every_file_of_services_and_shared_under_tickwork(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = tracked_files("services", "shared")
    assert tracked, "git ls-files found nothing: is this a checkout?"
    assert {f"tickwork/{name}" for name in tracked} <= names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_wheel_installed_without_e_serves_standalone_with_its_pages(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    # The dependencies come from this environment's site-packages, which are not a site
    # directory there: its editable install's .pth (this tree on sys.path) is not read.
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=BUILD_TIMEOUT_SECONDS,
    )
    where = subprocess.run(
        [str(python), "-c", "import tickwork.services.api.ui as ui; print(ui.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert Path(where.stdout.strip()).is_relative_to(site)

    with running_standalone(
        tmp_path / "state", tickwork=[str(venv / "bin" / "tickwork")]
    ) as server:
        for path, kind in [
            ("/ui/", "text/html"),
            ("/ui/static/ui.css", "text/css"),
            ("/ui/static/vendor/elkjs/elk.bundled.js", "javascript"),
            ("/api/docs", "text/html"),
        ]:
            answer = httpx.get(server.endpoint + path, timeout=10.0)
            assert answer.status_code == 200, (path, answer.text[:300])
            assert kind in answer.headers["content-type"], path


def wheel_stem(wheel: Path) -> str:
    """``tickwork-0.1.0`` of ``tickwork-0.1.0-py3-none-any.whl``."""
    return "-".join(wheel.name.split("-")[:2])
