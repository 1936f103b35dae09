"""Peer side by side: N no-op jobs all due at one instant, iotsched vs APScheduler 3.

iotsched: the local runtime (emulator, dispatcher process, 2 shard-worker processes), its table
emptied before each run so that every run starts as the first does. N tasks
(`noop`, no sharding) are all due at one instant; the clock starts when that tick is delivered
and stops when the shard queue is empty (every message deleted: each shard ran and its instance
was finalised first), polled every 0.1 s; then every instance is checked `succeeded`.

APScheduler 3: a BackgroundScheduler with an SQLAlchemy job store on an SQLite file and its
thread pool executor (default 10 threads); N `date` jobs at one instant, `misfire_grace_time`
None so that none is dropped for starting late. The clock starts at the due instant and stops
when the Nth job has run (a listener on EVENT_JOB_EXECUTED).

The figure is iotsched's median time over APScheduler's (how many times slower iotsched is).
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import median, rounded, tag_as_poll
from iotsched.local.emulator import empty_table

T0 = datetime(2026, 12, 3, 0, 0, tzinfo=UTC)
POLL_S = 0.1
LEAD_S = 2.0  # APScheduler: jobs are added, then fall due this long after the scheduler starts

_done = threading.Event()
_lock = threading.Lock()
_ran = 0
_expected = 0


def noop_job(index: int) -> int:
    """An APScheduler job that does nothing (referenced by name in the job store)."""
    return index


def _count(event: Any) -> None:
    global _ran
    with _lock:
        _ran += 1
        if _ran >= _expected:
            _done.set()


def apscheduler_once(jobs: int, threads: int = 10) -> dict[str, Any]:
    """One APScheduler run; seconds from the due instant to the last job run."""
    global _ran, _expected
    from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    missed: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="bench-aps-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'jobs.sqlite'}"
        scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=url)},
            executors={"default": ThreadPoolExecutor(threads)},
            job_defaults={"misfire_grace_time": None, "coalesce": False},
            timezone="UTC",
        )
        _ran, _expected = 0, jobs
        _done.clear()
        scheduler.add_listener(_count, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        scheduler.add_listener(missed.append, EVENT_JOB_MISSED)
        scheduler.start(paused=True)
        due = datetime.now(UTC) + timedelta(seconds=LEAD_S + jobs / 500)
        for i in range(jobs):
            scheduler.add_job(noop_job, "date", run_date=due, args=[i], id=f"job-{i}")
        scheduler.resume()
        finished = _done.wait(timeout=600)
        ended = datetime.now(UTC)
        scheduler.shutdown(wait=True)
    if not finished:
        raise RuntimeError(f"APScheduler ran {_ran} of {jobs} jobs in 600 s")
    return {"seconds": (ended - due).total_seconds(), "ran": _ran, "missed": len(missed)}


def iotsched_once(runtime: Any, services: Any, polling: Any, jobs: int, n: int) -> dict[str, Any]:
    """One iotsched run on a started runtime; seconds from the tick to the last shard."""
    from iotsched.core.instance_record import (
        InstanceStatus,
        instance_id_for,
    )
    from iotsched.core.task_definition import TaskDefinition
    from iotsched.services.definitions.apply import apply_tasks

    empty_table(runtime.settings().table)
    at = T0 + timedelta(hours=n)
    definitions = [
        TaskDefinition.model_validate(
            {"id": f"peer-{n}-{i:04d}", "handler": "noop", "trigger": {"at": at.isoformat()}}
        )
        for i in range(jobs)
    ]
    apply_tasks(definitions, services.tasks, now=at - timedelta(minutes=1))
    sqs = polling.sqs()
    url = runtime.settings().shard_queue_url
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    started = time.perf_counter()
    (tick,) = runtime.tick(at)
    while True:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        if all(attributes[name] == "0" for name in names):
            break
        time.sleep(POLL_S)
    seconds = time.perf_counter() - started
    succeeded = 0
    for definition in definitions:
        instance = services.instances.get_instance(instance_id_for(definition.id, at))
        if instance is not None and instance.status is InstanceStatus.SUCCEEDED:
            succeeded += 1
    return {
        "seconds": seconds,
        "claimed": len(tick.report.get("claimed", [])),
        "succeeded": succeeded,
    }


def run(runtime: Any, *, jobs: int = 1000, runs: int = 5) -> dict[str, Any]:
    """`runs` runs of each side, alternated."""
    from iotsched.adapters.aws import AwsClients
    from iotsched.bootstrap import build

    clients = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url)
    services = build(runtime.settings(), clients=clients)
    polling = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url)
    tag_as_poll(polling.sqs())
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for n in range(runs):
        if n % 2 == 0:
            ours.append(iotsched_once(runtime, services, polling, jobs, n))
            theirs.append(apscheduler_once(jobs))
        else:
            theirs.append(apscheduler_once(jobs))
            ours.append(iotsched_once(runtime, services, polling, jobs, n))
    ours_s = [r["seconds"] for r in ours]
    theirs_s = [r["seconds"] for r in theirs]
    ratio = median(ours_s) / median(theirs_s)
    from importlib.metadata import version

    return {
        "jobs": jobs,
        "version": version("apscheduler"),
        "runs_per_side": runs,
        "iotsched_seconds": [rounded(x, 2) for x in ours_s],
        "apscheduler_seconds": [rounded(x, 3) for x in theirs_s],
        "iotsched_median_s": rounded(median(ours_s), 2),
        "apscheduler_median_s": rounded(median(theirs_s), 3),
        "iotsched_jobs_per_s": rounded(jobs / median(ours_s), 1),
        "apscheduler_jobs_per_s": rounded(jobs / median(theirs_s), 1),
        "iotsched_all_succeeded": all(r["succeeded"] == jobs for r in ours),
        "apscheduler_all_ran": all(r["ran"] == jobs for r in theirs),
        "apscheduler_missed": sum(r["missed"] for r in theirs),
        "ratio": rounded(ratio, 2),
        "apscheduler_setup": "BackgroundScheduler, SQLAlchemyJobStore on SQLite (file), "
        "ThreadPoolExecutor(10), misfire_grace_time=None",
    }


if __name__ == "__main__":
    import json
    import sys

    from bench.throughput import local_runtime

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    if len(sys.argv) > 2 and sys.argv[2] == "aps":
        sys.stdout.write(json.dumps(apscheduler_once(count)) + "\n")
    else:
        with local_runtime() as rt:
            sys.stdout.write(json.dumps(run(rt, jobs=count, runs=1)) + "\n")
