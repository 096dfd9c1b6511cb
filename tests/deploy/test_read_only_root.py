"""The services run as the manifests run them: on a read-only root filesystem with only
``/tmp`` writable (``readOnlyRootFilesystem: true`` and an emptyDir), and ``$HOME`` a
directory that does not exist. No container engine exists here, so a private mount
namespace (``unshare -m``) makes ``/`` read-only for the processes of one shell; every
service must come up and answer its readiness probe there."""

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


def test_every_service_is_ready_on_a_read_only_root_with_only_tmp_writable(
    postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    if not _can_unshare():
        pytest.skip("needs `unshare -m` (root or user namespaces) to make / read-only")
    from shared.store.engine import create_store_engine
    from shared.store.migrate import upgrade_database

    engine = create_store_engine(postgres_url)
    try:
        upgrade_database(engine)
    finally:
        engine.dispose()
    tickwork = str(Path(sys.executable).with_name("tickwork"))
    api, scheduler, executor, agent = (find_free_port() for _ in range(4))
    script = textwrap.dedent(
        f"""
        set -u
        mount -o remount,bind,ro / || exit 90
        mount -t tmpfs tmpfs /tmp || exit 91
        if touch /.tickwork-probe 2>/dev/null; then echo "/ is writable"; exit 92; fi
        export HOME=/nonexistent TICKWORK_LOG_FORMAT=text TICKWORK_REDIS_URL='{redis_url}'
        export TICKWORK_REDIS_PREFIX='{redis_prefix}' TICKWORK_DATABASE_URL='{postgres_url}'
        cd /
        TICKWORK_API_AUTH=off {tickwork} api --bind 127.0.0.1:{api} --workers 2 \
            > /tmp/api.log 2>&1 &
        {tickwork} scheduler --metrics-port {scheduler} > /tmp/scheduler.log 2>&1 &
        TICKWORK_LOG_DIR=/tmp/logs {tickwork} executor --metrics-port {executor} \
            > /tmp/executor.log 2>&1 &
        env -u TICKWORK_DATABASE_URL {tickwork} agent --concurrency 1 \
            --metrics-port {agent} --work-dir /tmp > /tmp/agent.log 2>&1 &
        status=0
        for port in {api} {scheduler} {executor} {agent}; do
            ready=no
            for _ in $(seq {READY_TIMEOUT_SECONDS * 5}); do
                if {sys.executable} -c "import urllib.request as u; \
u.urlopen('http://127.0.0.1:$port/readyz', timeout=1)" 2>/dev/null; then
                    ready=yes; break
                fi
                sleep 0.2
            done
            echo "port $port ready=$ready"
            [ "$ready" = yes ] || status=1
        done
        kill $(jobs -p) 2>/dev/null
        wait
        if [ $status -ne 0 ]; then tail -n 20 /tmp/*.log; fi
        exit $status
        """
    )
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=READY_TIMEOUT_SECONDS * 4 + 20,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ready=yes") == 4, done.stdout
