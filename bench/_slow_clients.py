"""Clients that hold an API server's connections: silent, slow and streaming ones.

Each client runs in a background asyncio loop (its own thread) and starts over when the
server drops it, as a hostile or broken client would. Kinds:

- ``idle``: connects and sends nothing;
- ``partial``: sends half a header block, then nothing;
- ``no_body``: sends a whole POST header block with ``Content-Length`` and never the body;
- ``follow``: opens a log follow stream (``GET /api/logs/<attempt>/follow``) and reads it.

For the silent kinds it records how long the server held each connection before it
closed it; for ``follow``, how many streams are open (their 200 status line came).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

CONNECT_TIMEOUT_SECONDS = 10.0
RECONNECT_PAUSE_SECONDS = 0.05
SILENT_KINDS = ("idle", "partial", "no_body")


@dataclass
class Held:
    """What the clients of one kind saw."""

    open_now: int = 0  # connections (or, for follow, streams answered 200) open now
    failed: int = 0  # connections refused or answered with something else than expected
    held_seconds: list[float] = field(default_factory=list)  # until the server closed them


def request_bytes(kind: str, host: str, token: str, follow_path: str) -> bytes:
    """What a client of ``kind`` sends, before it falls silent."""
    if kind == "idle":
        return b""
    if kind == "partial":
        return f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nUser-Agent: slow".encode()
    if kind == "no_body":
        return (
            f"POST /api/attempts HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        ).encode()
    return (
        f"GET {follow_path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


class SlowClients:
    """``counts[kind]`` clients of each kind against ``host:port``, until :meth:`stop`."""

    def __init__(
        self, host: str, port: int, token: str, follow_path: str, counts: dict[str, int]
    ) -> None:
        self.host, self.port, self.token, self.follow_path = host, port, token, follow_path
        self.counts = counts
        self.held = {kind: Held() for kind in counts}
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        tasks = [
            asyncio.create_task(self._client(kind))
            for kind, count in self.counts.items()
            for _ in range(count)
        ]
        await self._stopping.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, kind: str) -> None:
        held = self.held[kind]
        payload = request_bytes(kind, f"{self.host}:{self.port}", self.token, self.follow_path)
        while True:
            try:
                connect = asyncio.open_connection(self.host, self.port)
                reader, writer = await asyncio.wait_for(connect, CONNECT_TIMEOUT_SECONDS)
            except (OSError, TimeoutError):
                held.failed += 1
                await asyncio.sleep(1.0)
                continue
            try:
                await self._hold(kind, held, reader, writer, payload)
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            await asyncio.sleep(RECONNECT_PAUSE_SECONDS)

    async def _hold(
        self,
        kind: str,
        held: Held,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        payload: bytes,
    ) -> None:
        opened = time.perf_counter()
        if payload:
            writer.write(payload)
            await writer.drain()
        if kind == "follow":
            status = await reader.readline()
            if b" 200 " not in status:
                held.failed += 1
                return
        held.open_now += 1
        try:
            while await reader.read(65536):  # until the server closes the connection
                pass
        finally:
            held.open_now -= 1
        if kind in SILENT_KINDS:
            held.held_seconds.append(time.perf_counter() - opened)


def split_connections(total: int, kinds: Sequence[str] = SILENT_KINDS) -> dict[str, int]:
    """``total`` connections shared as evenly as can be between ``kinds``."""
    share, extra = divmod(total, len(kinds))
    return {kind: share + (1 if index < extra else 0) for index, kind in enumerate(kinds)}
