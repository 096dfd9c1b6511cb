"""The task side of bench/logs.py: writes a realistic text log of an exact size, or a
timestamped line at a steady pace; the benchmark imports it to know what was written.

Run by a task (standard library only, any ``python3``):

- ``python3 _log_text.py big BYTES``: a line ``start <epoch seconds>``, then
  :func:`log_body` (service-log lines drawn from a fixed seed, so every run writes the
  same bytes), then ``end <epoch seconds>``: exactly ``BYTES`` bytes in all;
- ``python3 _log_text.py ticks SETTLE_S EVERY_S SECONDS``: waits ``SETTLE_S`` seconds,
  then writes ``tick <n> <epoch seconds>`` every ``EVERY_S`` seconds for ``SECONDS``
  seconds, each line flushed as it is written.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterator

SEED = 20261206
MARK_WIDTH = 24
"""``start`` and ``end`` lines: the word, a space and the time padded to this width."""
_LEVELS = ("INFO",) * 12 + ("DEBUG",) * 5 + ("WARN",) * 2 + ("ERROR",)
_TABLES = ("orders", "customers", "events", "payments", "sessions", "inventory")
_PATHS = ("/api/v1/orders", "/api/v1/items", "/api/v1/customers", "/healthz", "/api/v1/search")


def mark_line(word: str, seconds: float) -> bytes:
    """``<word> <seconds>`` as one line of a fixed width."""
    return f"{word} {seconds:>{MARK_WIDTH}.6f}\n".encode()


def mark_bytes() -> int:
    """The length of the ``start`` line plus the ``end`` line."""
    return len(mark_line("start", 0.0)) + len(mark_line("end", 0.0))


def _message(rng: random.Random, level: str) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        table = rng.choice(_TABLES)
        part = rng.randrange(4096)
        return (
            f"loaded batch {rng.randrange(10**6)} from s3://warehouse-raw/{table}/"
            f"part-{part:05d}.parquet rows={rng.randrange(1, 50_000)} "
            f"bytes={rng.randrange(10**4, 10**8)}"
        )
    if kind == 1:
        return (
            f"http {rng.choice(('GET', 'GET', 'GET', 'POST'))} {rng.choice(_PATHS)}"
            f"/{rng.randrange(10**7)} status={rng.choice((200, 200, 200, 201, 404, 500))} "
            f"duration_ms={rng.random() * 250:.1f}"
        )
    if kind == 2:
        return (
            f"commit offset={rng.randrange(10**9)} partition={rng.randrange(32)} "
            f"lag_ms={rng.randrange(2000)} topic={rng.choice(_TABLES)}-changes"
        )
    if kind == 3 and level in ("WARN", "ERROR"):
        return (
            f"retrying request_id={rng.getrandbits(128):032x} attempt={rng.randrange(1, 6)} "
            f"reason=connection reset by peer"
        )
    return (
        f"upserted {rng.randrange(1, 5000)} rows into {rng.choice(_TABLES)}_daily "
        f"(session {rng.randrange(2020, 2027)}-{rng.randrange(1, 13):02d}-"
        f"{rng.randrange(1, 29):02d}) in {rng.random() * 3:.3f} s"
    )


def log_body(size: int) -> Iterator[bytes]:
    """``size`` bytes of service-log text in blocks, the same for every run; the last line
    is cut to fit and ends with a newline."""
    rng = random.Random(SEED)
    clock_us = 8 * 3600 * 10**6
    left = size
    while left > 0:
        lines = []
        for _ in range(1000):
            clock_us += rng.randrange(50, 5000)
            seconds, micros = divmod(clock_us, 10**6)
            minutes, second = divmod(seconds, 60)
            level = rng.choice(_LEVELS)
            lines.append(
                f"2026-12-06T{minutes // 60 % 24:02d}:{minutes % 60:02d}:{second:02d}."
                f"{micros:06d}Z {level:<5} [worker-{rng.randrange(16)}] "
                f"{_message(rng, level)}\n"
            )
        block = "".join(lines).encode()
        if len(block) >= left:
            block = block[: left - 1] + b"\n"
        left -= len(block)
        yield block


def write_big(size: int) -> None:
    """The ``big`` log: ``start``, the body and ``end``, ``size`` bytes in all."""
    out = sys.stdout.buffer
    out.write(mark_line("start", time.time()))
    for block in log_body(size - mark_bytes()):
        out.write(block)
    out.write(mark_line("end", time.time()))
    out.flush()


def write_ticks(settle_seconds: float, every_seconds: float, seconds: float) -> None:
    """The ``ticks`` log: a flushed ``tick <n> <time>`` line every ``every_seconds``."""
    time.sleep(settle_seconds)
    started = time.monotonic()
    for number in range(int(seconds / every_seconds)):
        time.sleep(max(0.0, started + number * every_seconds - time.monotonic()))
        sys.stdout.write(f"tick {number} {time.time():.6f}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "big":
        write_big(int(sys.argv[2]))
    else:
        write_ticks(float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
