"""What every benchmark shares: the emulator, the deployment, timing helpers, the machine.

Everything here reaches AWS only through the embedded emulator (moto in server mode on
127.0.0.1, `iotsched.local.emulator.EmulatorServer`, with the speed-ups every emulator of the
project has), with dummy credentials.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
BENCH_DIR = Path(__file__).resolve().parent
REGION = "us-east-1"
ACCOUNT = "123456789012"

#: Set before anything builds a boto3 session: an emulator only, never an account.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    # The dispatch benchmark purges its queue between runs.
    "MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR": "false",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "POWERTOOLS_METRICS_NAMESPACE": "iotsched-bench",
    "POWERTOOLS_SERVICE_NAME": "iotsched-bench",
}


def prepare_environment() -> None:
    """Dummy credentials, one region, no profile; emulator-only settings."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)
    os.environ.update(AWS_ENV)


@dataclass
class Deployment:
    """The template's resources provisioned into an emulator, and settings that reach them."""

    endpoint_url: str
    settings: Any  # iotsched.settings.Settings
    queue_url: str
    dlq_url: str
    table: str
    clients: Any  # iotsched.adapters.aws.AwsClients
    worker_timeout_s: int  # the shard worker function's timeout, as the template sets it


class ServiceTimer:
    """The emulator's own time per operation: measured inside its one-request-at-a-time lock.

    Installed around moto's WSGI app before `iotsched.local.emulator.serialize_requests` wraps
    it, so the time excludes waiting for the lock and the client's own work. `snapshot()` and
    `since()` split a long session into the parts the benchmarks compare.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def wrap(self, app: Callable[..., Any]) -> Callable[..., Any]:
        """A timed version of the WSGI `app`."""

        def timed(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            target = str(environ.get("HTTP_X_AMZ_TARGET") or "")
            operation = target.rsplit(".", 1)[-1] if target else "other"
            service = "SQS" if target.startswith("AmazonSQS") else "DynamoDB"
            name = f"{service}.{operation}" if target else "other"
            if environ.get("HTTP_X_BENCH_POLL"):
                name = f"poll:{name}"  # the benchmark's own waiting, not the measured work
            started = time.perf_counter()
            try:
                return list(app(environ, start_response))
            finally:
                elapsed = time.perf_counter() - started
                with self._lock:
                    self.count[name] += 1
                    self.seconds[name] += elapsed

        return timed

    def snapshot(self) -> tuple[Counter[str], dict[str, float]]:
        """The totals so far."""
        with self._lock:
            return Counter(self.count), dict(self.seconds)

    def since(
        self, mark: tuple[Counter[str], dict[str, float]], *, polls: bool = False
    ) -> dict[str, tuple[int, float]]:
        """(calls, seconds) by operation since `mark`; the benchmark's own polls left out."""
        count, seconds = self.snapshot()
        return {
            name: (count[name] - mark[0][name], seconds[name] - mark[1].get(name, 0.0))
            for name in count
            if count[name] - mark[0][name] > 0 and (polls or not name.startswith("poll:"))
        }


def tag_as_poll(client: Any) -> Any:
    """Mark every request of `client` as the benchmark's polling (see ServiceTimer)."""

    def add_header(request: Any = None, **_: Any) -> None:
        if request is not None:
            request.headers["X-Bench-Poll"] = "1"

    client.meta.events.register("before-send", add_header)
    return client


_timer = ServiceTimer()


def service_timer() -> ServiceTimer:
    """The timer of every emulator this process starts (see `instrument_emulator`)."""
    return _timer


def instrument_emulator() -> None:
    """Time the requests of every EmulatorServer started from now on, in this process."""
    from iotsched.local import emulator as server_module

    if getattr(server_module.serialize_requests, "bench_timed", False):
        return
    original = server_module.serialize_requests

    def serialize_timed(server: Any, **options: Any) -> Any:
        server.app = _timer.wrap(server.app)  # moto's werkzeug server
        return original(server, **options)  # its lock now wraps the timed app

    serialize_timed.bench_timed = True  # type: ignore[attr-defined]
    server_module.serialize_requests = serialize_timed


def breakdown(spans: dict[str, tuple[int, float]], per: float) -> dict[str, dict[str, float]]:
    """Calls and emulator milliseconds per unit (`per` units), by operation, largest first."""
    rows = sorted(spans.items(), key=lambda kv: -kv[1][1])
    return {
        name: {
            "calls": rounded(calls / per, 3),
            "emulator_ms": rounded(seconds * 1000 / per, 2),
            "ms_per_call": rounded(seconds * 1000 / calls, 2),
        }
        for name, (calls, seconds) in rows
    }


@contextmanager
def emulator() -> Iterator[str]:
    """A started embedded emulator (moto server, one request at a time); yields its URL."""
    from iotsched.local.emulator import EmulatorServer, reset_state

    prepare_environment()
    instrument_emulator()
    reset_state()
    server = EmulatorServer()
    try:
        yield server.url
    finally:
        server.stop()


def deploy(
    endpoint_url: str, *, stack: str = "bench", parameters: dict[str, str] | None = None
) -> Deployment:
    """Provision template.yaml's table, queues and topic into the emulator (as `local up`,
    with `parameters` over the template's defaults)."""
    from iotsched.adapters.aws import AwsClients
    from iotsched.local.provision import provision
    from iotsched.local.template import Template
    from iotsched.settings import Settings

    clients = AwsClients(region=REGION, endpoint_url=endpoint_url)
    deployment = provision(Template.read(TEMPLATE, parameters), clients, stack=stack)
    worker = next(f for f in deployment.functions.values() if f.sqs_sources)
    env = worker.environment
    settings = Settings(
        table=env["IOTSCHED_TABLE"],
        shard_queue_url=env["IOTSCHED_SHARD_QUEUE_URL"],
        alert_topic_arn=env["IOTSCHED_ALERT_TOPIC_ARN"],
        region=REGION,
        endpoint_url=endpoint_url,
        worker_id="bench-worker",
    )
    return Deployment(
        endpoint_url=endpoint_url,
        settings=settings,
        queue_url=settings.shard_queue_url,
        dlq_url=deployment.queues["ShardDLQ"],
        table=settings.table,
        clients=clients,
        worker_timeout_s=worker.timeout_s,
    )


# -- timing -----------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    """The median (of at least one value)."""
    return float(statistics.median(values))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call, by time.perf_counter."""
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def rounded(value: float, digits: int = 3) -> float:
    """A float rounded for the results file."""
    return round(float(value), digits)


# -- the machine ------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What the figures ran on (fixed strings, not measured)."""
    try:
        uname = subprocess.run(
            ["uname", "-a"], capture_output=True, text=True, check=False, timeout=5
        ).stdout.strip()
    except OSError:
        uname = " ".join(platform.uname())
    versions = {}
    for dist in ("boto3", "botocore", "moto", "aws-lambda-powertools", "pydantic", "apscheduler"):
        try:
            from importlib.metadata import version

            versions[dist] = version(dist)
        except Exception:
            versions[dist] = "not installed"
    return {
        "uname": uname,
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "packages": versions,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": [rounded(x, 2) for x in os.getloadavg()],
    }


def tick_as_deployed(at: datetime, services: Any, task_ids: Sequence[str], buckets: int) -> int:
    """The tick at `at` as it is deployed: the bucket dispatchers (`dispatch_bucket`) of the
    buckets that hold `task_ids`; the number of dispatcher invocations.

    The other buckets' dispatchers read two keys (limit 1), find nothing due and write
    nothing: a fixed cost per minute whatever the load (docs/guarantees.md prices it per month), not a
    cost of the shards fired.
    """
    from iotsched.core.buckets import bucket_of
    from iotsched.core.timeutil import floor_minute
    from iotsched.ports.messaging import BucketTick
    from iotsched.services.scheduling.tick import (
        BucketVerdict,
        dispatch_bucket,
    )

    minute = floor_minute(at)
    holding = sorted({bucket_of(task_id, buckets) for task_id in task_ids})
    for k in holding:
        result = dispatch_bucket(
            BucketTick(minute=minute, bucket=k),
            services,
            owner=f"bench#{k}",
            until=at + timedelta(minutes=1),
        )
        if result.verdict is not BucketVerdict.DISPATCHED:
            raise RuntimeError(f"bucket {k} at {minute}: {result.verdict}")
    return len(holding)
