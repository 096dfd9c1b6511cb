"""A live ``tickwork standalone`` process for tests, and the ``tickwork`` client run against it.

The process gets a free port and its own state directory, writes its output to a file
(a pipe nobody reads would fill up and stall it), is waited for through ``/readyz`` with a
bound, and is always killed when the test ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e._run import tickwork_command
from tests.e2e._scheduling import environment
from tests.support.servers import find_free_port

READY_TIMEOUT_SECONDS = 30.0
COMMAND_TIMEOUT_SECONDS = 60
STOP_TIMEOUT_SECONDS = 10.0


def client_environment(endpoint: str, token: str | None = None) -> dict[str, str]:
    """This process's environment without ``TICKWORK_*``, talking to ``endpoint``."""
    environ = environment()
    environ["TICKWORK_ENDPOINT"] = endpoint
    environ["TICKWORK_CONFIG"] = os.devnull  # never the user's own client config
    if token is not None:
        environ["TICKWORK_API_TOKEN"] = token
    return environ


@dataclass(frozen=True)
class Command:
    """What one ``tickwork`` client command did."""

    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """Stdout as one JSON document."""
        return json.loads(self.stdout)

    def json_lines(self) -> list[Any]:
        """Stdout as one JSON document per line."""
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    def explain(self) -> str:
        """Everything the command printed, for assertion messages."""
        return f"exit {self.exit_code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_tickwork(
    *args: str,
    env: Mapping[str, str],
    timeout_seconds: float = COMMAND_TIMEOUT_SECONDS,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> Command:
    """Run ``tickwork`` with ``args`` in ``env`` (bounded), in ``cwd`` if given, reading
    ``stdin`` if given."""
    completed = subprocess.run(
        [*tickwork_command(), *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        check=False,
    )
    return Command(completed.returncode, completed.stdout, completed.stderr)


@dataclass
class StandaloneProcess:
    """One running ``tickwork standalone`` and how to talk to it."""

    process: subprocess.Popen[bytes]
    endpoint: str
    state_dir: Path
    output_path: Path
    token: str | None = None
    environ: dict[str, str] = field(default_factory=dict)

    def output(self) -> str:
        """What the process printed so far."""
        return self.output_path.read_text(encoding="utf-8", errors="replace")

    def tickwork(
        self,
        *args: str,
        token: str | None = None,
        endpoint: str | None = None,
        cwd: Path | None = None,
        stdin: str | None = None,
    ) -> Command:
        """Run a ``tickwork`` client command against this process (bounded), in ``cwd``,
        reading ``stdin``."""
        environ = client_environment(endpoint or self.endpoint, token or self.token)
        return run_tickwork(*args, env=environ, cwd=cwd, stdin=stdin)

    def get(self, path: str) -> Any:
        """GET an API path as JSON (with the token, if any)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        response = httpx.get(self.endpoint + path, headers=headers, timeout=10.0)
        response.raise_for_status()
        return response.json()

    def stop(self, timeout_seconds: float = STOP_TIMEOUT_SECONDS) -> int:
        """SIGTERM, then the exit status; SIGKILL if it does not exit within the bound."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"standalone did not exit {timeout_seconds}s after SIGTERM:\n{self.output()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL the process and every process it started."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)


def start_standalone(
    state_dir: Path,
    *args: str,
    environ: Mapping[str, str] | None = None,
    tickwork: Sequence[str] | None = None,
) -> StandaloneProcess:
    """Start ``tickwork standalone`` (of the ``tickwork`` command given, else this tree's) on
    a free port; does not wait for it."""
    port = find_free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    output_path = state_dir.parent / f"{state_dir.name}.out"
    env = {**environment(), **(environ or {})}
    command = [*(tickwork or tickwork_command()), "standalone", "--state-dir", str(state_dir)]
    command += ["--bind", f"127.0.0.1:{port}", *args]
    with output_path.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    token = env.get("TICKWORK_API_TOKENS", "").partition(":")[2].split(",")[0] or None
    return StandaloneProcess(
        process, f"http://127.0.0.1:{port}", state_dir, output_path, token, dict(env)
    )


def wait_ready(
    standalone: StandaloneProcess, timeout_seconds: float = READY_TIMEOUT_SECONDS
) -> None:
    """Wait until ``/readyz`` answers 200; fail with the process's output otherwise."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if standalone.process.poll() is not None:
            raise AssertionError(f"standalone exited early:\n{standalone.output()}")
        try:
            if httpx.get(standalone.endpoint + "/readyz", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"standalone not ready in {timeout_seconds}s:\n{standalone.output()}")


@contextmanager
def running_standalone(
    state_dir: Path,
    *args: str,
    environ: Mapping[str, str] | None = None,
    tickwork: Sequence[str] | None = None,
) -> Iterator[StandaloneProcess]:
    """A ready ``tickwork standalone``, killed however the test ends."""
    standalone = start_standalone(state_dir, *args, environ=environ, tickwork=tickwork)
    try:
        wait_ready(standalone)
        yield standalone
    finally:
        standalone.kill()


def wait_for_attempt(
    standalone: StandaloneProcess, attempt_id: str, timeout_seconds: float = 30.0
) -> dict[str, Any]:
    """Poll an attempt until it ends; fail naming it (and the server's output) otherwise."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        attempt: dict[str, Any] = standalone.get(f"/api/attempts/{attempt_id}")
        if attempt["state"] in ("success", "error", "killed", "canceled"):
            return attempt
        time.sleep(0.1)
    raise AssertionError(
        f"attempt {attempt_id} did not end in {timeout_seconds}s:\n{standalone.output()}"
    )


@contextmanager
def running_api(
    database_url: str, output_dir: Path, environ: Mapping[str, str] | None = None
) -> Iterator[StandaloneProcess]:
    """A ready ``tickwork api`` (one worker) serving ``database_url`` on a free port, for
    the client commands to ask, without tokens (it listens on the loopback only) unless
    ``environ`` sets them; killed however the test ends. It runs no scheduler or executor:
    the store changes only as the commands ask."""
    port = find_free_port()
    output_dir.mkdir(parents=True, exist_ok=True)
    output_path = output_dir / "api.out"
    env = {**environment(database_url), "TICKWORK_API_AUTH": "off", **(environ or {})}
    command = [*tickwork_command(), "api", "--bind", f"127.0.0.1:{port}", "--workers", "1"]
    with output_path.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    api = StandaloneProcess(process, f"http://127.0.0.1:{port}", output_dir, output_path)
    try:
        wait_ready(api)
        yield api
    finally:
        api.kill()


@contextmanager
def serving_local_store(state_dir: Path, secret_key: str) -> Iterator[StandaloneProcess]:
    """``tickwork standalone --state-dir`` on a local project's state directory (the store
    ``tickwork run`` keeps there), with the secret key: how a user sets that project's
    secrets. It is stopped (SIGTERM) before the block's end lets ``tickwork run`` use the
    store."""
    with running_standalone(state_dir, environ={"TICKWORK_SECRET_KEY": secret_key}) as server:
        yield server
        assert server.stop() == 0, server.output()
