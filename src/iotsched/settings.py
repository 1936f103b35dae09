"""Settings: the only module that reads the environment.

`Settings` says where every resource of a deployment is and how the scheduler is tuned;
`TableSettings` is its part the stores alone need. Lambda functions get the variables from
template.yaml; the CLI and the local runtime from flags, the environment or a stack's outputs.
A missing or malformed variable raises `SettingsError` naming it.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace

from iotsched.core.buckets import DEFAULT_BUCKETS, MAX_BUCKETS

#: The values of IOTSCHED_TRACING (see `Settings.tracing`).
TRACING = ("off", "xray", "local")


class SettingsError(ValueError):
    """A required setting is missing or malformed."""


@dataclass(frozen=True)
class TableSettings:
    """Where the scheduler's table is: all that its stores need (`bootstrap.build_stores`).

    Attributes:
        table: DynamoDB table name (IOTSCHED_TABLE).
        region: AWS region.
        endpoint_url: one endpoint for every service (moto, LocalStack), or AWS's own.
        index_buckets: the write-sharded index partitions per key prefix.
    """

    table: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    index_buckets: int = DEFAULT_BUCKETS


@dataclass(frozen=True)
class Settings:
    """Where the scheduler's resources are and how to reach them.

    Attributes:
        table: DynamoDB table name (IOTSCHED_TABLE).
        shard_queue_url: shard queue URL (IOTSCHED_SHARD_QUEUE_URL).
        alert_topic_arn: SNS alert topic ARN (IOTSCHED_ALERT_TOPIC_ARN).
        region: AWS region (AWS_REGION, AWS_DEFAULT_REGION; default us-east-1).
        endpoint_url: one endpoint for every service (AWS_ENDPOINT_URL): moto or LocalStack.
        worker_id: identity written on leases (the Lambda log stream, or host:pid).
        shard_lease_s: IOTSCHED_SHARD_LEASE_S, see `iotsched.services.Tuning`.
        lease_margin_s: IOTSCHED_LEASE_MARGIN_S, see `iotsched.services.Tuning`.
        dispatch_lease_s: IOTSCHED_DISPATCH_LEASE_S, see `iotsched.services.Tuning`.
        fault_kill_after_claim: IOTSCHED_FAULT_KILL_AFTER_CLAIM, chaos runs only: the
            probability that a dispatcher SIGKILLs itself between a claim and its send.
        device_table: IOTSCHED_DEVICE_TABLE, the Device Management System's DynamoDB table
            (devices, telemetry rollups, accounts, notices); optional.
        dms_url: IOTSCHED_DMS_URL, an external Device Management System's REST endpoint; when
            set, groups and devices come from it instead of the devices table.
        dms_timeout_s: IOTSCHED_DMS_TIMEOUT_S, per-request timeout for that endpoint.
        data_bucket: IOTSCHED_DATA_BUCKET, the reports/archive bucket; optional.
        reminder_topic_arn: IOTSCHED_REMINDER_TOPIC_ARN, where plan expiry notices go; optional.
        index_buckets: IOTSCHED_INDEX_BUCKETS, the write-sharded index partitions per key
            prefix (see `iotsched.core.buckets`); raise it on a live deployment, never lower it.
        dispatch_queue_url: IOTSCHED_DISPATCH_QUEUE_URL, the fanned-out tick's queue (the
            tick function sends to it, bucket dispatchers hold its messages); optional.
        batch_reports: IOTSCHED_BATCH_REPORTS, local runtime only: a bucket dispatcher's
            answer carries its reports beside the batch item failures, for `local tick`.
        shard_queue_high_url, shard_queue_low_url: IOTSCHED_SHARD_QUEUE_HIGH_URL and
            IOTSCHED_SHARD_QUEUE_LOW_URL, the shard queues of `high` and `low` priority work
            (`normal` work goes to IOTSCHED_SHARD_QUEUE_URL); optional: without them every
            priority shares the one shard queue.
        tracing: IOTSCHED_TRACING, where spans go: `xray` (Powertools Tracer; the template
            sets it with `Tracing: Active`), `local` (the local tracer, each process's spans
            appended under `trace_dir`), or `off` (the default: no spans).
        trace_dir: IOTSCHED_TRACE_DIR, the local tracer's directory (with `local`).
        shard_dlq_url: IOTSCHED_SHARD_DLQ_URL, the shard queues' dead-letter queue, whose depth
            the overview shows (the API reads it; nothing sends to it); optional.
    """

    table: str
    shard_queue_url: str
    alert_topic_arn: str
    region: str = "us-east-1"
    endpoint_url: str | None = None
    worker_id: str = ""
    shard_lease_s: int = 20
    lease_margin_s: int = 30
    dispatch_lease_s: int = 60
    fault_kill_after_claim: float = 0.0
    device_table: str | None = None
    dms_url: str | None = None
    dms_timeout_s: float = 5.0
    data_bucket: str | None = None
    reminder_topic_arn: str | None = None
    index_buckets: int = DEFAULT_BUCKETS
    dispatch_queue_url: str | None = None
    batch_reports: bool = False
    shard_queue_high_url: str | None = None
    shard_queue_low_url: str | None = None
    tracing: str = "off"
    trace_dir: str | None = None
    shard_dlq_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from `env` (default: the process environment)."""
        env = os.environ if env is None else env
        missing = [
            name
            for name in ("IOTSCHED_TABLE", "IOTSCHED_SHARD_QUEUE_URL", "IOTSCHED_ALERT_TOPIC_ARN")
            if not env.get(name)
        ]
        if missing:
            raise SettingsError(f"missing environment: {', '.join(missing)}")
        shard_lease_s = _int(env, "IOTSCHED_SHARD_LEASE_S", 20)
        index_buckets = index_buckets_from_env(env)
        if shard_lease_s < 1:
            raise SettingsError(f"IOTSCHED_SHARD_LEASE_S must be at least 1, not {shard_lease_s}")
        tracing = env.get("IOTSCHED_TRACING") or "off"
        if tracing not in TRACING:
            raise SettingsError(
                f"IOTSCHED_TRACING must be one of {', '.join(TRACING)}, not {tracing!r}"
            )
        trace_dir = env.get("IOTSCHED_TRACE_DIR") or None
        if tracing == "local" and trace_dir is None:
            raise SettingsError("IOTSCHED_TRACING=local needs IOTSCHED_TRACE_DIR")
        return cls(
            table=env["IOTSCHED_TABLE"],
            shard_queue_url=env["IOTSCHED_SHARD_QUEUE_URL"],
            alert_topic_arn=env["IOTSCHED_ALERT_TOPIC_ARN"],
            region=region_from_env(env),
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
            worker_id=env.get("AWS_LAMBDA_LOG_STREAM_NAME")
            or f"{socket.gethostname()}:{os.getpid()}",
            shard_lease_s=shard_lease_s,
            lease_margin_s=_int(env, "IOTSCHED_LEASE_MARGIN_S", 30),
            dispatch_lease_s=_int(env, "IOTSCHED_DISPATCH_LEASE_S", 60),
            fault_kill_after_claim=_float(env, "IOTSCHED_FAULT_KILL_AFTER_CLAIM", 0.0),
            device_table=env.get("IOTSCHED_DEVICE_TABLE") or None,
            dms_url=env.get("IOTSCHED_DMS_URL") or None,
            dms_timeout_s=_float(env, "IOTSCHED_DMS_TIMEOUT_S", 5.0),
            data_bucket=env.get("IOTSCHED_DATA_BUCKET") or None,
            reminder_topic_arn=env.get("IOTSCHED_REMINDER_TOPIC_ARN") or None,
            index_buckets=index_buckets,
            dispatch_queue_url=env.get("IOTSCHED_DISPATCH_QUEUE_URL") or None,
            batch_reports=env.get("IOTSCHED_BATCH_REPORTS") == "1",
            shard_queue_high_url=env.get("IOTSCHED_SHARD_QUEUE_HIGH_URL") or None,
            shard_queue_low_url=env.get("IOTSCHED_SHARD_QUEUE_LOW_URL") or None,
            tracing=tracing,
            trace_dir=trace_dir,
            shard_dlq_url=env.get("IOTSCHED_SHARD_DLQ_URL") or None,
        )

    def with_endpoint(self, endpoint_url: str | None) -> Settings:
        """A copy aimed at another endpoint."""
        return replace(self, endpoint_url=endpoint_url)

    @property
    def table_settings(self) -> TableSettings:
        """The part of these settings the stores need."""
        return TableSettings(
            table=self.table,
            region=self.region,
            endpoint_url=self.endpoint_url,
            index_buckets=self.index_buckets,
        )


def index_buckets_from_env(env: Mapping[str, str] | None = None) -> int:
    """IOTSCHED_INDEX_BUCKETS (the deployment's IndexBuckets), checked; the default if unset."""
    env = os.environ if env is None else env
    return check_index_buckets(_int(env, "IOTSCHED_INDEX_BUCKETS", DEFAULT_BUCKETS))


def check_index_buckets(value: int) -> int:
    """`value` if it is a valid bucket count, else SettingsError naming the range."""
    if not 1 <= value <= MAX_BUCKETS:
        raise SettingsError(
            f"IOTSCHED_INDEX_BUCKETS must be between 1 and {MAX_BUCKETS}, not {value}"
        )
    return value


def region_from_env(env: Mapping[str, str] | None = None) -> str:
    """The region from AWS_REGION / AWS_DEFAULT_REGION, default us-east-1."""
    env = os.environ if env is None else env
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"


def endpoint_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """AWS_ENDPOINT_URL, if set."""
    env = os.environ if env is None else env
    return env.get("AWS_ENDPOINT_URL") or None


def stack_from_env(env: Mapping[str, str] | None = None) -> str:
    """IOTSCHED_STACK, default `iotsched`."""
    env = os.environ if env is None else env
    return env.get("IOTSCHED_STACK") or "iotsched"


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be an integer, not {raw!r}") from exc


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from exc


#: A handler setting's name, as Lambda accepts it: a letter, then letters, digits, underscores.
_SETTING_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: Names a deployment's handler settings may not set: iotsched's, Powertools' and the Lambda
#: runtime's own (AWS_*, LAMBDA_*), and those that change how Python runs.
_RESERVED_PREFIXES = ("IOTSCHED_", "POWERTOOLS_", "AWS_", "LAMBDA_")
_RESERVED_NAMES = frozenset({"PATH", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LANG", "TZ"})


def handler_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a deployment gives its handlers (IOTSCHED_HANDLER_ENVIRONMENT, the
    template's HandlerEnvironment): a JSON object of variable names and string values, which
    the worker exports before it imports a handler. Empty when unset.

    Raises SettingsError for anything else: not JSON, not an object, a value that is not a
    string, a name Lambda would refuse or one that is reserved (see `_RESERVED_PREFIXES`).
    """
    env = os.environ if env is None else env
    raw = (env.get("IOTSCHED_HANDLER_ENVIRONMENT") or "").strip()
    if not raw:
        return {}
    where = "HandlerEnvironment (IOTSCHED_HANDLER_ENVIRONMENT)"
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SettingsError(f"{where} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SettingsError(f"{where} must be a JSON object of names and string values")
    settings: dict[str, str] = {}
    for name, setting in value.items():
        if not _SETTING_NAME.fullmatch(name):
            raise SettingsError(
                f"{where}: {name!r} is not a variable name (a letter, then letters, digits, _)"
            )
        if name in _RESERVED_NAMES or name.upper().startswith(_RESERVED_PREFIXES):
            raise SettingsError(
                f"{where}: {name!r} is reserved (iotsched's, Powertools' or the Lambda "
                "runtime's own); name your settings after your package"
            )
        if not isinstance(setting, str):
            raise SettingsError(
                f"{where}: {name!r} must be a string (quote it: {json.dumps(str(setting))})"
            )
        settings[name] = setting
    return settings
