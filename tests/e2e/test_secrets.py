"""Secrets end to end: ``tickwork secrets`` through the API serving a local project's store,
``${secret:name}`` in ``sh>``,
``_env`` and ``http>`` headers under ``tickwork run`` with every value masked in the logs,
refusal anywhere else, and a distributed run whose agent decrypts without the database and
whose Redis message holds no clear value."""

from __future__ import annotations

import base64
import http.server
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis
from sqlalchemy import select

from tests.e2e._run import Project
from tests.e2e._standalone import serving_local_store
from tests.fault._cluster import Cluster
from tests.support.servers import serve_http
from tests.support.stored_logs import sqlite_url, stored_runs
from tests.support.waiting import wait_until
from tickwork.shared.clock import utc_now
from tickwork.shared.secrets import SecretBox
from tickwork.shared.store import secrets as secret_store
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.tables import secrets

pytestmark = pytest.mark.e2e

KEY = "a passphrase long enough for tests"
VALUE = "s3cr3t-Value-42"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.empty(tmp_path)


class _Headers(http.server.BaseHTTPRequestHandler):
    """Answers 200 and remembers the headers of every request."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    _Headers.seen = []
    with serve_http(_Headers) as url:
        yield url


def set_secret(project: Project, name: str, value: str) -> None:
    """``tickwork secrets set --create-project`` for the local project, through a
    ``tickwork standalone`` on its state directory."""
    with serving_local_store(project.state_dir, KEY) as server:
        done = server.tickwork("secrets", "set", "--create-project", "project", name, stdin=value)
        assert done.exit_code == 0, done.explain()


def test_set_list_delete_through_the_api_on_the_local_store(project: Project) -> None:
    with serving_local_store(project.state_dir, KEY) as server:
        # Given no project yet: set without --create-project is not found, with it is set
        missing = server.tickwork("secrets", "set", "project", "token", stdin=VALUE + "\n")
        assert missing.exit_code == 3, missing.explain()
        assert missing.stderr == (
            "error: project 'project' does not exist (--create-project creates it)\n"
        ), missing.explain()
        created = server.tickwork(
            "secrets", "set", "--create-project", "project", "token", stdin=VALUE + "\n"
        )
        assert created.exit_code == 0, created.explain()
        assert created.stdout == "project: secret token set\n"
        listed = server.tickwork("secrets", "list", "project", "--json")
        assert '"name": "token"' in listed.stdout and VALUE not in listed.stdout
        deleted = server.tickwork("secrets", "delete", "project", "token")
        assert deleted.exit_code == 0, deleted.explain()
        assert server.tickwork("secrets", "list", "project", "--json").stdout.strip() == ""
        gone = server.tickwork("secrets", "delete", "project", "token")
        assert gone.exit_code != 0 and "has no secret 'token'" in gone.stderr, gone.explain()
        # And the value set went through the API, encrypted with the server's key
        server.tickwork("secrets", "set", "project", "token", stdin=VALUE)
    engine = create_store_engine(sqlite_url(project.state_dir))
    try:
        with engine.connect() as conn:
            stored = conn.execute(select(secrets.c.value_encrypted)).scalar_one()
    finally:
        engine.dispose()
    assert SecretBox(KEY).decrypt(stored) == VALUE


def test_a_secret_in_sh_and_env_reaches_the_command_and_is_masked_in_the_log(
    project: Project,
) -> None:
    set_secret(project, "token", VALUE)
    project.write(
        "wf.dig",
        """\
        +use:
          sh>: echo "arg ${secret:token}" && echo "env $TOKEN" && echo -n "$TOKEN" > seen.txt
          _env:
            TOKEN: ${secret:token}
        """,
    )
    run = project.run("wf.dig", env={"TICKWORK_SECRET_KEY": KEY})
    assert run.exit_code == 0, run.explain()
    assert project.read("seen.txt") == VALUE
    assert ("+wf+use", "arg ***") in run.output() and ("+wf+use", "env ***") in run.output()
    logs = "".join(r.text for r in stored_runs(sqlite_url(project.state_dir)))
    assert "arg ***" in logs and VALUE not in logs
    assert VALUE not in run.stdout + run.stderr


def test_a_missing_secret_fails_the_task_naming_it(project: Project) -> None:
    project.write("wf.dig", "+use:\n  sh>: echo ${secret:nope}\n")
    run = project.run("wf.dig", env={"TICKWORK_SECRET_KEY": KEY})
    assert run.exit_code == 1
    assert "secret 'nope' is not set for this project" in run.stdout


def test_a_secret_elsewhere_is_refused_at_its_line(project: Project) -> None:
    project.write("wf.dig", "+a:\n  echo>: hi\n+b:\n  echo>: ${secret:token}\n")
    run = project.run("wf.dig")
    assert run.exit_code == 2
    assert "wf.dig:4: '${secret:token}': secrets may be used only in sh>, http>" in run.stderr


def test_a_secret_in_an_http_header_is_sent(project: Project, http_server: str) -> None:
    set_secret(project, "api_key", VALUE)
    project.write(
        "wf.dig",
        f"""\
        +call:
          http>: {http_server}/ok
          headers:
            X-Api-Key: ${{secret:api_key}}
        """,
    )
    run = project.run("wf.dig", env={"TICKWORK_SECRET_KEY": KEY})
    assert run.exit_code == 0, run.explain()
    assert [headers["X-Api-Key"] for headers in _Headers.seen] == [VALUE]


def _envelope_text(raw: bytes) -> str:
    """A queued Celery message with its (base64) body decoded."""
    text = raw.decode("utf-8", "replace")
    try:
        envelope = json.loads(text)
        return text + base64.b64decode(envelope["body"]).decode("utf-8", "replace")
    except (ValueError, KeyError, TypeError):
        return text


def _redis_text(url: str, prefix: str) -> str:
    """Every value under ``prefix`` in Redis, as text (queues, streams, strings)."""
    client = redis.Redis.from_url(url)
    texts: list[str] = []
    for key in client.scan_iter(match=f"{prefix}*"):
        kind = client.type(key).decode()
        if kind == "list":
            texts += [_envelope_text(v) for v in client.lrange(key, 0, -1)]
        elif kind == "string":
            texts.append(client.get(key).decode("utf-8", "replace"))  # type: ignore[union-attr]
        elif kind == "stream":
            texts += [str(entry) for entry in client.xrange(key)]
    client.close()
    return "\n".join(texts)


@pytest.mark.timeout(90)
def test_a_distributed_agent_decrypts_without_the_database_and_redis_never_holds_the_value(
    cluster: Cluster,
) -> None:

    # Given a project with a secret, and an executor without the key running its attempt
    seen = cluster.project_dir / "seen.txt"
    text = f'+use:\n  sh>: echo "got ${{secret:token}}" && echo -n ${{secret:token}} > {seen}\n'
    with cluster.engine.begin() as conn:
        encrypted = SecretBox(KEY).encrypt(VALUE)
        secret_store.set_secret(conn, "project", "token", encrypted, utc_now(), create_project=True)
    cluster.start_executor()
    attempt_id = cluster.submit("wf", text)
    # When the executor queues the task before any agent runs
    wait_until(
        "the task message is queued",
        lambda: '"secrets"' in _redis_text(cluster.redis_url, cluster.redis_prefix),
        timeout_seconds=30,
    )
    # Then the message carries the ciphertext only
    queued = _redis_text(cluster.redis_url, cluster.redis_prefix)
    assert VALUE not in queued
    # And an agent with the key but no database URL runs it with the value, logging ***
    cluster.start_agent("agent-a", env={"TICKWORK_SECRET_KEY": KEY})
    assert cluster.wait_for_attempt_end(attempt_id, timeout_seconds=60) == "success"
    assert seen.read_text() == VALUE
    assert VALUE not in _redis_text(cluster.redis_url, cluster.redis_prefix)
    stored = "".join(r.text for r in stored_runs(cluster.database_url, attempt_id))
    assert "got ***" in stored and VALUE not in stored
