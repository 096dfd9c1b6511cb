"""The services run as the manifests run them: on a read-only root filesystem with one
writable scratch directory as their TMPDIR (``readOnlyRootFilesystem: true`` and an
emptyDir on /tmp), and ``$HOME`` a directory that does not exist. No container engine
exists here, so a private mount namespace (``unshare -m``) makes ``/`` read-only for the
processes of one shell; every service must come up and answer its readiness probe there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.servers import find_free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]

READY_TIMEOUT_SECONDS = 40


def _can_unshare() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    done = subprocess.run(
        [unshare, "-m", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


def test_every_service_is_ready_on_a_read_only_root_with_one_scratch_directory(
    migrated_postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    if not _can_unshare():
        pytest.skip("needs `unshare -m` (root or user namespaces) to make / read-only")
    tickwork = str(Path(sys.executable).with_name("tickwork"))
    api, scheduler, executor, agent = (find_free_port() for _ in range(4))
    # The one writable place: a tmpfs of its own (not over /tmp, where this checkout and
    # its venv may live), given to the services as TMPDIR, as the emptyDir on /tmp is.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = textwrap.dedent(
        f"""
        set -u
        mount -t tmpfs tmpfs {scratch} || exit 90
        mount -o remount,bind,ro / || exit 91
        if touch /.tickwork-probe 2>/dev/null; then echo "/ is writable"; exit 92; fi
        export TMPDIR={scratch} HOME=/nonexistent TICKWORK_LOG_FORMAT=text
        export TICKWORK_REDIS_URL='{redis_url}' TICKWORK_REDIS_PREFIX='{redis_prefix}'
        export TICKWORK_DATABASE_URL='{migrated_postgres_url}'
        cd /
        TICKWORK_API_AUTH=off {tickwork} api --bind 127.0.0.1:{api} --workers 2 \
            > {scratch}/api.log 2>&1 &
        pids=$!
        {tickwork} scheduler --metrics-port {scheduler} > {scratch}/scheduler.log 2>&1 &
        pids="$pids $!"
        {tickwork} executor --metrics-port {executor} \
            > {scratch}/executor.log 2>&1 &
        pids="$pids $!"
        env -u TICKWORK_DATABASE_URL {tickwork} agent --concurrency 1 \
            --metrics-port {agent} --work-dir {scratch} > {scratch}/agent.log 2>&1 &
        pids="$pids $!"
        status=1
        for _ in $(seq {READY_TIMEOUT_SECONDS * 5}); do
            for pid in $pids; do
                kill -0 "$pid" 2>/dev/null || {{ echo "pid $pid exited"; break 2; }}
            done
            ready=0
            for port in {api} {scheduler} {executor} {agent}; do
                if {sys.executable} -c "import urllib.request as u; \
u.urlopen('http://127.0.0.1:$port/readyz', timeout=1)" 2>/dev/null; then
                    ready=$((ready + 1))
                fi
            done
            echo "ready: $ready of 4"
            if [ $ready -eq 4 ]; then status=0; break; fi
            sleep 0.2
        done
        kill $pids 2>/dev/null
        wait
        if [ $status -ne 0 ]; then tail -n 20 {scratch}/*.log; fi
        exit $status
        """
    )
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_SECONDS * 2 + 20,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    assert done.stdout.splitlines()[-1] == "ready: 4 of 4", done.stdout[-4000:]
