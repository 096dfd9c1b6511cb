"""APScheduler 3 baseline for bench/scheduler.py: every-minute cron jobs calling a function.

Run as a child process so that it has the machine to itself, as the tickwork scheduler
did. It adds ``--jobs`` cron jobs (``* * * * *`` in a few zones) to a
``BackgroundScheduler`` with the in-memory job store and the default executor (a pool of
10 threads), starts it at least 10 seconds before a minute boundary, and records
``time.time()`` in each call. ``misfire_grace_time`` is None so that a late job still
runs (with the default of 1 second, late jobs are dropped instead and would have no
lag to report). Prints one JSON object: each call's lag behind the scheduled minute.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Asia/Tokyo")
LEAD_SECONDS = 10.0  # set-up happens at least this long before the measured minute
WAIT_SECONDS = 50.0  # give up on calls this long after the minute (before the next one)

calls: list[float] = []


def record_call() -> None:
    """The job: note when it ran."""
    calls.append(time.time())


def peak_rss_kb() -> int:
    """This process's peak resident memory (VmHWM; ru_maxrss would include the parent's)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def wait_for_lead() -> None:
    """Sleep past the next minute boundary if it is less than LEAD_SECONDS away."""
    to_boundary = 60.0 - time.time() % 60.0
    if to_boundary < LEAD_SECONDS:
        time.sleep(to_boundary + 0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    wait_for_lead()
    scheduler = BackgroundScheduler(
        timezone=UTC, job_defaults={"misfire_grace_time": None, "coalesce": True}
    )
    for i in range(args.jobs):
        trigger = CronTrigger.from_crontab("* * * * *", timezone=ZONES[i % len(ZONES)])
        scheduler.add_job(record_call, trigger, id=f"job-{i}")
    scheduler.start()
    due = {job.next_run_time for job in scheduler.get_jobs()}
    if len(due) != 1:
        raise SystemExit(f"jobs are due at {len(due)} different times: {sorted(due)[:3]}")
    minute = next(iter(due)).timestamp()
    deadline = minute + WAIT_SECONDS
    while len(calls) < args.jobs and time.time() < deadline:
        time.sleep(0.2)
    scheduler.shutdown(wait=False)
    print(
        json.dumps(
            {
                "minute": datetime.fromtimestamp(minute, UTC).isoformat(),
                "jobs": args.jobs,
                "lags_s": [round(t - minute, 6) for t in calls[: args.jobs]],
                "peak_rss_mb": round(peak_rss_kb() / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
