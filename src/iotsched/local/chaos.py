"""`make chaos`: the local runtime under real process deaths, and the invariants that must hold.

`python -m iotsched.local.chaos --instances 50 --shards 20 --kill-probability 0.25 [--json]`

One task (handler `chaos`, see `iotsched.tasklib.chaos`) fires once per emulated day, so that each
instance has its own business date and its own effect keys. Every tick is delivered twice,
concurrently, on two dispatcher processes. Meanwhile:

* shard workers SIGKILL their own process on `--kill-probability` of their attempts, at a random
  unit in the middle of the shard (the handler logs the instant first);
* dispatchers SIGKILL themselves between a claim and the send of its shard messages with
  probability `--dispatcher-kill-probability` (IOTSCHED_FAULT_KILL_AFTER_CLAIM); the run goes
  on firing (at most `--extra-instances` more) until that happened at least once;
* the sweeper is delivered every `--sweep-every` seconds (a manual clock fires nothing itself);
* the next day is ticked once fewer than `--max-open` fired instances are open (the load the
  deployment is sized for, rather than one backlog of every shard).

The deployment is template.yaml scaled down with its rules kept (`ChaosConfig.problems`): one
shard per worker invocation (`WorkerBatchSize=1`, the failover-first setting), a worker timeout that covers an attempt with room for a loaded
emulator (5 s for a task timeout of 2 s: at 3 s, 2% of invocations hit it on a shared 2-CPU
machine, and one hit before the lease costs a second visibility timeout), a shard-queue
visibility timeout of 6x the worker timeout (30 s). With a visibility timeout
below the worker timeout (5 s against 10 s, before 2026-11-29), which Lambda refuses for an SQS
event source, an invocation outlived the visibility of its messages, and messages were deleted
through a stale receipt handle while another worker ran them: their shards waited for the
sweeper's re-send after a death.

The moto server runs inside this process with `fast_moto()`: moto's costs that grow with the
data (whole-table copies per transaction, sorted full-table reads per query, queue attribute
walks per message) are avoided and TransactWriteItems is idempotent by ClientRequestToken, as
on AWS. Without that a run of 1,000 shards does not finish.

Then it reads the records through the product's own services and checks:

1. every instance is final (succeeded / failed / timed_out / cancelled), each within
   `--final-within` seconds of its claim;
2. no shard is lost (every planned shard has a final record) and none has two successful
   attempts;
3. every effect key of every succeeded shard was applied exactly once (its `APPLIED#` counter
   is 1), no key was applied twice, and each applied key is a ledger entry listed in the
   execution record of the attempt that claimed it;
4. a dead worker's shard resumed (its next attempt started) within the goal of the shard
   queue's visibility timeout + 10 s: median and maximum;

and that the chaos happened: at least `--min-kill-fraction` of attempts were killed, the
dispatcher was killed between claim and enqueue at least once, every tick was delivered twice.
It prints a table (or one JSON object with `--json`), writes the figures into the "Chaos run"
section of bench/results.md, and exits 1 if anything fails.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from iotsched.adapters.aws import AwsClients
from iotsched.bootstrap import build
from iotsched.core.records import InstanceRecord, InstanceStatus, ShardRecord, instance_id_for
from iotsched.local.adversary import AdversaryConfig
from iotsched.local.demo import DemoError, find_template
from iotsched.local.runtime import LocalRuntime, RuntimeError_
from iotsched.services import Services
from iotsched.services.tasks import apply_tasks, parse_task_file
from iotsched.tasklib import registry
from iotsched.tasklib.chaos import APPLIED_PREFIX, effect_key

CHAOS_TASK = "chaos"
CHAOS_START = datetime(2026, 1, 1, tzinfo=UTC)
SLOT = timedelta(days=1)  # one instance per day: each has its own business date
#: What "final" means for this run's instances (skipped is final too, but never planned here).
FINAL = frozenset(
    {
        InstanceStatus.SUCCEEDED,
        InstanceStatus.FAILED,
        InstanceStatus.TIMED_OUT,
        InstanceStatus.CANCELLED,
    }
)
RESUME_SLACK_S = 10  # the resumption goal is the visibility timeout + this
#: The failover goals at the template's default timeouts (`--default-timeouts`): a dead worker's
#: shard resumes (its next attempt starts) within this many seconds of the death, median and max.
DEFAULT_TIMEOUTS_GOALS_S = (60.0, 90.0)
#: template.yaml's rule (AWS guidance for SQS event sources): visibility >= 6 x function timeout.
VISIBILITY_FACTOR = 6


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run. The defaults are `make chaos`."""

    instances: int = 50
    shards: int = 20
    kill_probability: float = 0.25
    dispatcher_kill_probability: float = 0.1
    effects: int = 3
    unit_seconds: float = 0.05
    workers: int = 4
    seed: int = 0
    final_within_s: float = 300.0
    min_kill_fraction: float = 0.2
    min_dispatcher_kills: int = 1
    extra_instances: int = 20
    sweep_every_s: float = 5.0
    max_open: int = 4
    # The deployment, scaled down with the template's own rules kept (`problems()` checks
    # them): a task attempt's lease (timeout 2 s + margin 1 s) fits the worker function's
    # timeout (5 s, one shard per invocation), and the shard queue's visibility timeout is 6x
    # that (30 s), so no invocation outlives the visibility of its message. The dispatch lease
    # ends 3 s after a claim.
    task_timeout_s: int = 2
    lease_margin_s: int = 1
    visibility_timeout_s: int = 30
    worker_timeout_s: int = 5
    max_receive_count: int = 20
    max_attempts: int = 20
    dispatch_lease_s: int = 3
    # 1: DynamoDB is the adversarial one (local/adversary.py, a moderate rate seeded by `seed`):
    # cancellations, throttles, lost responses, in-flight conflicts. 0: plain moto.
    adversary: int = 1
    # The shard lease the workers renew (template ShardLeaseSeconds); an attempt's lease is
    # this or its task timeout + margin, the shorter.
    shard_lease_s: int = 20
    # Shard messages per worker invocation (template WorkerBatchSize; 1: failover first).
    batch_size: int = 1
    # The failover goals (median, max) in seconds; 0: the max is the visibility timeout + 10 s
    # and the median has none (the default run's goal).
    resume_median_goal_s: float = 0.0
    resume_max_goal_s: float = 0.0
    # `--default-timeouts`: the preset below (`default_timeouts()`), on real time.
    default_timeouts_preset: bool = False

    @classmethod
    def default_timeouts(cls) -> ChaosConfig:
        """`--default-timeouts`: the template's default timeouts, on real time.

        Worker function timeout 300 s, shard queue visibility 1,800 s (6x), shard lease 20 s, a
        task timeout of 240 s and the default lease margin (30 s), a sweep every 60 s as the
        template's rule: a few instances of shards of three 10 s units (30 s: longer than a
        lease, so each attempt lives by its renewals), workers SIGKILLed mid-shard. Goals: a
        dead worker's shard resumes within 60 s (median) and 90 s (max) of the death. No
        dispatcher deaths (they are the default run's; this one measures worker failover).
        """
        return cls(
            instances=3,
            shards=6,
            kill_probability=0.35,
            dispatcher_kill_probability=0.0,
            min_dispatcher_kills=0,
            unit_seconds=10.0,
            workers=6,
            final_within_s=1200.0,
            min_kill_fraction=0.1,
            sweep_every_s=60.0,
            max_open=3,
            task_timeout_s=240,
            lease_margin_s=30,
            visibility_timeout_s=1800,
            worker_timeout_s=300,
            max_receive_count=5,
            max_attempts=20,
            dispatch_lease_s=60,
            shard_lease_s=20,
            resume_median_goal_s=DEFAULT_TIMEOUTS_GOALS_S[0],
            resume_max_goal_s=DEFAULT_TIMEOUTS_GOALS_S[1],
            default_timeouts_preset=True,
        )

    def problems(self) -> list[str]:
        """The rules of template.yaml (and of AWS) this configuration breaks; [] if none.

        A configuration that breaks them measures the emulator, not the product: with a worker
        timeout above the visibility timeout (which Lambda refuses for an SQS event source) an
        invocation outlives the visibility of its message, a second worker receives it while
        the first still holds it, and the first one's acknowledgement deletes it through its
        stale receipt handle (moto honours any handle a message ever had; on AWS the message
        "might not be deleted"), so the second worker's death leaves no message to redeliver.
        """
        found = []
        if self.visibility_timeout_s < VISIBILITY_FACTOR * self.worker_timeout_s:
            found.append(
                f"visibility timeout {self.visibility_timeout_s} s < {VISIBILITY_FACTOR} x worker "
                f"timeout {self.worker_timeout_s} s (template.yaml: ShardVisibilityTimeoutSeconds "
                f">= {VISIBILITY_FACTOR} x WorkerTimeoutSeconds)"
            )
        if self.worker_timeout_s <= self.task_timeout_s:
            found.append(
                f"worker timeout {self.worker_timeout_s} s <= task timeout {self.task_timeout_s} s "
                "(the function must outlive an attempt's own timeout to record it)"
            )
        lease_s = self.lease_s
        if lease_s >= self.visibility_timeout_s:
            found.append(
                f"lease {lease_s} s (the shard lease, or task timeout + margin) >= visibility timeout "
                f"{self.visibility_timeout_s} s (a redelivery must find the lease of a "
                "dead worker expired)"
            )
        return found

    @property
    def lease_s(self) -> int:
        """An attempt's lease: the shard lease, or the task timeout + margin if shorter."""
        return min(self.shard_lease_s, self.task_timeout_s + self.lease_margin_s)

    @property
    def resume_goal_s(self) -> float:
        """The goal for a dead worker's shard to resume (max): the configured one, else the
        visibility timeout + 10 s."""
        if self.resume_max_goal_s > 0:
            return self.resume_max_goal_s
        return float(self.visibility_timeout_s + RESUME_SLACK_S)

    def base(self) -> ChaosConfig:
        """The configuration this one's command line starts from (the preset, if any)."""
        return ChaosConfig.default_timeouts() if self.default_timeouts_preset else ChaosConfig()

    def command(self) -> str:
        """The command line that runs this configuration."""
        defaults = self.base()
        args = ["python", "-m", "iotsched.local.chaos"]
        if self.default_timeouts_preset:
            args.append("--default-timeouts")
        args += [
            "--instances",
            str(self.instances),
            "--shards",
            str(self.shards),
            "--kill-probability",
            str(self.kill_probability),
            "--seed",
            str(self.seed),
        ]
        for name, flag in _OPTIONS:
            value = getattr(self, name)
            if name not in ("instances", "shards", "kill_probability", "seed") and value != getattr(
                defaults, name
            ):
                args += [flag, str(value)]
        return shlex.join(args)


#: ChaosConfig fields settable from the command line, with their flags.
_OPTIONS = [
    ("instances", "--instances"),
    ("shards", "--shards"),
    ("kill_probability", "--kill-probability"),
    ("dispatcher_kill_probability", "--dispatcher-kill-probability"),
    ("effects", "--effects"),
    ("unit_seconds", "--unit-seconds"),
    ("workers", "--workers"),
    ("seed", "--seed"),
    ("final_within_s", "--final-within"),
    ("min_kill_fraction", "--min-kill-fraction"),
    ("min_dispatcher_kills", "--min-dispatcher-kills"),
    ("extra_instances", "--extra-instances"),
    ("sweep_every_s", "--sweep-every"),
    ("max_open", "--max-open"),
    ("visibility_timeout_s", "--visibility-timeout"),
    ("worker_timeout_s", "--worker-timeout"),
    ("task_timeout_s", "--task-timeout"),
    ("lease_margin_s", "--lease-margin"),
    ("max_receive_count", "--max-receive-count"),
    ("adversary", "--adversary"),
    ("max_attempts", "--max-attempts"),
    ("shard_lease_s", "--shard-lease"),
    ("batch_size", "--batch-size"),
    ("resume_median_goal_s", "--resume-median-goal"),
    ("resume_max_goal_s", "--resume-max-goal"),
]


class ChaosConfigError(ValueError):
    """A chaos configuration that breaks the rules the product's deployment keeps."""


@dataclass
class _Run:
    """What the driver observed while the run went on (the records tell the rest)."""

    death_log: Path
    ticks: list[datetime] = field(default_factory=list)
    open_slots: list[datetime] = field(default_factory=list)
    tick_calls: int = 0
    deliveries: int = 0
    dispatcher_kills: int = 0
    tick_reports: list[dict[str, Any]] = field(default_factory=list)
    sweeps: int = 0
    sweep_errors: int = 0
    sweep_totals: Counter[str] = field(default_factory=Counter)
    requeues: list[tuple[float, str]] = field(default_factory=list)  # (when, instance#shard)
    last_sweep: float = float("-inf")
    fire_s: float = 0.0
    final_after_s: float | None = None


@contextlib.contextmanager
def fast_moto() -> Iterator[Counter[str]]:
    """While active, the in-process moto server avoids costs that grow with its data.

    They make a run of 1,000 shards on the (serialized) emulator collapse; each replacement
    returns what moto 5.x returns:

    * DynamoDB Query sorts every item of the table (`all_items()`), then keeps the queried
      partition (or, for an index, re-sorts the matches by the index keys): O(n log n) per
      query, about 0.2 s at 8,000 items. Here it gets the partition's items (or, for an index,
      every item unsorted) and does the rest as before.
    * DynamoDB TransactWriteItems deep-copies every table it touches, once per entry, to roll
      back: O(table size) per transaction (about 0.5 s at 7,000 items; the effect ledger adds
      two items per key). Instead the entries' own items are copied before the call and put
      back if it raises, which is the same all-or-nothing: a transaction writes only the items
      its entries name, each at most once.
    * SQS computes every queue attribute (ApproximateNumberOfMessages walks all messages) for
      each message sent and, three times, for each message received, only to read one static
      attribute: about 2 s per ReceiveMessage at 1,000 messages. The retention check now reads
      the retention period itself.
    * The clock those walks read per message (`unix_time()`: datetime arithmetic) is
      `time.time()` when called without an argument, as it is there.

    And one AWS guarantee moto lacks: TransactWriteItems is idempotent by ClientRequestToken
    (botocore sets one per call and resends it when it retries): a retry of a transaction
    that committed, whose response was lost, succeeds without writing again. moto runs it
    again, so the ledger's own claim looks like an earlier run's (`once()` returns False and
    the attempt's execution record misses a key it wrote). Replays are counted in the
    yielded counter (`idempotent_replays`).

    The moto server runs in this process; everything is restored on exit.
    """
    ddb: Any = importlib.import_module("moto.dynamodb.models")
    ddb_responses: Any = importlib.import_module("moto.dynamodb.responses")
    sqs: Any = importlib.import_module("moto.sqs.models")
    from moto.core.responses import ActionResult
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    saved_attrs: list[tuple[Any, str, Any]] = []

    def replace(owner: Any, name: str, value: Any) -> None:
        saved_attrs.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    # -- DynamoDB: item-level rollback ------------------------------------------------------
    original_transact = ddb.DynamoDBBackend.transact_write_items
    real_copy = ddb.copy
    state = threading.local()

    class _Copy:
        """`copy` for moto's DynamoDB backend: a table copied inside a transaction is itself."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_copy, name)

        def deepcopy(self, value: Any, memo: Any = None) -> Any:
            if getattr(state, "active", False) and isinstance(value, Table):
                return value
            return real_copy.deepcopy(value, memo)

    def current(table: Any, hash_value: Any, range_value: Any) -> Any:
        partition = table.items.get(hash_value)
        if range_value is None or partition is None:
            return partition
        return partition.get(range_value)

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved: list[tuple[Any, Any, Any, Any]] = []
        for entry in transact_items:
            op: Any = next(iter(entry.values()), None)
            if not isinstance(op, dict) or op.get("TableName") not in self.tables:
                continue
            table = self.tables[op["TableName"]]
            key = op.get("Key") or op.get("Item") or {}
            try:
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = (
                    DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                )
            except (KeyError, TypeError):
                continue  # moto rejects the entry before it writes anything
            item = current(table, hash_value, range_value)
            saved.append((table, hash_value, range_value, real_copy.deepcopy(item)))
        state.active = True
        try:
            original_transact(self, transact_items)
        except BaseException:
            for table, hash_value, range_value, item in reversed(saved):
                if item is None:
                    if current(table, hash_value, range_value) is not None:
                        table.delete_item(hash_value, range_value)
                elif range_value is None:
                    table.items[hash_value] = item
                else:
                    table.items[hash_value][range_value] = item
            raise
        finally:
            state.active = False

    replace(ddb, "copy", _Copy())
    replace(ddb.DynamoDBBackend, "transact_write_items", transact_write_items)

    # -- DynamoDB: a query reads its partition, not the whole table sorted -------------------
    original_query = Table.query

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name:  # every item is a candidate; the index order is sorted in there
            candidates = [
                item
                for partition in self.items.values()
                for item in (partition.values() if self.range_key_attr else [partition])
            ]
        else:  # only the partition can match (the original filters all items by hash key)
            partition = self.items.get(hash_key)
            if partition is None:
                candidates = []
            else:
                candidates = list(partition.values()) if self.range_key_attr else [partition]
        self.all_items = lambda: candidates
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            del self.all_items

    replace(Table, "query", query)

    # -- DynamoDB: TransactWriteItems idempotent by ClientRequestToken (10 minutes, as AWS) --
    stats: Counter[str] = Counter()
    committed: dict[str, float] = {}
    original_handler = ddb_responses.DynamoHandler.transact_write_items

    def handle_transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        now = time.monotonic()
        if token and now - committed.get(token, float("-inf")) < 600:
            stats["idempotent_replays"] += 1
            return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})
        result = original_handler(self)
        if token:
            committed[token] = now
        return result

    replace(ddb_responses.DynamoHandler, "transact_write_items", handle_transact_write_items)

    # -- SQS: no attribute walk per message, a cheap clock -----------------------------------
    real_unix_time = sqs.unix_time

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else float(real_unix_time(dt))

    def unix_time_millis(dt: Any = None) -> float:
        return unix_time(dt) * 1000.0

    def is_message_valid_based_on_retention_period(
        self: Any, queue_name: str, message: Any
    ) -> bool:
        retention_s = int(self.get_queue(queue_name).message_retention_period)
        return bool(retention_s + message.sent_timestamp / 1000 > unix_time())

    replace(sqs, "unix_time", unix_time)
    replace(sqs, "unix_time_millis", unix_time_millis)
    replace(
        sqs.SQSBackend,
        "is_message_valid_based_on_retention_period",
        is_message_valid_based_on_retention_period,
    )
    try:
        yield stats
    finally:
        for owner, name, value in reversed(saved_attrs):
            setattr(owner, name, value)


def run_chaos(
    config: ChaosConfig,
    *,
    template: Path | None = None,
    console: Console | None = None,
    results: Path | None = None,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the scenario; return the summary (`ok` is False if an invariant failed).

    Raises ChaosConfigError if `config` breaks the template's rules (`ChaosConfig.problems`).

    `console` shows progress (None: silent); `results` is the markdown file whose "Chaos run"
    section receives the figures (None: not written); `work_dir` holds the death log and the
    function logs (default: a new temporary directory).
    """
    broken = config.problems()
    if broken:
        raise ChaosConfigError("the configuration breaks the product's rules: " + "; ".join(broken))
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    template_path = find_template(template)
    work = work_dir or Path(tempfile.mkdtemp(prefix="iotsched-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    death_log = work / "deaths.jsonl"
    death_log.unlink(missing_ok=True)
    runtime = LocalRuntime(
        template_path,
        manual_clock=True,
        workers=config.workers,
        dispatchers=2,
        parameter_overrides={
            "WorkerTimeoutSeconds": str(config.worker_timeout_s),
            "ShardVisibilityTimeoutSeconds": str(config.visibility_timeout_s),
            # Failover first: one shard per invocation, so that a death strands no other shard
            # (template.yaml, WorkerBatchSize; the default of 10 is the cheaper setting).
            "WorkerBatchSize": str(config.batch_size),
            "MaxReceiveCount": str(config.max_receive_count),
            "ShardLeaseSeconds": str(config.shard_lease_s),
        },
        env_overrides={
            "IOTSCHED_LEASE_MARGIN_S": str(config.lease_margin_s),
            "IOTSCHED_DISPATCH_LEASE_S": str(config.dispatch_lease_s),
            "IOTSCHED_FAULT_KILL_AFTER_CLAIM": str(config.dispatcher_kill_probability),
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        },
        start_at=CHAOS_START,
        log_dir=work / "logs",
        adversary=AdversaryConfig.moderate(seed=config.seed) if config.adversary else None,
    )
    say = console.print if console else (lambda *a, **k: None)
    run = _Run(death_log=death_log)
    with fast_moto() as emulator, runtime:
        services = build(runtime.settings())
        say(
            f"[bold]iotsched chaos[/]: emulator at {runtime.endpoint_url}, {config.workers} "
            f"workers, 2 dispatchers, logs in {work}"
        )
        say(REAL_TIME_NOTE.format(c=config))
        _apply_task(services, config, death_log)
        with Progress(disable=console is None, console=console, transient=True) as progress:
            _fire(runtime, services, config, run, progress)
            _wait_final(runtime, services, config, run, progress, death_log)
        summary = _check(runtime, services, config, run, death_log)
        summary["emulator"] = dict(emulator)
        summary["adversary"] = runtime.adversary.stats() if runtime.adversary else None
    summary["work_dir"] = str(work)
    summary["duration_s"] = round(time.monotonic() - started, 1)
    summary["machine"] = _machine(load_before)
    (work / "summary.json").write_text(json.dumps(summary, default=str, indent=1), "utf-8")
    if results is not None:
        write_results(results, summary)
    if console:
        print_summary(console, summary)
    return summary


#: What runs on real time, said in the output (the run takes minutes at the default timeouts).
REAL_TIME_NOTE = (
    "Real time: the workers, their leases ({c.lease_s} s, renewed every third), the task "
    "timeout ({c.task_timeout_s} s), the function timeout ({c.worker_timeout_s} s), the "
    "visibility timeout ({c.visibility_timeout_s} s) and the sweeps (every {c.sweep_every_s:g} "
    "s) all run on the wall clock; only the scheduler's tick clock is replayed (one slot a "
    "day, ticked at once)."
)


def _apply_task(services: Services, config: ChaosConfig, death_log: Path) -> None:
    task = {
        "id": CHAOS_TASK,
        "handler": "chaos",
        "description": "chaos run: effects through the ledger, random SIGKILLs",
        "trigger": {"rate": "1d"},
        "sharding": {
            "strategy": "id_range",
            "shards": config.shards,
            "key_space": "device_id",
            "id_max": config.shards * 1000,
        },
        # A tick whose dispatcher died leaves the task's clock where it was; the next tick
        # sees that slot as missed and must still fire it (not skip it).
        "misfire": {"policy": "catch_up", "max_catch_up": 500},
        "retry": {"max_attempts": config.max_attempts, "backoff_s": 0},
        "timeout_s": config.task_timeout_s,
        "instance_timeout_s": 3600,
        "params": {
            "effects": config.effects,
            "kill_probability": config.kill_probability,
            "unit_seconds": config.unit_seconds,
            "death_log": str(death_log),
            # with batches: which invocation holds which records when (see `_stranded`)
            **({"start_log": str(_starts(death_log))} if config.batch_size > 1 else {}),
            "seed": config.seed,
        },
    }
    definitions = parse_task_file({"tasks": [task]}, handlers=registry())
    apply_tasks(definitions, services.tasks, now=CHAOS_START - timedelta(minutes=1))


def _tick(runtime: LocalRuntime, run: _Run, at: datetime) -> None:
    """Deliver the tick for `at` twice, concurrently; a dispatcher death is counted, not fatal."""
    run.tick_calls += 1
    run.deliveries += 2
    try:
        results = runtime.tick(at, repeat=2)
    except RuntimeError_:
        # A dispatcher host died mid-invocation (the fault after a claim): the runtime has
        # started a new one; the claim it left in `planning` is resumed later.
        run.dispatcher_kills += 1
        return
    run.tick_reports.extend(r.report for r in results)


def _maybe_sweep(runtime: LocalRuntime, config: ChaosConfig, run: _Run) -> None:
    if time.monotonic() - run.last_sweep < config.sweep_every_s:
        return
    run.last_sweep = time.monotonic()
    try:
        report = runtime.sweep(runtime.now())
    except RuntimeError_:
        run.sweep_errors += 1
        return
    run.sweeps += 1
    for key, value in report.items():
        if isinstance(value, list):
            run.sweep_totals[key] += len(value)
    swept_at = time.time()
    run.requeues.extend((swept_at, str(name)) for name in report.get("requeued_shards", []))


def _fire(
    runtime: LocalRuntime, services: Services, config: ChaosConfig, run: _Run, progress: Progress
) -> None:
    """Tick day after day; go on (bounded) until a dispatcher died between claim and send.

    The next day is ticked once at most `max_open` fired instances are still open: the load a
    deployment is sized for. (Ticking all days at once would queue every shard behind a
    backlog that the emulator works off in minutes, and a shard message the sweeper re-sends
    would wait behind all of it: that measures the backlog, not failover.)
    """
    bar = progress.add_task("ticks (each delivered twice)", total=config.instances)
    started = time.monotonic()
    limit = config.instances + config.extra_instances
    n = 0
    while n < config.instances or (
        run.dispatcher_kills < config.min_dispatcher_kills and n < limit
    ):
        if not _wait_open_below(runtime, services, config, run, progress, bar):
            break  # stuck: the checks will say what is open
        at = CHAOS_START + n * SLOT
        _tick(runtime, run, at)
        run.ticks.append(at)
        run.open_slots.append(at)
        n += 1
        progress.update(bar, total=max(config.instances, n), completed=n)
        _maybe_sweep(runtime, config, run)
    run.fire_s = round(time.monotonic() - started, 1)


def _wait_open_below(
    runtime: LocalRuntime,
    services: Services,
    config: ChaosConfig,
    run: _Run,
    progress: Progress,
    bar: TaskID,
) -> bool:
    """Sweep and wait until fewer than `max_open` fired instances are open (False: timed out)."""
    deadline = time.monotonic() + config.final_within_s
    while True:
        # (one GetItem per open slot: cheaper on the emulator than listing every instance)
        run.open_slots = [s for s in run.open_slots if not _final(services, s)]
        open_ = len(run.open_slots)
        progress.update(
            bar,
            description=f"ticks (each delivered twice): {open_} open, dispatcher deaths "
            f"{run.dispatcher_kills}, worker deaths {_count_lines(run.death_log)}",
        )
        if open_ < config.max_open:
            return True
        if time.monotonic() > deadline:
            return False
        _maybe_sweep(runtime, config, run)
        time.sleep(0.5)


def _wait_final(
    runtime: LocalRuntime,
    services: Services,
    config: ChaosConfig,
    run: _Run,
    progress: Progress,
    death_log: Path,
) -> None:
    """Sweep and wait until every fired slot has a final instance, or the bound passes."""
    expected = len(run.ticks)
    bar: TaskID = progress.add_task("instances final", total=expected)
    since = time.monotonic()
    deadline = since + config.final_within_s
    last_redelivery = since
    while time.monotonic() < deadline:
        _maybe_sweep(runtime, config, run)
        instances = _instances(services)
        done = sum(1 for i in instances if i.status in FINAL)
        progress.update(
            bar,
            completed=done,
            description=f"instances final, worker deaths {_count_lines(death_log)}",
        )
        if done == expected and len(instances) == expected:
            run.final_after_s = round(time.monotonic() - since, 1)
            return
        # Both deliveries of the last tick may have died before claiming every slot: once the
        # dispatch lease has passed, deliver that tick again (as EventBridge's retry would).
        if (
            len(instances) < expected
            and time.monotonic() - last_redelivery > config.dispatch_lease_s + 1
        ):
            _tick(runtime, run, run.ticks[-1])
            last_redelivery = time.monotonic()
        time.sleep(2.0)


def _final(services: Services, slot: datetime) -> bool:
    instance = services.instances.get_instance(instance_id_for(CHAOS_TASK, slot))
    return instance is not None and instance.status in FINAL


def _instances(services: Services) -> list[InstanceRecord]:
    return services.instances.list_instances(task_id=CHAOS_TASK, limit=100_000)


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


def _deaths(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _scan_effects(runtime: LocalRuntime) -> Iterator[dict[str, Any]]:
    """The effect counters (`APPLIED#`) and ledger entries (`EFFECT#`) in the table."""
    ddb = AwsClients(region="us-east-1", endpoint_url=runtime.endpoint_url).dynamodb()
    pages = ddb.get_paginator("scan").paginate(
        TableName=runtime.settings().table,
        FilterExpression="begins_with(pk, :applied) OR begins_with(pk, :effect)",
        ExpressionAttributeValues={":applied": {"S": APPLIED_PREFIX}, ":effect": {"S": "EFFECT#"}},
        ConsistentRead=True,
    )
    for page in pages:
        yield from page.get("Items", [])


# -- the invariants ---------------------------------------------------------------------------


def _check(
    runtime: LocalRuntime, services: Services, config: ChaosConfig, run: _Run, death_log: Path
) -> dict[str, Any]:
    # The effects first: a key applied later than this scan cannot then be missing from the
    # shard records read next (the key and the attempt's key list commit together).
    effect_items = list(_scan_effects(runtime))
    instances = {i.instance_id: i for i in _instances(services)}
    by_slot = {i.slot: i for i in instances.values()}
    shards: dict[tuple[str, int], ShardRecord] = {}
    for instance_id in instances:
        for record in services.instances.list_shards(instance_id):
            shards[(instance_id, record.index)] = record
    invariants: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        invariants.append({"name": name, "ok": bool(ok), "detail": detail})

    # 1. every instance final, each within the bound of its claim
    missing_slots = [s for s in run.ticks if s not in by_slot]
    not_final = [i.instance_id for i in instances.values() if i.status not in FINAL]
    instance_status = Counter(i.status.value for i in instances.values())
    durations = [
        (i.finished_at - i.created_at).total_seconds()
        for i in instances.values()
        if i.finished_at is not None
    ]
    slowest = max(durations, default=0.0)
    check(
        "every instance final within the bound",
        not missing_slots
        and not not_final
        and run.final_after_s is not None
        and slowest <= config.final_within_s,
        f"{len(instances) - len(not_final)}/{len(run.ticks)} final ({_fmt(instance_status)}); "
        f"claim -> final median {_median(durations)} s, max {_round(slowest)} s "
        f"(bound {config.final_within_s:g} s)"
        + (
            f"; the last {run.final_after_s} s after the last tick"
            if run.final_after_s is not None
            else f"; open {config.final_within_s:g} s after the last tick"
        )
        + (f"; never claimed: {len(missing_slots)}" if missing_slots else ""),
    )

    # 2. no shard lost, none succeeded twice
    planned = [(i.instance_id, n) for i in instances.values() for n in range(i.plan.count)]
    lost = [p for p in planned if p not in shards or not shards[p].status.final]
    shard_status = Counter(shards[p].status.value if p in shards else "missing" for p in planned)
    twice = [
        f"{iid}#{n}"
        for (iid, n), s in shards.items()
        if sum(1 for a in s.attempts if a.outcome == "succeeded") > 1
    ]
    check(
        "no shard lost",
        not lost,
        f"{len(planned) - len(lost)}/{len(planned)} planned shards have a final record; "
        f"{_fmt(shard_status)}",
    )
    check(
        "no shard with two successful attempts",
        not twice,
        f"{len(twice)} shards succeeded twice" + (f": {twice[:5]}" if twice else ""),
    )

    # 3. every effect key applied exactly once
    effects = _effects_check(effect_items, instances, shards, config)
    check("every effect key applied exactly once", effects["ok"], effects["detail"])

    # 4. resumption after a worker death
    deaths = _deaths(death_log)
    resumption = _resumption(deaths, shards, run.requeues)
    goal = config.resume_goal_s
    median_goal = config.resume_median_goal_s
    if config.resume_max_goal_s > 0:
        name = f"dead worker's shard resumed within {median_goal:g} s (median), {goal:g} s (max)"
        goal_text = (
            f"goals: median {median_goal:g} s, max {goal:g} s; lease {config.lease_s} s, "
            f"a sweep every {config.sweep_every_s:g} s, visibility timeout "
            f"{config.visibility_timeout_s} s"
        )
    else:
        name = f"dead worker's shard resumed within timeout + {RESUME_SLACK_S} s"
        goal_text = (
            f"goal {goal:g} s = visibility timeout {config.visibility_timeout_s} s + "
            f"{RESUME_SLACK_S} s"
        )
    check(
        name,
        resumption["count"] > 0
        and resumption["max_s"] is not None
        and resumption["max_s"] <= goal
        and (median_goal <= 0 or resumption["median_s"] <= median_goal)
        and not resumption["unresumed_open"],
        f"median {resumption['median_s']} s, max {resumption['max_s']} s over "
        f"{resumption['count']} deaths ({goal_text})"
        + (
            f"; {resumption['unresumed_ended']} ended without a next attempt"
            if resumption["unresumed_ended"]
            else ""
        ),
    )

    # 5. the records a dead worker's batch had not started (WorkerBatchSize above 1)
    stranded = _stranded(deaths, shards, _deaths(_starts(death_log)))
    if config.batch_size > 1:
        check(
            f"records waiting in a dead worker's batch held again within {goal:g} s",
            stranded["waiting"] > 0
            and stranded["held_again"] == stranded["waiting"]
            and stranded["held_again_max_s"] is not None
            and stranded["held_again_max_s"] <= goal
            and not stranded["never_started_open"],
            f"{stranded['held_again']} of {stranded['waiting']} records waiting at a death were "
            f"held by another invocation: median {stranded['held_again_median_s']} s, max "
            f"{stranded['held_again_max_s']} s after the death (visibility hold "
            f"{config.shard_lease_s} s, visibility timeout {config.visibility_timeout_s} s); "
            f"their first attempt started: median {stranded['median_s']} s, max "
            f"{stranded['max_s']} s (behind the records ahead of them in that batch); started "
            f"before the death (a copy ran) {stranded['started_before']}, never started "
            f"{stranded['never_started_open']} open + {stranded['never_started_ended']} in "
            "ended instances",
        )

    # the chaos itself
    attempts = sum(len(s.attempts) for s in shards.values())
    kill_fraction = len(deaths) / attempts if attempts else 0.0
    check(
        f"worker SIGKILLed on >= {config.min_kill_fraction:.0%} of attempts",
        kill_fraction >= config.min_kill_fraction,
        f"{len(deaths)} of {attempts} attempts ({kill_fraction:.1%})",
    )
    resumed_dispatches = _resumed_dispatches(instances.values(), config)
    check(
        "dispatcher killed between claim and enqueue",
        run.dispatcher_kills >= config.min_dispatcher_kills,
        f"{run.dispatcher_kills} dispatcher deaths; {len(resumed_dispatches)} claims resumed "
        f"after their dispatch lease (median {_median(resumed_dispatches)} s after the claim)",
    )
    check(
        "every tick delivered twice",
        run.deliveries == 2 * run.tick_calls,
        f"{run.tick_calls} ticks, {run.deliveries} deliveries",
    )

    failovers = sum(1 for s in shards.values() for a in s.attempts[:-1] if a.outcome == "lost")
    dead_lettered = sum(1 for s in shards.values() if s.error == "dead_lettered")
    return {
        "ok": all(i["ok"] for i in invariants),
        "command": config.command(),
        "config": asdict(config),
        "instances": len(instances),
        "shards": len(planned),
        "instances_by_status": dict(instance_status),
        "shards_by_status": dict(shard_status),
        "attempts": attempts,
        "worker_kills": len(deaths),
        "kill_fraction": round(kill_fraction, 4),
        "failovers": failovers,
        "dispatcher_kills": run.dispatcher_kills,
        "dispatches_resumed": len(resumed_dispatches),
        "ticks": run.tick_calls,
        "tick_deliveries": run.deliveries,
        "duplicate_claims_rejected": sum(
            int(r.get("duplicate_claims", 0)) for r in run.tick_reports
        ),
        "sweeps": run.sweeps,
        "sweep_errors": run.sweep_errors,
        "sweeper": dict(run.sweep_totals),
        "dead_lettered_shards": dead_lettered,
        "function_timeouts": runtime.timeouts,
        "worker_respawns": runtime.respawns,
        "fire_s": run.fire_s,
        "final_after_s": run.final_after_s,
        "instance_duration_s": {
            "median": _median(durations),
            "max": _round(max(durations)) if durations else None,
        },
        "effects": effects["figures"],
        "resumption": resumption,
        "stranded": stranded,
        "invariants": invariants,
    }


def _effects_check(
    effect_items: list[dict[str, Any]],
    instances: dict[str, InstanceRecord],
    shards: dict[tuple[str, int], ShardRecord],
    config: ChaosConfig,
) -> dict[str, Any]:
    applied: dict[str, int] = {}
    ledger: dict[str, dict[str, Any]] = {}
    for item in effect_items:
        pk = item["pk"]["S"]
        if pk.startswith(APPLIED_PREFIX):
            applied[pk.removeprefix(APPLIED_PREFIX)] = int(item.get("applied", {"N": "0"})["N"])
        else:
            ledger[pk.removeprefix("EFFECT#")] = item
    possible: set[str] = set()
    required: set[str] = set()  # the keys of succeeded shards
    for (iid, n), record in shards.items():
        keys = {
            effect_key(CHAOS_TASK, instances[iid].business_date, n, k)
            for k in range(config.effects)
        }
        possible |= keys
        if record.status.value == "succeeded":
            required |= keys
    missing = sorted(k for k in required if k not in applied)
    duplicated = sorted(k for k, count in applied.items() if count != 1)
    unexpected = sorted(k for k in applied if k not in possible)
    # Each applied key is a ledger entry, listed in the keys of exactly one attempt.
    listed: Counter[str] = Counter(
        key for s in shards.values() for a in s.attempts for key in a.keys
    )
    unledgered = sorted(k for k in applied if k not in ledger)
    not_listed_once = sorted(k for k in applied if listed[k] != 1)
    ok = not (missing or duplicated or unexpected or unledgered or not_listed_once)
    detail = (
        f"{len(required)} keys of succeeded shards: {len(required) - len(missing)} applied, "
        f"{len(missing)} missing; {len(applied)} counters, {len(duplicated)} != 1; "
        f"{len(unexpected)} unexpected; {len(ledger)} ledger entries, "
        f"{len(not_listed_once)} applied keys not in exactly one attempt's record"
    )
    if not ok:
        detail += f"; e.g. {(missing + duplicated + unexpected + unledgered + not_listed_once)[:3]}"
    examples = []
    for key in not_listed_once[:5]:
        entry = ledger.get(key, {})
        iid = entry.get("instance_id", {}).get("S", "")
        idx = int(entry.get("idx", {}).get("N", "-1"))
        owner = shards.get((iid, idx))
        examples.append(
            {
                "key": key,
                "listed": listed[key],
                "ledger_attempt": entry.get("attempt", {}).get("N"),
                "attempts": [
                    {"outcome": a.outcome, "keys": a.keys}
                    for a in (owner.attempts if owner else [])
                ],
            }
        )
    return {
        "ok": ok,
        "detail": detail,
        "figures": {
            "required": len(required),
            "applied_counters": len(applied),
            "applied_once": sum(1 for c in applied.values() if c == 1),
            "missing": len(missing),
            "applied_more_than_once": len(duplicated),
            "unexpected": len(unexpected),
            "ledger_entries": len(ledger),
            "not_in_one_attempt_record": len(not_listed_once),
            "not_in_one_attempt_record_examples": examples,
        },
    }


def _resumption(
    deaths: list[dict[str, Any]],
    shards: dict[tuple[str, int], ShardRecord],
    requeues: list[tuple[float, str]],
) -> dict[str, Any]:
    """Death instant (logged by the handler) to the start of the shard's next attempt.

    A dead worker stops renewing its lease; once the lease has ended, the next sweep sends a
    fresh message and the worker that receives it takes the shard over. `via_sweeper` counts
    the resumptions that followed a sweeper's send (all of them, unless the dead worker's
    own message came back first: its visibility timeout is much longer).
    """
    delays: list[float] = []
    via_sweeper: list[float] = []
    slowest: list[tuple[float, str]] = []
    unresumed_ended = 0
    unresumed_open = 0
    unrecorded = 0
    for death in deaths:
        record = shards.get((death["instance_id"], int(death["shard"])))
        number = int(death["attempt"])
        if record is None or len(record.attempts) < number:
            unrecorded += 1
            continue
        if record.attempts[number - 1].outcome not in (None, "lost"):
            unrecorded += 1  # the dead attempt ends lost (closed by the next), never by itself
        if len(record.attempts) > number:
            nxt = record.attempts[number]
            died, resumed = float(death["time"]), nxt.started_at.timestamp()
            delays.append(resumed - died)
            name = f"{death['instance_id']}#{death['shard']}"
            if any(n == name and died <= t <= resumed for t, n in requeues):
                via_sweeper.append(delays[-1])
            slowest.append((delays[-1], f"{name}/{number}"))
        elif record.status.final:
            unresumed_ended += 1  # ended by the sweeper or the DLQ handler, not resumed
        else:
            unresumed_open += 1
    return {
        "count": len(delays),
        "median_s": _round(statistics.median(delays)) if delays else None,
        "p90_s": _round(statistics.quantiles(delays, n=10)[-1]) if len(delays) >= 2 else None,
        "max_s": _round(max(delays)) if delays else None,
        "via_sweeper": len(via_sweeper),
        "via_sweeper_median_s": _median(via_sweeper),
        "unresumed_ended": unresumed_ended,
        "unresumed_open": unresumed_open,
        "deaths_not_on_record": unrecorded,
        "slowest": [
            {"s": _round(d), "shard_attempt": name} for d, name in sorted(slowest)[-3:][::-1]
        ],
    }


def _starts(death_log: Path) -> Path:
    return death_log.with_name("starts.jsonl")


def _stranded(
    deaths: list[dict[str, Any]],
    shards: dict[tuple[str, int], ShardRecord],
    starts: list[dict[str, Any]],
) -> dict[str, Any]:
    """For each record a dead invocation had received and not started (`waiting`, logged by the
    handler as it died): the death to the first time another invocation held it (an attempt
    of that invocation started, logged with the records it had not started: `starts`), and
    to its own first attempt's start (later when it waits behind others in that batch)."""
    delays: list[float] = []
    held: list[float] = []
    before = never_open = never_ended = waiting = 0
    for death in deaths:
        died = float(death["time"])
        for instance_id, index in death.get("waiting", []):
            waiting += 1
            record_id = [instance_id, int(index)]
            again = [
                float(s["time"]) - died
                for s in starts
                if float(s["time"]) > died
                and s.get("pid") != death.get("pid")
                and (
                    [s["instance_id"], int(s["shard"])] == record_id
                    or record_id in [[i, int(n)] for i, n in s.get("waiting", [])]
                )
            ]
            if again:
                held.append(min(again))
            record = shards.get((instance_id, int(index)))
            if record is None or not record.attempts:
                if record is not None and record.status.final:
                    never_ended += 1
                else:
                    never_open += 1
                continue
            started = record.attempts[0].started_at.timestamp()
            if started < died:
                before += 1  # a copy of it (a resend, a copy given back) ran elsewhere first
                continue
            delays.append(started - died)
    return {
        "waiting": waiting,
        "held_again": len(held),
        "held_again_median_s": _median(held),
        "held_again_max_s": _round(max(held)) if held else None,
        "count": len(delays),
        "median_s": _median(delays),
        "max_s": _round(max(delays)) if delays else None,
        "started_before": before,
        "never_started_open": never_open,
        "never_started_ended": never_ended,
    }


def _resumed_dispatches(instances: Any, config: ChaosConfig) -> list[float]:
    """Seconds from claim to resumed send, for claims whose dispatch lease was taken again."""
    delays = []
    for inst in instances:
        if inst.dispatch_lease_until is None:
            continue
        resumed_at = inst.dispatch_lease_until - timedelta(seconds=config.dispatch_lease_s)
        delay = (resumed_at - inst.created_at).total_seconds()
        if delay > 0.5:  # the lease was taken again after the claim's own
            delays.append(delay)
    return delays


def _median(values: list[float]) -> float | None:
    return _round(statistics.median(values)) if values else None


def _round(value: float) -> float:
    return round(value, 2)


def _fmt(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))


# -- output ------------------------------------------------------------------------------------


def _figures(summary: dict[str, Any]) -> list[tuple[str, str]]:
    res = summary["resumption"]
    eff = summary["effects"]
    return [
        ("instances x shards", f"{summary['instances']} x {summary['config']['shards']}"),
        ("instances by status", _fmt(Counter(summary["instances_by_status"]))),
        (
            "instance claim -> final",
            f"median {summary['instance_duration_s']['median']} s, "
            f"max {summary['instance_duration_s']['max']} s (bound "
            f"{summary['config']['final_within_s']:g} s; at most "
            f"{summary['config']['max_open']} open at a time)",
        ),
        ("shards by status", _fmt(Counter(summary["shards_by_status"]))),
        (
            "attempts / worker SIGKILLs",
            f"{summary['attempts']} / {summary['worker_kills']} "
            f"({summary['kill_fraction']:.1%}); failovers on record {summary['failovers']}",
        ),
        (
            "death -> resumption",
            f"median {res['median_s']} s, p90 {res['p90_s']} s, max {res['max_s']} s "
            f"({_goal_text(summary['config'])}); "
            + (
                f"{res['via_sweeper']} via a sweeper re-send (median "
                f"{res['via_sweeper_median_s']} s)"
                if res["via_sweeper"]
                else "none via a sweeper re-send"
            ),
        ),
        *(
            [
                (
                    "death -> the batch's waiting records held again / started",
                    f"held by another invocation: median "
                    f"{summary['stranded']['held_again_median_s']} s, max "
                    f"{summary['stranded']['held_again_max_s']} s; first attempt started: median "
                    f"{summary['stranded']['median_s']} s, max {summary['stranded']['max_s']} s "
                    f"(over {summary['stranded']['waiting']} records the dead invocations had "
                    "received and not started)",
                )
            ]
            if summary["config"].get("batch_size", 1) > 1 and "stranded" in summary
            else []
        ),
        (
            "dispatcher kills (claim, no send)",
            f"{summary['dispatcher_kills']}; claims resumed {summary['dispatches_resumed']}",
        ),
        (
            "ticks / deliveries",
            f"{summary['ticks']} / {summary['tick_deliveries']}; duplicate claims rejected "
            f"{summary['duplicate_claims_rejected']}",
        ),
        (
            "effect keys",
            f"{eff['required']} required, {eff['applied_once']} applied once, "
            f"{eff['applied_more_than_once']} more than once, {eff['missing']} missing",
        ),
        (
            "sweeps",
            f"{summary['sweeps']}: " + (_fmt(Counter(summary["sweeper"])) or "nothing to do"),
        ),
        (
            "adversarial DynamoDB: faults injected",
            _fmt(Counter({k: v for k, v in summary["adversary"].items() if k != "requests"}))
            + f" (of {summary['adversary'].get('requests', 0)} DynamoDB requests)"
            if summary.get("adversary")
            else "off (plain moto)",
        ),
        ("dead-lettered shards", str(summary["dead_lettered_shards"])),
        (
            "worker function timeouts / respawns",
            f"{summary['function_timeouts']} / {summary['worker_respawns']}",
        ),
        (
            "ticking / last instance final",
            f"{summary['fire_s']} s / {summary['final_after_s']} s after the last tick",
        ),
        ("wall time", f"{summary['duration_s']} s"),
    ]


def _goal_text(config: dict[str, Any]) -> str:
    if config.get("resume_max_goal_s"):
        return f"goals: median {config['resume_median_goal_s']:g} s, max {config['resume_max_goal_s']:g} s"
    return f"goal {config['visibility_timeout_s'] + RESUME_SLACK_S} s"


def print_summary(console: Console, summary: dict[str, Any]) -> None:
    """The figures and the invariants as two tables."""
    figures = Table("figure", "value", title="chaos run")
    for name, value in _figures(summary):
        figures.add_row(name, value)
    console.print(figures)
    checks = Table("invariant", "", "detail", title="invariants")
    for inv in summary["invariants"]:
        checks.add_row(inv["name"], "[green]ok[/]" if inv["ok"] else "[red]FAIL[/]", inv["detail"])
    console.print(checks)
    console.print("[bold green]all invariants hold[/]" if summary["ok"] else "[bold red]FAILED[/]")


RESULTS_HEADING = "## Chaos run"
#: The `--default-timeouts` run's section (its own: `make chaos` replaces the one above).
DEFAULT_TIMEOUTS_HEADING = "## Chaos run at the template's default timeouts"


def _heading(config: dict[str, Any]) -> str:
    """The section a run's figures go to: batches of several records have their own."""
    if not config.get("default_timeouts_preset"):
        return RESULTS_HEADING
    batch = int(config.get("batch_size", 1))
    return DEFAULT_TIMEOUTS_HEADING + (f", batches of {batch}" if batch > 1 else "")


def _machine(load_before: float) -> str:
    """The machine, as the results state it (it is shared: the load is part of the figures)."""
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {load_before:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end"
    )


def results_section(summary: dict[str, Any]) -> str:
    """The "Chaos run" section of bench/results.md."""
    config = summary["config"]
    preset = bool(config.get("default_timeouts_preset"))
    if preset:
        intro = [
            _heading(config),
            "",
            f"Last run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC on "
            f"{summary.get('machine') or f'{os.cpu_count()} CPUs'}, on real time "
            f"({summary.get('duration_s')} s of wall time):",
            "",
            "```sh",
            summary["command"],
            "```",
            "",
            "The deployment is template.yaml's with its default timeouts: worker timeout "
            f"{config.get('worker_timeout_s')} s, shard-queue visibility timeout "
            f"{config.get('visibility_timeout_s')} s, shard lease "
            f"{config.get('shard_lease_s')} s (renewed every third by the worker), a sweep every "
            f"{config.get('sweep_every_s'):g} s as the template's rule; task timeout "
            f"{config.get('task_timeout_s')} s, shards of {config.get('effects')} units of "
            f"{config.get('unit_seconds'):g} s, "
            + (
                "one shard per worker invocation "
                if config.get("batch_size", 1) == 1
                else f"up to {config.get('batch_size')} shard messages per worker invocation "
            )
            + f"(`WorkerBatchSize={config.get('batch_size')}`), {config.get('workers')} worker "
            "processes. Workers SIGKILL themselves mid-shard; resumption is measured from the "
            "death (logged by the handler) to the next attempt's start, both on the wall clock"
            + (
                "; for the records a dead invocation had received and not started (the handler "
                "logs them as it dies), from the death to the first start of an attempt in "
                "another invocation that held them (the handler logs, as each attempt starts, "
                "the records its invocation has not started), and to their own first start."
                if config.get("batch_size", 1) > 1
                else "."
            ),
            "",
        ]
    else:
        intro = [
            RESULTS_HEADING,
            "",
            f"Last run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC on "
            f"{summary.get('machine') or f'{os.cpu_count()} CPUs'}, by `make chaos`:",
            "",
            "```sh",
            summary["command"],
            "```",
            "",
            "The deployment is template.yaml's, scaled down with its rules kept: one shard per "
            "worker invocation (`WorkerBatchSize=1`, the failover-first setting; the default is "
            f"10), worker timeout {config.get('worker_timeout_s')} s, shard-queue "
            f"visibility timeout {config.get('visibility_timeout_s')} s (>= {VISIBILITY_FACTOR}x "
            f"the worker timeout), task timeout {config.get('task_timeout_s')} s + lease margin "
            f"{config.get('lease_margin_s')} s, {config.get('workers')} worker processes (the "
            "event source's concurrency), a sweep every "
            f"{config.get('sweep_every_s')} s.",
            "",
        ]
    lines = [
        *intro,
        "| figure | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in _figures(summary)),
        "",
        "| invariant | result | detail |",
        "|---|---|---|",
        *(
            f"| {i['name']} | {'ok' if i['ok'] else 'FAIL'} | {i['detail']} |"
            for i in summary["invariants"]
        ),
        "",
        f"Result: {'all invariants hold' if summary['ok'] else 'FAILED'}.",
        "",
    ]
    return "\n".join(lines)


def write_results(path: Path, summary: dict[str, Any]) -> None:
    """Replace (or add) the "Chaos run" section of `path` (the `--default-timeouts` run's own
    section for that run); other sections stay as they are."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n\n"
    section = results_section(summary)
    heading = _heading(summary["config"])
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("" if end < 0 else text[end + 1 :])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# -- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """`python -m iotsched.local.chaos`: exit 0 if every invariant holds, 1 if not, 2 on bad use."""
    defaults = ChaosConfig()
    parser = argparse.ArgumentParser(
        prog="python -m iotsched.local.chaos",
        description="Chaos run of iotsched on the local runtime; checks the invariants.",
    )
    preset = ChaosConfig.default_timeouts()
    for name, flag in _OPTIONS:
        default = getattr(defaults, name)
        parser.add_argument(
            flag,
            dest=name,
            type=type(default),
            default=None,
            help=f"default {default} ({getattr(preset, name)} with --default-timeouts)",
        )
    parser.add_argument(
        "--default-timeouts",
        action="store_true",
        help="the template's default timeouts (worker 300 s, visibility 1800 s, lease 20 s, a "
        "sweep every 60 s), on real time: measures failover against 60 s (median) and 90 s "
        "(max); several minutes",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--template", type=Path, default=None, help="template.yaml")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="markdown file for the figures (default: bench/results.md beside the template)",
    )
    parser.add_argument("--no-results", action="store_true", help="do not write the results")
    args = parser.parse_args(argv)
    base = preset if args.default_timeouts else defaults
    config = replace(
        base,
        **{name: getattr(args, name) for name, _ in _OPTIONS if getattr(args, name) is not None},
    )
    if config.instances < 1 or config.shards < 1 or not 0 <= config.kill_probability < 1:
        parser.error("need --instances >= 1, --shards >= 1 and 0 <= --kill-probability < 1")
    if config.problems():
        parser.error("; ".join(config.problems()))
    try:
        template = find_template(args.template)
    except DemoError as exc:
        parser.error(str(exc))
    results = (
        None if args.no_results else (args.results or template.parent / "bench" / "results.md")
    )
    # With --json, progress and tables go to stderr and stdout carries only the JSON object.
    console = Console(stderr=args.json)
    summary = run_chaos(config, template=template, console=console, results=results)
    if args.json:
        sys.stdout.write(json.dumps(summary, default=str) + "\n")
    elif results is not None:
        console.print(f"figures written to {results}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
