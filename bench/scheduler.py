"""Scheduler emission on PostgreSQL: a 10,000-session minute burst among 100,000 schedules.

Four parts, one after another so that none disturbs another's timing:

(b) catch-up: one every-minute schedule pushed with ``schedule_from`` 3 days back (4,320
    due times, ``catchup_window: 7d``), emitted by ``Scheduler.tick()`` in this process;
(a) burst: 100,000 schedules of mixed forms and zones, 10,000 of them every minute, with
    a real ``tickwork scheduler`` subprocess on the database's clock. The lag of a session
    is the moment its transaction committed (seen by a ``LISTEN`` connection) minus its
    run time; the subprocess's peak RSS is its ``VmHWM``;
(c) baseline: APScheduler 3 with 100,000 cron jobs, 10,000 of them every minute, in a
    child process; its lag is a call's time minus its minute. Then again with the
    10,000 every-minute jobs alone;
(d) big burst: 100,000 every-minute schedules due together, in a database of their own,
    emitted by a ``tickwork scheduler`` subprocess and timed as (a) is.

Everything runs in a throwaway database on TICKWORK_BENCH_DATABASE_URL (default: the
local server), dropped at the end. Progress goes to stderr; the last stdout line is one
JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import psycopg
from _schedule_fleet import MINUTELY_PREFIX, arm_minutely, load_fleet, plan_fleet
from _stores import percentile, throwaway_database
from psycopg import sql
from rich.console import Console
from sqlalchemy import Engine, func, select, text

from tickwork.services.scheduler.loop import PREPARE_SECONDS, Scheduler
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store import emission as emission_store
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store.engine import create_store_engine, libpq_url
from tickwork.shared.store.tables import schedules, sessions

DEFAULT_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
TOTAL_SCHEDULES = 100_000
MINUTELY_SCHEDULES = 10_000
BIG_BURST_SCHEDULES = 100_000
CATCHUP_MINUTES = 3 * 24 * 60
BURST_LEAD_SECONDS = 5.0  # the burst minute is at least this far after the scheduler is up
BURST_TIMEOUT_SECONDS = 60.0
NOTIFY_CHANNEL = "tickwork_bench_commit"
BENCH_DIR = Path(__file__).resolve().parent

# Targets; see bench/README.md. The burst's is a ratio to APScheduler's in the same run.
TARGET_P99_LAG_RATIO_TO_APSCHEDULER = 0.5
TARGET_CATCHUP_SESSIONS_PER_S = 5000.0
TARGET_PEAK_RSS_MB = 500.0
TARGET_BIG_BURST_SECONDS = 10.0
CPU_LEAD_SECONDS = PREPARE_SECONDS + 1.0  # the CPU count starts this long before the burst


class BenchFailed(Exception):
    """A part did not emit what it should have, or a process misbehaved."""


@dataclass(frozen=True)
class BurstResult:
    """The every-minute burst: each session's lag, and the scheduler's peak memory."""

    lags_s: list[float]
    transactions: int  # that committed the burst's sessions
    peak_rss_mb: float
    clock_offset_s: float  # database clock minus this machine's, subtracted from lags
    cpu_seconds: float  # the scheduler process's CPU time over the burst (user + system)


@dataclass(frozen=True)
class CatchupResult:
    """How long the scheduler took to emit a 3-day backlog."""

    sessions: int
    seconds: float
    ticks: int


def database_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        found = emission_store.database_now(conn)
    assert found is not None
    return found


# --- (b) catch-up ------------------------------------------------------------------------

CATCHUP_WORKFLOW = 'schedule:\n  cron>: "* * * * *"\n  catchup_window: 7d\n+a:\n  echo>: hi\n'


def run_catchup(url: str) -> CatchupResult:
    """Push one every-minute workflow with ``schedule_from`` 3 days back; time its catch-up."""
    engine = create_store_engine(url)
    definition = parse_workflow_text(CATCHUP_WORKFLOW, "catchup.dig", Path("/tmp"))
    now = database_now(engine)
    newest = now.replace(second=0, microsecond=0)
    with engine.begin() as conn:
        project_id = project_store.ensure_project(conn, "catchup", now)
        revision_id = project_store.ensure_revision(conn, project_id, "r1", {}, now)
        definition_id = project_store.ensure_workflow_definition(conn, revision_id, definition)
        schedule_store.upsert_schedule(
            conn,
            project_id=project_id,
            definition_id=definition_id,
            definition=definition,
            now=now,
            schedule_from=newest - timedelta(minutes=CATCHUP_MINUTES - 1),
        )
    # Only the passes over due times: without a pass ahead, a tick that ends the backlog
    # near a minute boundary would also wait for that minute.
    scheduler = Scheduler(engine, prepare_seconds=0.0)
    emitted, ticks = 0, 0
    started = time.perf_counter()
    while True:  # as the runner does (tickwork.services.scheduler.main.run), without signals
        report = scheduler.tick()
        emitted, ticks = emitted + report.emitted, ticks + 1
        if emitted >= CATCHUP_MINUTES:
            break
        if report.emitted == 0:
            raise BenchFailed(f"catch-up stalled after {emitted} sessions")
        time.sleep(scheduler.seconds_until_due())
    seconds = time.perf_counter() - started
    with engine.begin() as conn:
        stored = conn.execute(select(func.count()).select_from(sessions)).scalar_one()
        # Out of the way of the burst: the workflow leaves the project.
        schedule_store.remove_schedules(conn, project_id, [definition.name], now)
    engine.dispose()
    if stored != emitted:
        raise BenchFailed(f"catch-up reported {emitted} sessions, {stored} stored")
    return CatchupResult(emitted, seconds, ticks)


# --- (a) the burst -----------------------------------------------------------------------


def install_commit_notifier(engine: Engine) -> None:
    """Each transaction that inserts sessions sends its id on NOTIFY_CHANNEL at commit.

    NOTIFY is delivered only when the transaction commits, so the listener sees the
    moment the sessions became visible; identical notifications in one transaction fold.
    Rows inserted under a savepoint carry the savepoint's own transaction id (``xmin``),
    so each notification names that of the statement's rows too: ``top:rows``.
    """
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION bench_notify_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "DECLARE rows_xid text; BEGIN "
                "SELECT s.xmin::text INTO rows_xid FROM sessions s "
                "WHERE s.id = (SELECT n.id FROM new_rows n LIMIT 1); "
                f"PERFORM pg_notify('{NOTIFY_CHANNEL}', "
                "(txid_current() % 4294967296)::text || ':' || coalesce(rows_xid, '')); "
                "RETURN NULL; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER bench_sessions_committed AFTER INSERT ON sessions "
                "REFERENCING NEW TABLE AS new_rows "
                "FOR EACH STATEMENT EXECUTE FUNCTION bench_notify_commit()"
            )
        )


class CommitListener:
    """Records, by transaction id, when each session-inserting transaction committed."""

    def __init__(self, url: str) -> None:
        self.url = libpq_url(url)
        self.committed_at: dict[int, float] = {}
        self.transaction_of: dict[int, int] = {}  # a savepoint's id: its transaction's
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="commit-listener", daemon=True)

    def __enter__(self) -> CommitListener:
        self._thread.start()
        if not self._ready.wait(10):
            raise BenchFailed("the commit listener did not start")
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _listen(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
            self._ready.set()
            while not self._stop.is_set():
                for note in conn.notifies(timeout=0.2):
                    at = time.time()
                    top, _, rows = note.payload.partition(":")
                    self.committed_at.setdefault(int(top), at)
                    if rows:
                        self.transaction_of[int(rows)] = int(top)


def clock_offset_seconds(engine: Engine) -> float:
    """The database's clock minus this machine's, from the quickest of a few round trips."""
    samples = []
    with engine.connect() as conn:
        for _ in range(7):
            before = time.time()
            found = conn.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one()
            after = time.time()
            samples.append((after - before, float(found) - (before + after) / 2))
    return min(samples)[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_scheduler(url: str, metrics_port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``tickwork scheduler`` as a subprocess; returns once it has finished a tick."""
    command = [str(Path(sys.executable).with_name("tickwork")), "scheduler", "--database-url", url]
    env = {**os.environ, "TICKWORK_METRICS_PORT": str(metrics_port), "TICKWORK_LOG_LEVEL": "INFO"}
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchFailed(f"tickwork scheduler exited with status {process.returncode}")
        if _ticks_done(metrics_port) > 0:
            return process
        time.sleep(0.2)
    process.kill()
    raise BenchFailed("tickwork scheduler did not finish a tick within 60 s")


def _ticks_done(metrics_port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as page:
            body = page.read().decode()
    except OSError:
        return 0.0
    for line in body.splitlines():
        if line.startswith("tickwork_scheduler_tick_duration_seconds_count"):
            return float(line.split()[-1])
    return 0.0


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident memory (``VmHWM``), in MB.

    Not ``ru_maxrss`` from ``wait4``: Linux counts in it the memory of the process that
    forked the child (this one, holding the whole fleet), as the child had it before exec.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise BenchFailed(f"no VmHWM in /proc/{pid}/status")


def stop_scheduler(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the scheduler and wait for it to exit."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise BenchFailed("tickwork scheduler did not stop within 30 s of SIGTERM") from None


def next_boundary(engine: Engine, lead_seconds: float) -> datetime:
    """The first minute boundary at least ``lead_seconds`` from now (database clock)."""
    earliest = database_now(engine) + timedelta(seconds=lead_seconds)
    boundary = earliest.replace(second=0, microsecond=0)
    return boundary if boundary >= earliest else boundary + timedelta(minutes=1)


def wait_for_burst(
    engine: Engine, boundary: datetime, offset: float, minutely: int, err: Console
) -> None:
    """Sleep past the boundary, then poll (once a second) until every minutely session exists."""
    time.sleep(max(0.0, boundary.timestamp() - offset - time.time() + BURST_LEAD_SECONDS))
    query = (
        select(func.count())
        .select_from(sessions.join(schedules))
        .where(
            sessions.c.session_time == boundary,
            schedules.c.workflow_name.startswith(MINUTELY_PREFIX),
        )
    )
    deadline = time.monotonic() + BURST_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            emitted = conn.execute(query).scalar_one()
        if emitted >= minutely:
            return
        err.print(f"  {emitted:,} of {minutely:,} burst sessions so far", highlight=False)
        time.sleep(1.0)
    raise BenchFailed(f"only {emitted} of {minutely} burst sessions were emitted")


def burst_lags(
    engine: Engine, boundary: datetime, listener: CommitListener, offset: float
) -> tuple[list[float], int]:
    """Commit time minus run time of every session whose run time is the boundary, and
    how many transactions committed them."""
    query = text(
        "SELECT sessions.xmin::text::bigint AS xid, sessions.session_time, schedules.spec "
        "FROM sessions JOIN schedules ON schedules.id = sessions.schedule_id "
        "WHERE sessions.session_time > :since"
    )
    since = boundary - timedelta(days=32)  # no delay in the fleet is longer than a month
    lags: list[float] = []
    transactions: set[int] = set()
    with engine.connect() as conn:
        rows = conn.execute(query, {"since": since}).all()
    for xid, session_time, spec in rows:
        if ScheduleSpec.from_config(spec).run_time(session_time) != boundary:
            continue
        top = listener.transaction_of.get(xid, xid)
        if top not in listener.committed_at:
            raise BenchFailed(f"no commit was seen for transaction {xid}")
        lags.append(listener.committed_at[top] + offset - boundary.timestamp())
        transactions.add(top)
    return lags, len(transactions)


def process_cpu_seconds(pid: int) -> float:
    """A live process's CPU time so far, user and system, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_burst(
    url: str,
    err: Console,
    total: int = TOTAL_SCHEDULES,
    minutely: int = MINUTELY_SCHEDULES,
    part: str = "a",
) -> BurstResult:
    """Load the fleet, run ``tickwork scheduler`` across one minute boundary, measure."""
    engine = create_store_engine(url)
    started = time.perf_counter()
    fleet = plan_fleet(total, minutely)
    with engine.begin() as conn:
        load_fleet(conn, fleet, database_now(engine))
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
    install_commit_notifier(engine)
    err.print(f"({part}) {len(fleet):,} schedules loaded in {time.perf_counter() - started:.1f} s")
    offset = clock_offset_seconds(engine)
    port = free_port()
    with tempfile.TemporaryFile() as log, CommitListener(url) as listener:
        process = start_scheduler(url, port, log)
        try:
            boundary = next_boundary(engine, BURST_LEAD_SECONDS)
            with engine.begin() as conn:
                armed = arm_minutely(conn, boundary)
            err.print(f"({part}) {armed:,} every-minute schedules due at {boundary:%H:%M:%S} UTC")
            # The CPU count starts before the pass ahead: the idle wait before it varies.
            cpu_from = boundary.timestamp() - offset - CPU_LEAD_SECONDS
            time.sleep(max(0.0, cpu_from - time.time()))
            cpu_before = process_cpu_seconds(process.pid)
            wait_for_burst(engine, boundary, offset, minutely, err)
            cpu_seconds = process_cpu_seconds(process.pid) - cpu_before
            peak_mb = peak_rss_mb(process.pid)
        finally:
            stop_scheduler(process)
        time.sleep(0.5)  # the last notifications
        lags, transactions = burst_lags(engine, boundary, listener, offset)
    engine.dispose()
    return BurstResult(lags, transactions, peak_mb, offset, cpu_seconds)


# --- (c) APScheduler 3 -------------------------------------------------------------------


def run_apscheduler(jobs: int, other_jobs: int) -> dict[str, Any]:
    """The baseline's lags, from a child process (see bench/_apscheduler_baseline.py)."""
    command = [
        sys.executable,
        str(BENCH_DIR / "_apscheduler_baseline.py"),
        *("--jobs", str(jobs), "--other-jobs", str(other_jobs)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    if done.returncode != 0:
        raise BenchFailed(f"APScheduler baseline failed: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if len(result["lags_s"]) != jobs:
        raise BenchFailed(f"APScheduler called {len(result['lags_s'])} of {jobs} jobs in time")
    return result


def figures(
    catchup: CatchupResult,
    burst: BurstResult,
    baseline: dict[str, Any],
    baseline_alone: dict[str, Any],
    big: BurstResult,
) -> dict[str, Any]:
    """The JSON figures: the headline ones first, then what supports them."""
    p99 = percentile(burst.lags_s, 0.99)
    baseline_lags = baseline["lags_s"]
    baseline_p99 = percentile(baseline_lags, 0.99)
    ratio = p99 / baseline_p99
    alone_p99 = percentile(baseline_alone["lags_s"], 0.99)
    per_s = catchup.sessions / catchup.seconds
    big_seconds = max(big.lags_s)  # the last big-burst session's commit, after it was due
    missed = [
        name
        for name, met in (
            ("p99_lag_ratio_to_apscheduler", ratio <= TARGET_P99_LAG_RATIO_TO_APSCHEDULER),
            ("catchup_sessions_per_s", per_s >= TARGET_CATCHUP_SESSIONS_PER_S),
            ("burst_100k_seconds", big_seconds <= TARGET_BIG_BURST_SECONDS),
            ("peak_rss_mb", burst.peak_rss_mb < TARGET_PEAK_RSS_MB),
        )
        if not met
    ]
    return {
        "p99_lag_ratio_to_apscheduler": round(ratio, 3),
        "burst_p99_lag_s": round(p99, 3),
        "apscheduler_p99_lag_s": round(baseline_p99, 3),
        "catchup_sessions_per_s": round(per_s, 1),
        "burst_100k_seconds": round(big_seconds, 3),
        "peak_rss_mb": round(burst.peak_rss_mb, 1),
        "burst_p50_lag_s": round(percentile(burst.lags_s, 0.50), 3),
        "burst_sessions": len(burst.lags_s),
        "burst_min_lag_s": round(min(burst.lags_s), 3),
        "burst_max_lag_s": round(max(burst.lags_s), 3),
        "burst_transactions": burst.transactions,
        "apscheduler_p50_lag_s": round(percentile(baseline_lags, 0.50), 3),
        "apscheduler_jobs": baseline["jobs"] + baseline["other_jobs"],
        "apscheduler_10k_alone_p99_lag_s": round(alone_p99, 3),
        "p99_lag_ratio_to_apscheduler_10k_alone": round(p99 / alone_p99, 3),
        "apscheduler_peak_rss_mb": baseline["peak_rss_mb"],
        "catchup_sessions": catchup.sessions,
        "catchup_seconds": round(catchup.seconds, 3),
        "clock_offset_s": round(burst.clock_offset_s, 4),
        "burst_cpu_ms_per_1000": round(burst.cpu_seconds * 1e6 / len(burst.lags_s), 1),
        "burst_100k_sessions_per_s": round(len(big.lags_s) / big_seconds, 1),
        "burst_100k_sessions": len(big.lags_s),
        "burst_100k_p50_lag_s": round(percentile(big.lags_s, 0.50), 3),
        "burst_100k_transactions": big.transactions,
        "burst_100k_cpu_ms_per_1000": round(big.cpu_seconds * 1e6 / len(big.lags_s), 1),
        "burst_100k_peak_rss_mb": round(big.peak_rss_mb, 1),
        "missed_targets": missed,
        "meets_targets": not missed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    err = Console(stderr=True)
    server_url = os.environ.get("TICKWORK_BENCH_DATABASE_URL", DEFAULT_SERVER_URL)
    try:
        with throwaway_database(server_url) as url:
            catchup = run_catchup(url)
            err.print(
                f"(b) catch-up: {catchup.sessions:,} sessions in {catchup.seconds:.2f} s "
                f"({catchup.sessions / catchup.seconds:,.0f}/s, {catchup.ticks} ticks)"
            )
            burst = run_burst(url, err)
        lags = burst.lags_s
        err.print(
            f"(a) burst: {len(lags):,} sessions in {burst.transactions} transactions, "
            f"p50 {percentile(lags, 0.5):.3f} s, p99 {percentile(lags, 0.99):.3f} s, "
            f"peak RSS {burst.peak_rss_mb:.0f} MB"
        )
        baseline = run_apscheduler(MINUTELY_SCHEDULES, TOTAL_SCHEDULES - MINUTELY_SCHEDULES)
        baseline_alone = run_apscheduler(MINUTELY_SCHEDULES, 0)
        err.print(
            f"(c) APScheduler 3: p99 {percentile(baseline['lags_s'], 0.99):.3f} s with "
            f"{TOTAL_SCHEDULES:,} jobs, {percentile(baseline_alone['lags_s'], 0.99):.3f} s "
            f"with the {MINUTELY_SCHEDULES:,} every-minute ones alone"
        )
        with throwaway_database(server_url) as url:
            big = run_burst(url, err, BIG_BURST_SCHEDULES, BIG_BURST_SCHEDULES, part="d")
        err.print(
            f"(d) big burst: {len(big.lags_s):,} sessions, the last {max(big.lags_s):.2f} s "
            f"after they were due, in {big.transactions} transactions"
        )
    except BenchFailed as exc:
        err.print(f"error: {exc}", highlight=False)
        return 1
    out = figures(catchup, burst, baseline, baseline_alone, big)
    print(json.dumps(out))
    if args.check and not out["meets_targets"]:
        err.print("error: a scheduler target was missed (see bench/README.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
