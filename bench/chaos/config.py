"""A chaos run's configuration: the sizes, the faults, the deployment scaled down, and the rules
of template.yaml that configuration must keep (`ChaosConfig.problems`)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from iotsched.core.instance_record import InstanceStatus

#: How the chaos run is started (`ChaosConfig.command`, the results' command lines).
PROG = "python -m bench.chaos"

CHAOS_TASK = "chaos"
CHAOS_START = datetime(2026, 1, 1, tzinfo=UTC)
SLOT = timedelta(days=1)  # one instance per day: each has its own business date
#: What "final" means for this run's instances: the store's own meaning, every final status.
FINAL = frozenset(status for status in InstanceStatus if status.final)
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
    # The bucket dispatcher's function timeout (template DispatcherTimeoutSeconds, 10 to 900):
    # a dispatcher that dies holds its bucket's lease until its invocation's end, and the
    # bucket's next minute waits behind it.
    dispatcher_timeout_s: int = 60
    # 1: DynamoDB is the adversarial one (iotsched.adversary, a moderate rate seeded by `seed`):
    # cancellations, throttles, lost responses, in-flight conflicts. 0: plain moto.
    adversary: int = 1
    # The shard lease the workers renew (template ShardLeaseSeconds); an attempt's lease is
    # this or its task timeout + margin, the shorter.
    shard_lease_s: int = 20
    # Shard messages per worker invocation (template WorkerBatchSize; 1: failover first).
    batch_size: int = 1
    # The template's IndexBuckets: each bucket is a query of every tick and sweep, which the
    # emulator (one request at a time) serves beside the shards' own requests.
    index_buckets: int = 32
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
        if not 10 <= self.dispatcher_timeout_s <= 900:
            found.append(
                f"dispatcher timeout {self.dispatcher_timeout_s} s outside 10..900 (template.yaml: "
                "DispatcherTimeoutSeconds)"
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
        args = PROG.split()
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
        for name, flag in OPTIONS:
            value = getattr(self, name)
            if name not in ("instances", "shards", "kill_probability", "seed") and value != getattr(
                defaults, name
            ):
                args += [flag, str(value)]
        return shlex.join(args)


#: ChaosConfig fields settable from the command line, with their flags.
OPTIONS = [
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
    ("index_buckets", "--index-buckets"),
    ("dispatcher_timeout_s", "--dispatcher-timeout"),
    ("resume_median_goal_s", "--resume-median-goal"),
    ("resume_max_goal_s", "--resume-max-goal"),
]


class ChaosConfigError(ValueError):
    """A chaos configuration that breaks the rules the product's deployment keeps."""
