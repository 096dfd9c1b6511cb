"""APScheduler 3 baseline for bench/scheduler.py: 100,000 cron jobs, 10,000 of them every minute.

Run as a child process so that it has the machine to itself, as the tickwork scheduler
did. It holds as many jobs as tickwork's fleet holds schedules: ``--jobs`` every-minute
cron jobs (``* * * * *`` in a few zones), whose calls are measured, and ``--other-jobs``
daily cron jobs at times drawn with a fixed seed (hour, minute and second, in nine
zones), which fire during the measured minute only by chance. Each job is
added to a ``BackgroundScheduler`` with the in-memory job store and the default executor
(a pool of 10 threads) before it starts; it starts at least ``LEAD_SECONDS`` before a
minute boundary. Each every-minute call records ``time.time()``: its lag is that minus
the minute, as tickwork's is the commit of a session minus its run time.
``misfire_grace_time`` is None so that a late job still runs (with the default of 1
second, late jobs are dropped instead and would have no lag to report). Prints one JSON
object: each every-minute call's lag behind the scheduled minute.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Kolkata", "Asia/Tokyo")
OTHER_ZONES = (
    *ZONES,
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Europe/London",
    "Australia/Sydney",
)
LEAD_SECONDS = 10.0  # the scheduler starts at least this long before the measured minute
WAIT_SECONDS = 50.0  # give up on calls this long after the minute (before the next one)

calls: list[float] = []


def record_call() -> None:
    """An every-minute job: note when it ran."""
    calls.append(time.time())


def other_call() -> None:
    """One of the other jobs: nothing to note (its lag is not measured)."""


def peak_rss_kb() -> int:
    """This process's peak resident memory (VmHWM; ru_maxrss would include the parent's)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def wait_for_lead(start_seconds: float) -> None:
    """Sleep past the next minute boundary if starting would come too close to it."""
    to_boundary = 60.0 - time.time() % 60.0
    if to_boundary < LEAD_SECONDS + start_seconds:
        time.sleep(to_boundary + 0.1)


def add_jobs(scheduler: BackgroundScheduler, minutely: int, others: int) -> None:
    """The every-minute jobs, then the others (pending until the scheduler starts)."""
    for i in range(minutely):
        trigger = CronTrigger.from_crontab("* * * * *", timezone=ZONES[i % len(ZONES)])
        scheduler.add_job(record_call, trigger, id=f"job-{i}")
    rng = random.Random(7)
    for i in range(others):
        hour, minute, second = rng.randrange(24), rng.randrange(60), rng.choice((7, 29, 43))
        trigger = CronTrigger(
            hour=hour, minute=minute, second=second, timezone=rng.choice(OTHER_ZONES)
        )
        scheduler.add_job(other_call, trigger, id=f"other-{i}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="every-minute jobs (measured)")
    parser.add_argument("--other-jobs", type=int, default=90_000, help="daily jobs beside them")
    parser.add_argument("--start-seconds", type=float, default=5.0, help="time start() may take")
    args = parser.parse_args()
    scheduler = BackgroundScheduler(
        timezone=UTC, job_defaults={"misfire_grace_time": None, "coalesce": True}
    )
    add_jobs(scheduler, args.jobs, args.other_jobs)
    wait_for_lead(args.start_seconds)
    scheduler.start()  # computes each pending job's next run time and stores it
    due = {job.next_run_time for job in scheduler.get_jobs() if job.id.startswith("job-")}
    if len(due) != 1:
        raise SystemExit(f"jobs are due at {len(due)} different times: {sorted(due)[:3]}")
    minute = next(iter(due)).timestamp()
    if minute - time.time() < 1.0:
        raise SystemExit("start() took until the measured minute: raise --start-seconds")
    deadline = minute + WAIT_SECONDS
    while len(calls) < args.jobs and time.time() < deadline:
        time.sleep(0.2)
    scheduler.shutdown(wait=False)
    print(
        json.dumps(
            {
                "minute": datetime.fromtimestamp(minute, UTC).isoformat(),
                "jobs": args.jobs,
                "other_jobs": args.other_jobs,
                "lags_s": [round(t - minute, 6) for t in calls[: args.jobs]],
                "peak_rss_mb": round(peak_rss_kb() / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
