"""Find or start the PostgreSQL and Redis servers the tests run against, with bounded waits.

Nothing here waits without a limit: reachability checks run with socket or process
timeouts, and a throwaway server that does not come up in time is an error, not a hang.
"""

from __future__ import annotations

import contextlib
import glob
import http.server
import os
import pwd
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from tickwork.shared.store.engine import libpq_url

POSTGRES_CONNECT_TIMEOUT_SECONDS = 3
POSTGRES_START_TIMEOUT_SECONDS = 30
REDIS_START_TIMEOUT_SECONDS = 10
SOCKET_TIMEOUT_SECONDS = 3.0

# Runs in a child process so that nothing in the driver (DNS, SSL, a server that
# accepts but never answers) can hang the test session: the parent kills it on timeout.
_POSTGRES_CHECK = """
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=int(sys.argv[2])) as conn:
    conn.execute("SELECT 1")
"""


class ServerUnavailable(Exception):
    """Raised when a test server is neither reachable nor startable from local binaries."""


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- PostgreSQL ------------------------------------------------------------------------


def libpq_conninfo(sqlalchemy_url: str) -> str:
    """Turn `postgresql+psycopg://...` into the `postgresql://...` URI libpq accepts."""
    return libpq_url(sqlalchemy_url)


def with_database(sqlalchemy_url: str, database: str) -> str:
    """Return the same server URL pointing at another database."""
    return make_url(sqlalchemy_url).set(database=database).render_as_string(hide_password=False)


def postgres_is_reachable(
    sqlalchemy_url: str, timeout_seconds: int = POSTGRES_CONNECT_TIMEOUT_SECONDS
) -> bool:
    """Tell whether a psycopg connection to the URL succeeds within the timeout."""
    timeout = str(timeout_seconds)
    try:
        completed = subprocess.run(
            [sys.executable, "-c", _POSTGRES_CHECK, libpq_conninfo(sqlalchemy_url), timeout],
            capture_output=True,
            timeout=timeout_seconds + 10,  # interpreter start-up and psycopg import
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return completed.returncode == 0


@contextlib.contextmanager
def throwaway_postgres_database(server_url: str, template: str | None = None) -> Iterator[str]:
    """Create a database `tickwork_test_<hex>`, yield its URL, then drop it.

    It is empty, or a copy of the database ``template`` (which nobody may be connected to
    meanwhile). The drop is forced, so connections a test left open do not keep it alive.
    """
    name = create_postgres_database(server_url, template)
    try:
        yield with_database(server_url, name)
    finally:
        drop_postgres_database(server_url, name)


def create_postgres_database(server_url: str, template: str | None = None) -> str:
    """Create a database `tickwork_test_<hex>` (empty, or a copy of ``template``, to which
    nobody may be connected meanwhile); its name."""
    name = f"tickwork_test_{secrets.token_hex(6)}"
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
    with psycopg.connect(libpq_conninfo(server_url), autocommit=True, connect_timeout=3) as conn:
        conn.execute(create)
    return name


@contextlib.contextmanager
def postgres_template_database(server_url: str, prepare: Callable[[str], None]) -> Iterator[str]:
    """Create a database `tickwork_tpl_<hex>`, call ``prepare(url)`` on it (which must close
    every connection it opened), yield its name for :func:`throwaway_postgres_database`'s
    ``template``, then drop it.

    Copying a prepared template is a file copy on the server: much cheaper than preparing
    each test's database again (running every migration, say).
    """
    name = f"tickwork_tpl_{secrets.token_hex(6)}"
    with psycopg.connect(libpq_conninfo(server_url), autocommit=True, connect_timeout=3) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        prepare(with_database(server_url, name))
        yield name
    finally:
        drop_postgres_database(server_url, name)


def drop_postgres_database(server_url: str, name: str) -> None:
    """Drop the database ``name`` if it exists, closing any connection left to it."""
    with psycopg.connect(libpq_conninfo(server_url), autocommit=True, connect_timeout=3) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def postgres_database_exists(server_url: str, name: str) -> bool:
    """Tell whether the server behind server_url has a database called name."""
    with psycopg.connect(libpq_conninfo(server_url), connect_timeout=3) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


def find_postgres_binaries() -> Path | None:
    """Return the directory holding initdb and pg_ctl (PATH first, then Debian's layout)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl and Path(initdb).parent == Path(pg_ctl).parent:
        return Path(initdb).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: [int(p) if p.isdigit() else 0 for p in Path(path).parent.name.split(".")],
        reverse=True,
    )
    for candidate in candidates:
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


@dataclass
class ThrowawayPostgres:
    """A PostgreSQL cluster in a temporary directory, on a free port, removed by stop()."""

    bin_dir: Path
    root: Path
    port: int
    run_as: str | None  # initdb and postgres refuse to run as root: switch to this user

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, bin_dir: Path) -> ThrowawayPostgres:
        """initdb (trust auth, superuser `postgres`) and start a cluster; raise on failure."""
        run_as = _postgres_os_user() if os.geteuid() == 0 else None
        root = Path(tempfile.mkdtemp(prefix="tickwork-pg-"))
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        server = cls(bin_dir=bin_dir, root=root, port=find_free_port(), run_as=run_as)
        try:
            server._initdb()
            server._pg_ctl_start()
        except BaseException:
            server.stop()
            raise
        return server

    def _run(self, args: list[str], timeout_seconds: float) -> None:
        command = args if self.run_as is None else ["runuser", "-u", self.run_as, "--", *args]
        try:
            completed = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout_seconds,
                check=False,
                cwd=self.root,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServerUnavailable(f"{args[0]} did not finish in {timeout_seconds}s") from exc
        if completed.returncode != 0:
            raise ServerUnavailable(
                f"{' '.join(args)} failed ({completed.returncode}):\n"
                f"{completed.stdout}{completed.stderr}{self._log_tail()}"
            )

    def _initdb(self) -> None:
        flags = "--username=postgres --auth=trust --encoding=UTF8 --locale=C --no-sync"
        self._run(
            [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), *flags.split()],
            timeout_seconds=POSTGRES_START_TIMEOUT_SECONDS,
        )

    def _pg_ctl_start(self) -> None:
        # -F: no fsync; the unix socket lives in the temp dir so no system dir is needed.
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -F"
        log = str(self.root / "postgres.log")
        wait = ["-w", "-t", str(POSTGRES_START_TIMEOUT_SECONDS)]
        self._run(
            [*self._pg_ctl(), "-l", log, "-o", options, *wait, "start"],
            timeout_seconds=POSTGRES_START_TIMEOUT_SECONDS + 5,
        )

    def _pg_ctl(self) -> list[str]:
        return [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir)]

    def stop(self) -> None:
        """Stop the server (immediate mode, then SIGKILL if needed) and delete its files."""
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(ServerUnavailable):
                self._run(
                    [*self._pg_ctl(), "-m", "immediate", "-w", "-t", "10", "stop"],
                    timeout_seconds=15,
                )
            self._kill_leftover_postmaster()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover_postmaster(self) -> None:
        pid_file = self.data_dir / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, signal.SIGKILL)

    def _log_tail(self) -> str:
        log = self.root / "postgres.log"
        if not log.exists():
            return ""
        return "\n--- postgres.log ---\n" + "\n".join(log.read_text().splitlines()[-20:])


def _postgres_os_user() -> str:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise ServerUnavailable("running as root and no 'postgres' OS user exists to run initdb")


# --- Redis -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisAddress:
    """Where a Redis URL points: host, port, database number and optional password."""

    host: str
    port: int
    db: int
    password: str | None

    @classmethod
    def from_url(cls, url: str) -> RedisAddress:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"only redis:// URLs are supported, got {url!r}")
        path = parts.path.lstrip("/")
        password = unquote(parts.password) if parts.password else None
        return cls(parts.hostname or "127.0.0.1", parts.port or 6379, int(path or 0), password)


RespValue = str | int | bytes | list["RespValue"] | None


class RespError(Exception):
    """Raised when Redis answers a command with an error reply."""


class RespClient:
    """A tiny blocking RESP2 client: enough to PING, SCAN and DEL in tests."""

    def __init__(
        self,
        address: RedisAddress,
        timeout_seconds: float = SOCKET_TIMEOUT_SECONDS,
        tls: ssl.SSLContext | None = None,
    ):
        sock = socket.create_connection((address.host, address.port), timeout=timeout_seconds)
        self._sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=address.host)
        self._reader = self._sock.makefile("rb")
        if address.password is not None:
            self.command("AUTH", address.password)
        if address.db:
            self.command("SELECT", str(address.db))

    def __enter__(self) -> RespClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._reader.close()
        self._sock.close()

    def command(self, *args: str | bytes) -> RespValue:
        """Send one command and return its decoded reply; raise RespError on an error reply."""
        encoded = [arg.encode() if isinstance(arg, str) else arg for arg in args]
        frame = b"*%d\r\n" % len(encoded) + b"".join(
            b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in encoded
        )
        self._sock.sendall(frame)
        return self._read_reply()

    def _read_reply(self) -> RespValue:
        line = self._reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by Redis")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body.decode()
        if kind == b"-":
            raise RespError(body.decode())
        if kind == b":":
            return int(body)
        if kind == b"$":
            length = int(body)
            return None if length < 0 else self._reader.read(length + 2)[:-2]
        if kind == b"*":
            count = int(body)
            return None if count < 0 else [self._read_reply() for _ in range(count)]
        raise ConnectionError(f"unexpected reply from Redis: {line!r}")

    def delete_keys_with_prefix(self, prefix: str) -> int:
        """Delete every key starting with prefix (SCAN, so safe on a shared server)."""
        deleted, cursor = 0, "0"
        while True:
            pattern = _glob_escape(prefix) + "*"
            reply = self.command("SCAN", cursor, "MATCH", pattern, "COUNT", "500")
            assert isinstance(reply, list) and len(reply) == 2
            next_cursor, keys = reply
            assert isinstance(next_cursor, bytes) and isinstance(keys, list)
            if keys:
                count = self.command("DEL", *(k for k in keys if isinstance(k, bytes)))
                deleted += count if isinstance(count, int) else 0
            cursor = next_cursor.decode()
            if cursor == "0":
                return deleted


def _glob_escape(text: str) -> str:
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def redis_answers_ping(
    url: str, timeout_seconds: float = SOCKET_TIMEOUT_SECONDS, tls: ssl.SSLContext | None = None
) -> bool:
    """Tell whether the Redis at url answers PING (after AUTH/SELECT) within the timeout."""
    try:
        with RespClient(RedisAddress.from_url(url), timeout_seconds, tls) as client:
            return client.command("PING") == "PONG"
    except (OSError, RespError, ConnectionError):
        return False


@dataclass
class ThrowawayRedis:
    """A redis-server child process on a free port, with persistence off."""

    process: subprocess.Popen[bytes]
    root: Path
    port: int
    password: str | None = None
    tls: ssl.SSLContext | None = None  # a client's context, when the port speaks TLS

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self, timeout_seconds: float = SOCKET_TIMEOUT_SECONDS) -> RespClient:
        return RespClient(RedisAddress.from_url(self.url), timeout_seconds, self.tls)

    @classmethod
    def start(
        cls,
        binary: str,
        port: int | None = None,
        *,
        root: Path | None = None,
        extra_args: Sequence[str] = (),
        config_file: Path | None = None,
        sentinel: bool = False,
        password: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> ThrowawayRedis:
        """Start redis-server (on ``port``, default a free one) and wait (bounded) until it
        answers PING; raise on failure. It runs in ``root`` (created unless it exists; by
        default a new temporary directory), which :meth:`stop` deletes. ``config_file``
        comes first on its command line, ``extra_args`` last; ``sentinel`` runs it as a
        sentinel (whose ``config_file`` it rewrites). ``password`` and ``tls`` (a client's
        context, for a port that speaks TLS only) are how it is reached; the arguments
        that make it so are the caller's."""
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="tickwork-redis-"))
        else:
            root.mkdir(parents=True, exist_ok=True)
        port = port or find_free_port()
        log = (root / "redis.log").open("wb")
        settings = ["--bind", "127.0.0.1", "--daemonize", "no"]
        if sentinel:
            settings.append("--sentinel")
        else:
            settings += ["--save", "", "--appendonly", "no"]
        config = [str(config_file)] if config_file is not None else []
        ports = ["--port", "0", "--tls-port", str(port)] if tls else ["--port", str(port)]
        process = subprocess.Popen(
            [binary, *config, *ports, *settings, *extra_args],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        server = cls(process=process, root=root, port=port, password=password, tls=tls)
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if redis_answers_ping(server.url, timeout_seconds=0.5, tls=tls):
                return server
            time.sleep(0.05)
        output = (root / "redis.log").read_text(errors="replace")
        server.stop()
        raise ServerUnavailable(f"redis-server did not answer PING on port {port}:\n{output}")

    def stop(self) -> None:
        """Terminate the server (kill after 5 s) and delete its directory."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def serve_http(
    handler: type[http.server.BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
) -> Iterator[str]:
    """A real HTTP server on a free loopback port, answering with ``handler`` in threads
    until the block ends; its base URL (``http://127.0.0.1:PORT``, or ``https://`` with
    ``tls``, a server's context)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    scheme = "https" if tls is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
